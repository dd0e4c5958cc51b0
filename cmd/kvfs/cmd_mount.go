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
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/internal/fdlimit"
	"github.com/kvfs/kvfs/store"
)

// isLocalStore reports whether dir holds a local store (its index).
func isLocalStore(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "kvfs.db"))
	return err == nil
}

type mountOptions struct {
	// pool: with --pool (or $KVFS_POOL), the mount serves a shared pool
	// (poolmount.go), and STORE holds this host's cache and spool.
	pool       poolFlags
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
	// compactEvery and compactThreshold drive background compaction
	// (compactd.go).
	compactEvery     time.Duration
	compactThreshold float64
	noMemSpool       bool
	// simulateDarwin: --simulate-darwin (fs.Options.SimulateDarwin).
	simulateDarwin bool
	// kernelOptions are the -o options passed on to the kernel (ro,
	// noexec, ...).
	kernelOptions []string
	// timeout is fs.Options.Timeout, by platform (mountopts.go).
	timeout time.Duration
	// retain: --capacity, --retention (cmd_retain.go).
	retain retainOptions
}

func runMount(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o mountOptions
	fs := newFlags("mount", "[flags] [STORE MOUNTPOINT]", "Mount the store STORE at MOUNTPOINT. By default kvfs runs in the background\nand returns once the mount is live; stop it with 'kvfs unmount MOUNTPOINT'.\nAs root it mounts directly; otherwise it needs fusermount3 (Debian and\nUbuntu: apt-get install fuse3). On macOS it needs macFUSE (docs/MACOS.md).\nWithout paths: the default store (see kvfs init) at the mount point next to\nit (kvfs/mnt; $KVFS_MOUNT), made if missing.\n\nWith --pool (or $KVFS_POOL set), mount a pool that several hosts share\n(S3-compatible storage and etcd; see kvfs pool --help) instead: STORE is then\nthis host's directory for it (chunk cache, spool, log), made if missing.\nA STORE that is a local store (kvfs init) is mounted as one whatever\n$KVFS_POOL says; --pool with a local store is refused.\n\n"+mountOptionsHelp)
	fs.BoolVarP(&o.foreground, "foreground", "f", false, "stay in the foreground; SIGINT or SIGTERM unmounts (exit status 0). With files in the mount open, SIGINT waits for them to be closed, saying who holds them, and a second SIGINT detaches the mount lazily; SIGTERM detaches it after 5s")
	fs.StringArrayVarP(&o.options, "options", "o", nil, "comma-separated mount options (-o may repeat): see Mount options above")
	fs.BoolVar(&o.verify, "verify", false, "check every chunk's sha256 when it is read; a mismatch is EIO and is logged")
	fs.BoolVar(&o.debugFUSE, "debug-fuse", false, "log every FUSE request and reply")
	fs.DurationVar(&o.blobGrace, "blob-grace", store.DefaultBlobGrace, "how long an engine block that no snapshot manifest lists outlives its last name")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFile, "log-file", "", "where a background daemon logs (default STORE/kvfs.log)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100)")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the daemon to this file until it unmounts (for performance reports)")
	fs.IntVar(&o.maxOpenPacks, "max-open-packs", 0, fmt.Sprintf("how many pack files the daemon keeps open for reading (least recently used ones are closed; packs being read stay open); 0: %d, or an eighth of the descriptor limit if that is less", blockstore.DefaultMaxOpen))
	fs.DurationVar(&o.compactEvery, "compact-interval", time.Minute, "how often the daemon compacts the store in the background (rewrites packs whose dead fraction reaches --compact-threshold, removes dead ones; see kvfs gc); 0 turns it off")
	fs.Float64Var(&o.compactThreshold, "compact-threshold", store.DefaultCompactThreshold, "the dead fraction from which background compaction rewrites a pack (0 < F <= 1)")
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
	fs.BoolVar(&o.noMemSpool, "no-mem-spool", false, "testing: keep every file being written in a spool file, none in memory (each then holds a descriptor of the daemon)")
	fs.MarkHidden("no-mem-spool")
	fs.BoolVar(&o.simulateDarwin, "simulate-darwin", false, "testing: behave as the macOS build does where Linux can (no kernel notifications, macOS's 1 s timeouts, macFUSE's page cache across opens, no splice, writeback cache or READDIRPLUS), to test the macOS strategy for staleness on a real kernel (docs/MACOS.md)")
	fs.MarkHidden("simulate-darwin")
	fs.Int64Var(&o.packBytes, "pack-bytes", 0, "testing: the size at which commits move to a new pack; 0: the default")
	fs.MarkHidden("pack-bytes")
	addRetainFlags(fs, &o.retain)
	o.pool.add(fs)
	// In kvfs mount's own help, --cache's default is the mount's.
	fs.Lookup("cache").Usage = "this host's local chunk cache directory, with --pool (default: STORE/cache)"
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	paths := fs.Args()
	switch len(paths) {
	case 2:
	case 0:
		// The default store at the default mount point (defaultpaths.go),
		// which is made below if missing: what the launchd agent
		// (contrib/) mounts.
		home, _ := os.UserHomeDir()
		storeDir, mnt, err := defaultPaths(runtime.GOOS, os.Getenv, home)
		if err != nil {
			return usagef("want STORE MOUNTPOINT: %v", err)
		}
		paths = []string{storeDir, mnt}
	default:
		return usagef("want STORE MOUNTPOINT")
	}
	if o.compactThreshold <= 0 || o.compactThreshold > 1 || o.compactEvery < 0 {
		return usagef("--compact-threshold: want a fraction in (0, 1]; --compact-interval: want 0 or more")
	}
	if _, err := o.retain.settings(); err != nil {
		return err
	}
	if o.maxOpenPacks < 0 {
		return usagef("--max-open-packs: want 0 (the default) or more, not %d", o.maxOpenPacks)
	}
	mntArg, err := filepath.Abs(paths[1])
	if err != nil {
		return err
	}
	set, err := buildMountOptions(runtime.GOOS, mntArg, o.options)
	if err != nil {
		return err
	}
	if o.simulateDarwin {
		if runtime.GOOS != "linux" {
			return usagef("--simulate-darwin: Linux only (it simulates macOS on Linux's FUSE)")
		}
		set = simulateDarwin(set)
	}
	for _, w := range set.warnings {
		fmt.Fprintf(stderr, "kvfs mount: warning: %s\n", w)
	}
	allowOther := set.allowOther
	o.writeback = set.writeback
	o.kernelOptions = set.kernel
	o.timeout = set.timeout
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
	storeDir, err := filepath.Abs(paths[0])
	if err != nil {
		return err
	}
	mnt := mntArg
	// macFUSE's helper is what mounts on macOS: say how to install it
	// before a daemon fails for want of it.
	if runtime.GOOS == "darwin" {
		if err := checkMacFUSE(os.Stat); err != nil {
			return err
		}
	}
	if len(fs.Args()) == 0 {
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return fmt.Errorf("create the default mount point %s: %w", mnt, err)
		}
	}
	if o.pool.pool != "" && isLocalStore(storeDir) {
		// An explicit STORE wins over $KVFS_POOL; against --pool it is
		// a conflict, never a pool mount that hides the local files and
		// writes its cache into the store.
		if fs.Changed("pool") {
			return usagef("%s is a local store (kvfs init), not a pool's directory: drop --pool to mount it, or give the pool a directory of its own", storeDir)
		}
		fmt.Fprintf(stderr, "kvfs mount: %s is a local store: mounting it, not the pool $KVFS_POOL names (%s)\n", storeDir, o.pool.pool)
		o.pool = poolFlags{}
	}
	if o.pool.pool != "" {
		return mountPool(ctx, storeDir, mnt, o, allowOther, level, stdout, stderr)
	}
	// Fail here, with the cause, rather than in the daemon's log.
	if err := checkMountTarget(storeDir, mnt, stderr); err != nil {
		return err
	}
	// Splicing 1 MiB replies needs a larger pipe limit, which go-fuse
	// reads when the process starts: raise it first, and if this process
	// is the one to serve, start it again to see the new limit.
	if os.Geteuid() == 0 && !o.keepPipeLimit && !o.simulateDarwin && kvfs.RaisePipeLimit(slog.New(slog.NewTextHandler(stderr, nil))) && o.foreground {
		exe, err := os.Executable()
		if err == nil {
			return syscall.Exec(exe, os.Args, os.Environ())
		}
	}
	if !o.foreground {
		return mountFailureHint(runtime.GOOS, daemonize([]string{storeDir, mnt}, storeDir, o, stdout))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	err = serve(ctx, storeDir, mnt, o, allowOther, log)
	if o.readyFD == 0 {
		// Run by a user, not by daemonize (which explains it with what
		// fusermount3 wrote to the log).
		err = explainFusermount(err, nil)
	}
	return mountFailureHint(runtime.GOOS, err)
}

