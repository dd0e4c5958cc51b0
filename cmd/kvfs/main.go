// Command kvfs stores LLM KV-cache snapshots once, deduplicated by content,
// behind an ordinary filesystem.
//
// Usage:
//
//	kvfs <command> [flags] [arguments]
//
// Run "kvfs help" for the commands and "kvfs <command> --help" for each
// command's flags. Exit codes are listed in exitCode.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// command is one subcommand: its name, a one-line summary, and the function
// that parses its arguments and runs it.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"init", "create an empty store", runInit},
		{"mount", "mount a store as a filesystem", runMount},
		{"unmount", "unmount a kvfs mount", runUnmount},
		{"put", "store a local file in a store", runPut},
		{"get", "copy a file out of a store", runGet},
		{"ls", "list a store's directory", runLs},
		{"rm", "remove files or empty directories from a store", runRm},
		{"mv", "rename a file or directory in a store", runMv},
		{"stats", "print a store's sizes and dedup ratio", runStats},
		{"match", "find the snapshot that best seeds a prompt (longest prefix)", runMatch},
		{"inspect", "describe a cache file (a snapshot, llama.cpp state, safetensors) and how a mount stores it; verify a snapshot", runInspect},
		{"fsck", "check a store, mounted or not (and --repair it, unmounted); own exit statuses", runFsck},
		{"gc", "compact a store: rewrite mostly dead packs, remove dead ones", runGC},
		{"pool", "put, get, list and remove files of a pool shared by several hosts (S3 and etcd)", runPool},
		{"config", "show or change a store's capacity and retention settings", runConfig},
		{"pin", "keep files from eviction", runPin},
		{"unpin", "let pinned files be evicted again", runUnpin},
		{"version", "print the version and the revision it was built from", runVersion},
	}
}

// Exit codes, documented in README.md and in "kvfs help".
const (
	exitOK       = 0 // success
	exitFailure  = 1 // the operation failed: unreadable or invalid input, I/O error
	exitUsage    = 2 // bad command line
	exitCorrupt  = 3 // verification found bytes that do not match their hash
	exitCanceled = 4 // interrupted by SIGINT or SIGTERM (not kvfs mount -f's stop: stopOnSignal)
)

// usageError marks a bad command line; main prints the usage with it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errCorrupt marks a verification failure so that it exits with exitCorrupt.
var errCorrupt = errors.New("verification failed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code. It is the only
// place where errors become messages and exit codes.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-V") {
		args = []string{"version"}
	}
	if len(args) == 0 || isHelp(args[0]) {
		// "kvfs help help" and "kvfs --help -h" are this help too, not
		// a command's.
		if len(args) > 1 && !isHelp(args[1]) {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		printUsage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		var ue usageError
		var es exitStatus
		switch {
		case err == nil:
			return exitOK
		case errors.As(err, &es):
			if es.err != nil {
				fmt.Fprintf(stderr, "kvfs %s: %s\n", c.name, errorText(c.name, es.err))
			}
			return es.code
		case errors.Is(err, pflag.ErrHelp):
			var h helpText
			if errors.As(err, &h) {
				fmt.Fprint(stdout, h.text)
			}
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "kvfs %s: %s\nRun 'kvfs %s --help' for usage.\n", c.name, errorText(c.name, err), c.name)
			return exitUsage
		case ctx.Err() != nil:
			fmt.Fprintf(stderr, "kvfs %s: %s\n", c.name, interruptedText(errorText(c.name, err)))
			return exitCanceled
		case errors.Is(err, errCorrupt):
			fmt.Fprintf(stderr, "kvfs %s: %s\n", c.name, errorText(c.name, err))
			return exitCorrupt
		default:
			fmt.Fprintf(stderr, "kvfs %s: %s\n", c.name, errorText(c.name, err))
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "kvfs: unknown command %q\nRun 'kvfs help' for the list of commands.\n", args[0])
	return exitUsage
}

// errorText is err's message for "kvfs NAME: ...", without a "NAME: "
// of its own in front ("kvfs mount: mount: ..."), and with what a
// context's error means in place of its words: "context deadline
// exceeded" reached users (an S3 server that did not answer) and told
// them nothing. Commands with a timeout of their own say it (timedOut).
func errorText(name string, err error) string {
	msg := err.Error()
	for strings.HasPrefix(msg, name+": ") {
		msg = strings.TrimPrefix(msg, name+": ")
	}
	return strings.ReplaceAll(msg, context.DeadlineExceeded.Error(), "timed out (no answer in time)")
}

// interruptedText is the message of a command stopped by SIGINT or
// SIGTERM: "interrupted", and what it was doing, without the "context
// canceled" that its work ended with.
func interruptedText(msg string) string {
	for _, s := range []string{": " + context.Canceled.Error(), context.Canceled.Error()} {
		msg = strings.ReplaceAll(msg, s, "")
	}
	if msg = strings.TrimSpace(strings.TrimSuffix(msg, ":")); msg == "" {
		return "interrupted (SIGINT or SIGTERM)"
	}
	return "interrupted (SIGINT or SIGTERM): " + msg
}

// timedOut is err with a context's deadline named as the timeout d that
// flag sets: "S3 endpoint ...: no answer within 3s (--pool-timeout)".
func timedOut(err error, d time.Duration, flag string) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return timeoutError{err, fmt.Sprintf("no answer within %v (%s)", d, flag)}
}

type timeoutError struct {
	err  error
	what string
}

func (e timeoutError) Error() string {
	return strings.ReplaceAll(e.err.Error(), context.DeadlineExceeded.Error(), e.what)
}
func (e timeoutError) Unwrap() error { return e.err }

// isHelp reports whether arg asks for kvfs's own help.
func isHelp(arg string) bool { return arg == "help" || arg == "-h" || arg == "--help" }

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "kvfs stores LLM KV-cache snapshots once, deduplicated, behind a filesystem.\n\n")
	fmt.Fprintf(w, "Usage:\n  kvfs <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `  %-10s show this help, or a command's ("kvfs help inspect")

Exit codes:
  0  success
  1  the operation failed (unreadable or invalid input, I/O error)
  2  bad command line
  3  verification failed: stored bytes do not match their hash
  4  interrupted by SIGINT or SIGTERM (but kvfs mount -f, for which they
     are the way to stop: 0 once it has unmounted cleanly)
  (kvfs fsck has its own: see "kvfs help fsck")
`, "help")
}

// newFlags returns a flag set for a subcommand that reports errors to the
// caller instead of exiting, with a usage text that lists every flag.
// Nothing is printed while parsing: parseFlags returns the help text (for
// --help, which run prints to standard output, as restic and rclone do)
// or the error (which run prints to standard error, once).
func newFlags(name, usage, about string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kvfs %s %s\n\n%s\n", name, usage, about)
		if f := fs.FlagUsagesWrapped(helpColumns); f != "" {
			fmt.Fprintf(fs.Output(), "\nFlags:\n%s", f)
		}
	}
	return fs
}

// helpColumns is the width that flag descriptions are wrapped to.
const helpColumns = 100

// helpText is what --help asked for: a command's usage, for standard
// output. It matches pflag.ErrHelp.
type helpText struct{ text string }

func (h helpText) Error() string        { return "help requested" }
func (h helpText) Is(target error) bool { return target == pflag.ErrHelp }

// parseFlags parses args, turning pflag errors other than --help into
// usage errors.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	out := fs.Output()
	var help strings.Builder
	fs.SetOutput(&help)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return helpText{help.String()}
		}
		return usageError{err.Error()}
	}
	return nil
}
