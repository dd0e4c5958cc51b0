// Command testprogress turns the JSON events of go test -json into a log a
// person can follow through a long run: a line for each package as go test
// prints it, a line for each test that failed, was skipped or took long, a
// line at least every minute saying what is still running, and at the end
// the slowest tests. A failed test's whole output is printed. It exits
// non-zero if a test or package failed, or if no package finished.
//
// scripts/test pipes every pass through it:
//
//	go test -json ./... | go run ./internal/testprogress -pass full
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// key names a test in a package.
type key struct{ pkg, test string }

// progress is what the run has shown so far.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	pass    string
	start   time.Time
	running map[key]time.Time        // top-level tests running, since
	output  map[key]*strings.Builder // output of tests running
	times   []timed
	failed  int // tests and packages
	tests   struct{ passed, failed, skipped int }
	pkgs    int
	skipped map[string]int // by package
	slow    time.Duration
}

type timed struct {
	key
	d time.Duration
}

func main() {
	pass := flag.String("pass", "", "the pass's name, shown on every progress line")
	slow := flag.Duration("slow", 30*time.Second, "print each test that takes at least this long")
	every := flag.Duration("every", time.Minute, "how often to say what is still running")
	top := flag.Int("top", 15, "how many of the slowest tests to list at the end")
	tally := flag.String("tally", "", "a file to append the pass's counts to, as \"PASSED FAILED SKIPPED\"")
	times := flag.String("times", "", "a file to append every top-level test's time to, as \"PASS PACKAGE TEST SECONDS\" (to plan the suite by)")
	flag.Parse()
	p := &progress{w: os.Stdout, pass: *pass, start: time.Now(), slow: *slow,
		running: map[key]time.Time{}, output: map[key]*strings.Builder{}, skipped: map[string]int{}}
	stop := make(chan struct{})
	go p.heartbeat(*every, stop)
	err := p.read(os.Stdin)
	close(stop)
	p.summary(*top)
	if *times != "" {
		if err := p.appendTimes(*times); err != nil {
			fmt.Fprintf(os.Stderr, "testprogress: %v\n", err)
			os.Exit(1)
		}
	}
	if *tally != "" {
		if err := p.appendTally(*tally); err != nil {
			fmt.Fprintf(os.Stderr, "testprogress: %v\n", err)
			os.Exit(1)
		}
	}
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "testprogress: %v\n", err)
		os.Exit(1)
	case p.failed > 0:
		os.Exit(1)
	case p.pkgs == 0:
		fmt.Fprintln(os.Stderr, "testprogress: no package finished")
		os.Exit(1)
	}
}

// read follows the events on r. Lines that are not JSON (go test's own
// messages, a build failure) are printed as they are.
func (p *progress) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			p.printf("%s\n", line)
			continue
		}
		p.event(&e)
	}
	return sc.Err()
}

func (p *progress) event(e *event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key{e.Package, e.Test}
	top := e.Test != "" && !strings.Contains(e.Test, "/")
	switch e.Action {
	case "build-output":
		p.printfLocked("%s", e.Output) // a compile error
	case "run":
		if top {
			p.running[k] = time.Now()
		}
		if e.Test != "" {
			p.output[k] = &strings.Builder{}
		}
	case "output":
		if b := p.output[k]; b != nil {
			b.WriteString(e.Output)
		} else if e.Test == "" && !strings.HasPrefix(e.Output, "=== ") && !isPackageResult(e.Output) {
			// Package-level output: TestMain's own messages, a panic.
			p.printfLocked("%s", e.Output)
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			p.pkgs++
			if e.Action == "fail" {
				p.failed++
				// Tests that never ended (a timeout's panic, a crash):
				// what they printed is the why.
				for k, b := range p.output {
					if k.pkg == e.Package && b.Len() > 0 {
						p.printfLocked("--- unfinished: %s %s\n%s", short(k.pkg), k.test, b)
					}
				}
				p.printfLocked("FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
			} else {
				p.printfLocked("ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
			}
			for k := range p.output {
				if k.pkg == e.Package {
					delete(p.output, k)
				}
			}
			for k := range p.running {
				if k.pkg == e.Package {
					delete(p.running, k)
				}
			}
			return
		}
		switch e.Action {
		case "pass":
			p.tests.passed++
		case "fail":
			p.tests.failed++
		case "skip":
			p.tests.skipped++
		}
		d := time.Duration(e.Elapsed * float64(time.Second))
		if top {
			delete(p.running, k)
			p.times = append(p.times, timed{k, d})
		}
		switch {
		case e.Action == "fail":
			p.failed++
			p.printfLocked("--- FAIL: %s %s (%.1fs)\n%s", short(e.Package), e.Test, e.Elapsed, p.output[k])
		case e.Action == "skip":
			p.skipped[e.Package]++
			p.printfLocked("--- SKIP: %s %s: %s", short(e.Package), e.Test, lastLine(p.output[k]))
		case top && d >= p.slow:
			p.printfLocked("    %s %s passed in %.0fs\n", short(e.Package), e.Test, e.Elapsed)
		}
		delete(p.output, k)
	}
}

// isPackageResult reports whether a package-level output line is go test's
// own summary of it, which event prints in its place.
func isPackageResult(s string) bool {
	return s == "PASS\n" || s == "FAIL\n" || strings.HasPrefix(s, "ok  \t") || strings.HasPrefix(s, "FAIL\t")
}

// heartbeat says, every d, which tests are running and for how long.
func (p *progress) heartbeat(d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		var now []string
		for k, since := range p.running {
			now = append(now, fmt.Sprintf("%s %s (%.0fs)", short(k.pkg), k.test, time.Since(since).Seconds()))
		}
		slices.Sort(now)
		if len(now) == 0 {
			now = []string{"building or between packages"}
		}
		p.printfLocked("[%s %s] running: %s\n", p.pass, clock(time.Since(p.start)), strings.Join(now, ", "))
		p.mu.Unlock()
	}
}

// summary lists the slowest tests and the skips.
func (p *progress) summary(top int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	slices.SortFunc(p.times, func(a, b timed) int { return cmp.Compare(b.d, a.d) })
	if len(p.times) > 0 && top > 0 {
		p.printfLocked("[%s %s] slowest tests:\n", p.pass, clock(time.Since(p.start)))
		for _, t := range p.times[:min(top, len(p.times))] {
			p.printfLocked("    %6.1fs  %s %s\n", t.d.Seconds(), short(t.pkg), t.test)
		}
	}
	for pkg, n := range p.skipped {
		p.printfLocked("[%s] %s: skipped %d (see the SKIP lines above)\n", p.pass, short(pkg), n)
	}
}

// appendTally appends the pass's test counts to the file at path.
func (p *progress) appendTally(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %d %d\n", p.tests.passed, p.tests.failed, p.tests.skipped)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendTimes appends every top-level test's time to the file at path,
// slowest first.
func (p *progress) appendTimes(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, t := range p.times { // sorted by summary
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\n", p.pass, short(t.pkg), t.test, t.d.Seconds())
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printfLocked(format, args...)
}

func (p *progress) printfLocked(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

// short is a package's path without the module's.
func short(pkg string) string { return strings.TrimPrefix(pkg, "github.com/kvfs/kvfs/") }

func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// lastLine is the last line a test printed itself (a skip's reason), not
// go test's own "=== RUN" or "--- SKIP" lines.
func lastLine(b *strings.Builder) string {
	if b == nil {
		return "\n"
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- ") && !strings.HasPrefix(l, "=== ") {
			return l + "\n"
		}
	}
	return "\n"
}