// mountOptionsHelp lists the -o options, for kvfs mount --help.
const mountOptionsHelp = `Mount options (-o OPT[,OPT...], as mount(8) takes them):
  allow_other        let other users in (when not root: needs user_allow_other
                     in /etc/fuse.conf)
  writeback_cache    the kernel caches writes and sends them in large batches
                     at writeback, close and fsync (docs/MOUNT.md)
  ro, noexec, nosuid, nodev
                     as for any filesystem
  nofail, _netdev, x-systemd.*, ...
                     fstab's and systemd's own: accepted and ignored
  macOS (docs/MACOS.md):
  volname=NAME       the volume's name (default: the mount point's name)
  noappledouble      no ._* and .DS_Store files (set by default)
  allow_root, nobrowse, local, auto_cache, iconpath=PATH
                     macFUSE's own, passed on
  noubc, direct_io, nosyncwrites, nosynconclose, noapplexattr, auto_xattr,
  daemon_timeout     refused (they break kvfs); other options are passed on
                     to macFUSE with a warning`

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
		return fmt.Errorf("%s is not a kvfs store (create one with: kvfs init %s)", storeDir, storeDir)
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
	flags = append(flags, "--blob-grace", o.blobGrace.String(), "--max-open-packs", fmt.Sprint(o.maxOpenPacks),
		"--compact-interval", o.compactEvery.String(), "--compact-threshold", strconv.FormatFloat(o.compactThreshold, 'g', -1, 64))
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
	if o.noMemSpool {
		flags = append(flags, "--no-mem-spool")
	}
	if o.simulateDarwin {
		flags = append(flags, "--simulate-darwin")
	}
	if o.metrics != "" {
		flags = append(flags, "--metrics", o.metrics)
	}
	flags = append(flags, o.retain.args()...)
	flags = append(flags, o.pool.args()...)
	if o.cpuProfile != "" {
		p, err := filepath.Abs(o.cpuProfile)
		if err != nil {
			return err
		}
		flags = append(flags, "--cpu-profile", p)
	}
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
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
	// What fusermount3 said (failed to open /dev/fuse, no write access to
	// the mount point, ...) is the cause; go-fuse reports only its exit
	// code. It went to the log: bring it to the terminal.
	said := foreignLines(logPath, logStart)
	msg := strings.TrimSpace(strings.TrimPrefix(line, "error:"))
	if fusermountFailed.MatchString(msg) {
		return explainFusermount(errors.New(msg), said)
	}
	cause := strings.Join(said, "\n")
	if cause != "" {
		cause = "\n" + cause
	}
	if msg != "" {
		return fmt.Errorf("%s%s", msg, cause)
	}
	return fmt.Errorf("daemon exited before the mount was live; see %s%s", logPath, cause)
}

