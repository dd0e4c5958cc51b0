package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/internal/fdlimit"
	"github.com/kvfs/kvfs/store"
)

type mountOptions struct {
	foreground bool
	options    []string // -o, each comma-separated, as mount(8) takes them
	verify     bool
	debugFUSE  bool
	logLevel   string
	logFile    string
	readyFD    int
	blobGrace  time.Duration
	cpuProfile string
	metrics    string
	// maxOpenPacks bounds the pack descriptors the daemon keeps open.
	maxOpenPacks int
	// keepPipeLimit leaves fs.pipe-max-size as it is (for tests of
	// splicing at the kernel's default limit).
	keepPipeLimit bool
	// noWriteHash turns off hashing chunks as they are written (to
	// measure what it saves).
	noWriteHash bool
	// noJournal runs the index without the journal; checkpointEvery
	// sets how often the journal is checkpointed (store.Options).
	noJournal       bool
	checkpointEvery time.Duration
	// writeback: -o writeback_cache (fs.Options.WritebackCache).
	writeback bool
	// noKillpriv is fs.Options.NoKillpriv.
	noKillpriv bool
	// packBytes is store.Options.PackBytes (for tests that need many
	// packs).
	packBytes int64
}

func runMount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o mountOptions
	fs := newFlags("mount", "[flags] STORE MOUNTPOINT", "Mount the store STORE at MOUNTPOINT. By default kvfs runs in the background\nand returns once the mount is live; stop it with 'kvfs unmount MOUNTPOINT'.\nAs root it mounts directly; otherwise it needs fusermount3 (Debian and\nUbuntu: apt-get install fuse3).", stderr)
	fs.BoolVarP(&o.foreground, "foreground", "f", false, "stay in the foreground; SIGINT or SIGTERM unmounts")
	fs.StringArrayVarP(&o.options, "options", "o", nil, "comma-separated mount options (-o may repeat): allow_other (let other users in; needs user_allow_other in /etc/fuse.conf when not root); writeback_cache (the kernel caches writes and sends them in large batches at writeback, close and fsync; see docs/MOUNT.md)")
	fs.BoolVar(&o.verify, "verify", false, "check every chunk's sha256 when it is read; a mismatch is EIO and is logged")
	fs.BoolVar(&o.debugFUSE, "debug-fuse", false, "log every FUSE request and reply")
	fs.DurationVar(&o.blobGrace, "blob-grace", store.DefaultBlobGrace, "how long an engine block that no snapshot manifest lists outlives its last name")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFile, "log-file", "", "where a background daemon logs (default STORE/kvfs.log)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100)")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the daemon to this file until it unmounts (for performance reports)")
	fs.IntVar(&o.maxOpenPacks, "max-open-packs", 0, fmt.Sprintf("how many pack files the daemon keeps open for reading (least recently used ones are closed; packs being read stay open); 0: %d, or an eighth of the descriptor limit if that is less", blockstore.DefaultMaxOpen))
	fs.IntVar(&o.readyFD, "ready-fd", 0, "internal: file descriptor on which to report readiness")
	fs.MarkHidden("ready-fd")
	fs.BoolVar(&o.keepPipeLimit, "keep-pipe-limit", false, "testing: do not raise fs.pipe-max-size, so that reads are spliced within the current limit")
	fs.MarkHidden("keep-pipe-limit")
	fs.BoolVar(&o.noWriteHash, "no-write-hash", false, "testing: do not hash chunks as they are written (the commit hashes them), to measure what hashing while writing saves")
	fs.MarkHidden("no-write-hash")
	fs.BoolVar(&o.noJournal, "no-journal", false, "testing: commit every index change in a synced bbolt transaction, without the journal (a store that has used the journal refuses it), to measure what the journal saves")
	fs.MarkHidden("no-journal")
	fs.DurationVar(&o.checkpointEvery, "checkpoint-interval", 0, "testing: checkpoint the journal this often (default 30s)")
	fs.MarkHidden("checkpoint-interval")
	fs.BoolVar(&o.noKillpriv, "no-killpriv", false, "testing: leave clearing set-ID bits at writes to the kernel (no FUSE_HANDLE_KILLPRIV_V2), which then asks for security.capability before every write, to measure what handling it in kvfs saves")
	fs.MarkHidden("no-killpriv")
	fs.Int64Var(&o.packBytes, "pack-bytes", 0, "testing: the size at which commits move to a new pack; 0: the default")
	fs.MarkHidden("pack-bytes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want STORE MOUNTPOINT")
	}
	if o.maxOpenPacks < 0 {
		return usagef("--max-open-packs: want 0 (the default) or more, not %d", o.maxOpenPacks)
	}
	allowOther := false
	for _, opt := range strings.Split(strings.Join(o.options, ","), ",") {
		switch strings.TrimSpace(opt) {
		case "":
		case "allow_other":
			allowOther = true
		case "writeback_cache":
			o.writeback = true
		case "rw", "defaults", "nodev", "nosuid", "noatime", "relatime", "_netdev", "auto", "noauto", "user", "nouser":
			// accepted from fstab and mount(8); nothing to do
		default:
			return usagef("unknown mount option %q", opt)
		}
	}
	if allowOther {
		if err := checkAllowOther(); err != nil {
			return err
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	// A daemon outlives the caller's working directory: use absolute paths.
	storeDir, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return err
	}
	mnt, err := filepath.Abs(fs.Arg(1))
	if err != nil {
		return err
	}
	// Fail here, with the cause, rather than in the daemon's log.
	if _, err := os.Stat(filepath.Join(storeDir, "kvfs.db")); err != nil {
		return fmt.Errorf("mount: %s is not a kvfs store (run kvfs init %s): %w", storeDir, storeDir, err)
	}
	if fi, err := os.Stat(mnt); err != nil {
		return fmt.Errorf("mount: mount point: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("mount: mount point %s is not a directory", mnt)
	}
	// Splicing 1 MiB replies needs a larger pipe limit, which go-fuse
	// reads when the process starts: raise it first, and if this process
	// is the one to serve, start it again to see the new limit.
	if os.Geteuid() == 0 && !o.keepPipeLimit && kvfs.RaisePipeLimit(slog.New(slog.NewTextHandler(stderr, nil))) && o.foreground {
		exe, err := os.Executable()
		if err == nil {
			return syscall.Exec(exe, os.Args, os.Environ())
		}
	}
	if !o.foreground {
		return daemonize(append(fs.Args()[:0:0], storeDir, mnt), storeDir, o, stdout)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return serve(ctx, storeDir, mnt, o, allowOther, log)
}

// daemonize starts this command again in the foreground, detached, and
// waits until it reports that the mount is live (or why it failed).
func daemonize(args []string, storeDir string, o mountOptions, stdout io.Writer) error {
	// The log is opened before the daemon opens the store: the store
	// must be this user's first (store/trust.go), the log is opened
	// under the store's real path, and never through a link.
	real, err := store.TrustedDir(storeDir)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storeDir, err)
	}
	// TrustedDir passes a path still to be made (for init); the log
	// goes only into a store directory that exists, checked as this
	// user's.
	if fi, err := os.Lstat(real); err != nil || !fi.IsDir() {
		return fmt.Errorf("open store %s: no store here (run kvfs init)", storeDir)
	}
	logPath := o.logFile
	if logPath == "" {
		logPath = filepath.Join(real, "kvfs.log")
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	flags := []string{"mount", "--foreground", "--ready-fd", "3", "--log-level", o.logLevel}
	if len(o.options) > 0 {
		flags = append(flags, "-o", strings.Join(o.options, ","))
	}
	if o.verify {
		flags = append(flags, "--verify")
	}
	if o.debugFUSE {
		flags = append(flags, "--debug-fuse")
	}
	flags = append(flags, "--blob-grace", o.blobGrace.String(), "--max-open-packs", fmt.Sprint(o.maxOpenPacks))
	if o.keepPipeLimit {
		flags = append(flags, "--keep-pipe-limit")
	}
	if o.noWriteHash {
		flags = append(flags, "--no-write-hash")
	}
	if o.noJournal {
		flags = append(flags, "--no-journal")
	}
	if o.noKillpriv {
		flags = append(flags, "--no-killpriv")
	}
	if o.checkpointEvery != 0 {
		flags = append(flags, "--checkpoint-interval", o.checkpointEvery.String())
	}
	if o.packBytes > 0 {
		flags = append(flags, "--pack-bytes", fmt.Sprint(o.packBytes))
	}
	if o.metrics != "" {
		flags = append(flags, "--metrics", o.metrics)
	}
	if o.cpuProfile != "" {
		p, err := filepath.Abs(o.cpuProfile)
		if err != nil {
			return err
		}
		flags = append(flags, "--cpu-profile", p)
	}
	cmd := exec.Command(exe, append(flags, args...)...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if strings.TrimSpace(line) == "ok" {
		cmd.Process.Release()
		return nil
	}
	cmd.Wait()
	if msg := strings.TrimSpace(strings.TrimPrefix(line, "error:")); msg != "" {
		return errors.New(msg)
	}
	return fmt.Errorf("daemon exited before the mount was live; see %s", logPath)
}

// serve mounts and serves until a signal or an external unmount.
func serve(ctx context.Context, storeDir, mnt string, o mountOptions, allowOther bool, log *slog.Logger) error {
	ready := func(msg string) {
		if o.readyFD > 0 {
			f := os.NewFile(uintptr(o.readyFD), "ready")
			fmt.Fprintln(f, msg)
			f.Close()
			o.readyFD = 0
		}
	}
	fail := func(err error) error {
		ready("error: " + err.Error())
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	logFileLimit(log)
	s, err := store.Open(storeDir, store.Options{Logger: log, Verify: o.verify, BlobGrace: o.blobGrace, MaxOpenPacks: o.maxOpenPacks, PackBytes: o.packBytes,
		NoJournal: o.noJournal, CheckpointInterval: o.checkpointEvery})
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	srv, err := kvfs.Mount(mnt, s, kvfs.Options{Logger: log, AllowOther: allowOther, DebugFUSE: o.debugFUSE, NoWriteHash: o.noWriteHash,
		WritebackCache: o.writeback, NoKillpriv: o.noKillpriv,
		ExpireEvery: min(time.Minute, max(o.blobGrace/4, time.Second))})
	if err != nil {
		return fail(err)
	}
	if err := srv.WaitMount(); err != nil {
		return fail(err)
	}
	ctl, err := startControl(s, srv, log)
	if err != nil {
		srv.Unmount()
		return fail(err)
	}
	defer ctl.close()
	if o.metrics != "" {
		stop, err := serveMetrics(o.metrics, s, srv, log)
		if err != nil {
			srv.Unmount()
			return fail(err)
		}
		defer stop()
	}
	log.Info("mounted", "store", storeDir, "mountpoint", mnt, "verify", o.verify,
		"max_open_packs", o.maxOpenPacks, "pipe_max_size", kvfs.PipeMaxSize())
	ready("ok")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	for {
		select {
		case <-done:
			log.Info("unmounted", "mountpoint", mnt)
			return nil
		case sig := <-sigs:
			log.Info("unmounting", "signal", sig.String())
			// Unmount waits for in-flight requests (commits included) to
			// be answered; a busy mount is retried, then detached.
			var err error
			for i := 0; i < 50; i++ {
				if err = srv.Unmount(); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				log.Warn("mount busy; detaching", "err", err)
				syscall.Unmount(mnt, detachFlag)
			}
		}
	}
}

// logFileLimit logs the daemon's descriptor limit at start, for whoever
// reads the log after an EMFILE. Go raises the soft RLIMIT_NOFILE to the
// hard limit (less one) when the process starts (since Go 1.19), so there
// is nothing to raise here: a daemon needing more needs a higher hard
// limit (LimitNOFILE= in the systemd unit, ulimit -Hn).
func logFileLimit(log *slog.Logger) {
	lim, err := fdlimit.Current()
	if err != nil {
		log.Warn("cannot read the descriptor limit", "err", err)
		return
	}
	log.Info("file descriptors", "nofile_soft", lim.Soft, "nofile_hard", lim.Hard, "open_fds", fdlimit.Open())
}

func runUnmount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("unmount", "MOUNTPOINT", "Unmount a kvfs mount. The daemon finishes in-flight writes and exits.", stderr)
	lazy := fs.BoolP("lazy", "l", false, "detach now even if files are open (they keep working until closed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want MOUNTPOINT")
	}
	mnt := fs.Arg(0)
	if os.Geteuid() == 0 {
		flags := 0
		if *lazy {
			flags = detachFlag
		}
		if err := syscall.Unmount(mnt, flags); err != nil {
			return &os.PathError{Op: "unmount", Path: mnt, Err: err}
		}
		return nil
	}
	args = []string{"-u", mnt}
	if *lazy {
		args = []string{"-u", "-z", mnt}
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(bin); err == nil {
			out, err := exec.Command(p, args...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("unmount %s: %s", mnt, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	return fmt.Errorf("unmount %s: not root and no fusermount3 (apt-get install fuse3)", mnt)
}