// foreignLines returns the lines of the log at path from offset from that
// the daemon's logger did not write (those start "time="): the words of
// the programs it ran, fusermount3 above all. At most the last 20.
func foreignLines(path string, from int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(io.NewSectionReader(f, from, 1<<20))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "time=") && !strings.HasPrefix(l, "kvfs mount: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return lines
}

// serve mounts and serves until a signal or an external unmount.
func serve(ctx context.Context, storeDir, mnt string, o mountOptions, allowOther bool, log *slog.Logger) error {
	sigs := catchStopSignals()
	defer signal.Stop(sigs)
	ready := readyReporter(o.readyFD)
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
	// Made before the store, so that the journal reports its syncs there.
	metrics := kvfs.NewMetrics()
	s, err := store.Open(storeDir, store.Options{Logger: log, Verify: o.verify, BlobGrace: o.blobGrace, MaxOpenPacks: o.maxOpenPacks, PackBytes: o.packBytes,
		NoJournal: o.noJournal, CheckpointInterval: o.checkpointEvery, OnJournalSync: metrics.JournalSynced})
	if err != nil {
		return fail(inUseBy(storeDir, err))
	}
	defer s.Close()
	srv, err := kvfs.Mount(mnt, s, kvfs.Options{Logger: log, AllowOther: allowOther, KernelOptions: o.kernelOptions, NoMemSpool: o.noMemSpool, DebugFUSE: o.debugFUSE, NoWriteHash: o.noWriteHash,
		WritebackCache: o.writeback, NoKillpriv: o.noKillpriv, Timeout: o.timeout, SimulateDarwin: o.simulateDarwin,
		ExpireEvery: min(time.Minute, max(o.blobGrace/4, time.Second)), Metrics: metrics})
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
	defer startCompactor(s, o.compactEvery, o.compactThreshold, log)()
	stopEvict, err := startRetention(s, srv, o.retain, log)
	if err != nil {
		srv.Unmount()
		return fail(err)
	}
	defer stopEvict()
	if o.metrics != "" {
		stop, err := serveMetrics(o.metrics, s, srv, log)
		if err != nil {
			srv.Unmount()
			return fail(err)
		}
		defer stop()
	}
	log.Info("mounted", "store", storeDir, "mountpoint", mnt, "verify", o.verify,
		"max_open_packs", o.maxOpenPacks, "pipe_max_size", kvfs.PipeMaxSize(), "simulate_darwin", o.simulateDarwin)
	ready("ok")
	return serveUntilUnmounted(srv, mnt, sigs, log)
}

// readyReporter returns the function that tells the parent of a
// background daemon, through --ready-fd, that the mount is live ("ok") or
// why it is not ("error: ..."). It reports once; without a descriptor it
// does nothing.
func readyReporter(fd int) func(msg string) {
	return func(msg string) {
		if fd > 0 {
			f := os.NewFile(uintptr(fd), "ready")
			fmt.Fprintln(f, msg)
			f.Close()
			fd = 0
		}
	}
}

// catchStopSignals catches SIGINT and SIGTERM from the start of a
// daemon's life: one that came while it opened the store and mounted (a
// test, a user's Ctrl-C, a service manager) killed it there, leaving a
// dead mount; caught, it unmounts as soon as the mount is up.
func catchStopSignals() chan os.Signal {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	return sigs
}

// serveUntilUnmounted waits until the mount is unmounted, unmounting it
// at SIGINT or SIGTERM (sigs, stopOnSignal).
func serveUntilUnmounted(srv interface {
	Unmount() error
	Wait()
}, mnt string, sigs <-chan os.Signal, log *slog.Logger) error {
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	sys := stopSys{
		unmount:  srv.Unmount,
		detach:   func() error { return detachMount(runtime.GOOS, mnt) },
		holders:  func() []mountHolder { return procHolders("/proc", mnt, os.Getpid()) },
		poll:     100 * time.Millisecond,
		termWait: 5 * time.Second,
	}
	if isTerminal(os.Stderr) {
		sys.say = os.Stderr
	}
	return stopOnSignal(runtime.GOOS, mnt, sigs, done, sys, log)
}

// stopSys is what stopOnSignal does to the system.
type stopSys struct {
	unmount func() error // a clean unmount (fuse.Server.Unmount): fails while the mount is busy
	detach  func() error // a lazy unmount (macOS: a forced one)
	// holders lists the processes that hold the mount.
	holders func() []mountHolder
	// say, if not nil (a terminal), is told what happens; otherwise the
	// log is.
	say io.Writer
	// poll is the wait between tries of a busy unmount; termWait how long
	// a busy mount is tried after SIGTERM before it is detached.
	poll, termWait time.Duration
}

// stopOnSignal serves until done is closed (the mount is gone and every
// request answered), unmounting at the first signal. A clean unmount
// waits for in-flight requests (commits included) and fails while files
// in the mount are open; it is tried again until they are closed, saying
// who holds them. A second signal detaches the mount lazily: its open
// files keep working until closed, then the daemon exits. After SIGTERM
// (a service manager's stop, which sends one) the mount is detached by
// itself after termWait. The daemon exits 0 either way: it was asked to
// stop and it unmounted cleanly.
func stopOnSignal(goos, mnt string, sigs <-chan os.Signal, done <-chan struct{}, sys stopSys, log *slog.Logger) error {
	tell := func(msg string) {
		if sys.say != nil {
			fmt.Fprintf(sys.say, "kvfs mount: %s\n", msg)
		} else {
			log.Warn(msg)
		}
	}
	var (
		unmounting, detached bool
		busy                 = make(chan []mountHolder, 1) // the unmounter's first failure
		stop                 = make(chan struct{})         // closed at detach: the unmounter stops
		deadline             <-chan time.Time              // SIGTERM's
		held                 string                        // who held the mount, as found
	)
	again := "Ctrl-C again (SIGINT) detaches it now: open files keep working until closed, then kvfs exits"
	if goos == "darwin" {
		again = "Ctrl-C again (SIGINT) forces the unmount now (macOS has no lazy unmount): open files then fail"
	}
	detach := func(why string) {
		if err := sys.detach(); err != nil {
			tell(fmt.Sprintf("detaching %s (%s): %v", mnt, why, err))
			return
		}
		detached = true
		close(stop)
		switch {
		case goos == "darwin":
			tell(fmt.Sprintf("forced the unmount of %s (%s)", mnt, why))
		case held != "":
			tell(fmt.Sprintf("detached %s (%s); serving its open files until they are closed (%s), then exiting", mnt, why, held))
		default:
			tell(fmt.Sprintf("detached %s (%s); serving its open files until they are closed, then exiting", mnt, why))
		}
	}
	defer func() {
		if !detached {
			close(stop)
		}
	}()
	for {
		select {
		case <-done:
			log.Info("unmounted", "mountpoint", mnt)
			return nil
		case hs := <-busy:
			held = describeHolders(hs)
			if detached {
				continue
			}
			who := held
			if who == "" {
				who = fmt.Sprintf("files in it are open or a process works in it (fuser -vm %s lists them)", mnt)
			}
			msg := fmt.Sprintf("%s is busy: %s; waiting for them to be closed to unmount. %s", mnt, who, again)
			if deadline != nil {
				msg = fmt.Sprintf("%s is busy: %s; waiting up to %v for them to be closed, then detaching it", mnt, who, sys.termWait)
			}
			tell(msg)
		case <-deadline:
			deadline = nil
			if !detached {
				detach(fmt.Sprintf("still busy %v after SIGTERM", sys.termWait))
			}
		case sig := <-sigs:
			switch {
			case !unmounting:
				unmounting = true
				log.Info("unmounting", "signal", sig.String())
				if sig == syscall.SIGTERM {
					deadline = time.After(sys.termWait)
				}
				go func() {
					for first := true; ; first = false {
						err := sys.unmount()
						if err == nil {
							return
						}
						if first {
							log.Debug("unmount failed; trying again", "err", err)
							busy <- sys.holders()
						}
						select {
						case <-stop:
							return
						case <-time.After(sys.poll):
						}
					}
				}()
			case !detached:
				detach("a second " + sig.String())
			default:
				tell(fmt.Sprintf("%s is detached; its open files keep kvfs until they are closed (kill -9 %d stops it now; they then fail)", mnt, os.Getpid()))
			}
		}
	}
}

// detachMount unmounts the mount at mnt lazily on Linux (as root with
// unmount(2), otherwise through fusermount3 -u -z), and by force on
// macOS, which has no lazy unmount.
func detachMount(goos, mnt string) error {
	if goos == "darwin" || os.Geteuid() == 0 {
		return syscall.Unmount(mnt, detachFlag)
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(bin); err == nil {
			if out, err := exec.Command(p, "-u", "-z", mnt).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -u -z: %v: %s", bin, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	return errors.New("no fusermount3")
}

// notMounted is kvfs unmount's error for a path at which nothing is
// mounted: which path, and where the kvfs mount it lies in is, if any.
func notMounted(mnt string) error {
	if _, err := os.Lstat(mnt); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unmount %s: no such directory, and nothing is mounted there", mnt)
	}
	if e, ok, err := mountContaining(mnt); err == nil && ok && e.isKvfs() {
		return fmt.Errorf("unmount %s: it is not mounted: it is a directory inside the kvfs mount at %s (kvfs unmount %s unmounts that)", mnt, e.Point, e.Point)
	}
	return fmt.Errorf("unmount %s: it is not mounted (nothing is mounted at %s)", mnt, mnt)
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
	fs := newFlags("unmount", "MOUNTPOINT", "Unmount a kvfs mount. The daemon finishes in-flight writes and exits.\nA busy mount (files in it open, a process working in it) is retried for\na few seconds, as files closed just before are let go of, then refused,\nnaming the processes that hold it.")
	lazy := fs.BoolP("lazy", "l", false, "detach now even if files are open (they keep working until closed); Linux only: macOS has no lazy unmount")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want MOUNTPOINT")
	}
	mnt := fs.Arg(0)
	// Only a kvfs mount: as root, unmount(2) would take down anything.
	e, ok, err := mountAt(mnt)
	switch {
	case err != nil:
		return fmt.Errorf("unmount %s: %w", mnt, err)
	case !ok:
		return notMounted(mnt)
	case !e.isKvfs():
		return fmt.Errorf("unmount %s: not a kvfs mount (a %s mount of %s); kvfs unmounts only its own", mnt, e.FSType, e.Source)
	}
	sys := unmountSys{
		root:     os.Geteuid() == 0,
		unmount:  syscall.Unmount,
		lookPath: exec.LookPath,
		run:      func(name string, args ...string) ([]byte, error) { return exec.Command(name, args...).CombinedOutput() },
		busyWait: busyWait,
		sleep:    time.Sleep,
		holders:  func(mnt string) []mountHolder { return procHolders("/proc", mnt, os.Getpid()) },
		submounts: func(mnt string) []string {
			tab, _ := mountTable()
			var subs []string
			for _, m := range tab {
				if strings.HasPrefix(m.Point, strings.TrimSuffix(mnt, "/")+"/") {
					subs = append(subs, m.Point)
				}
			}
			return subs
		},
	}
	if isTerminal(stderr) {
		sys.say = stderr
	}
	return unmountMount(runtime.GOOS, e.Point, *lazy, sys)
}
