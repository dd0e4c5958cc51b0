package main

import (
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The -o options of kvfs mount, made into what the daemon asks of the
// kernel, per platform. The policy is here, untagged, so that both
// platforms' tables are tested on any machine (mountopts_test.go); the
// caller passes runtime.GOOS.
//
// Linux refuses an option it does not know: the kernel and fusermount3
// would refuse most of them anyway, with a worse message. macOS is the
// other way round: macFUSE's mount helper ignores an option it does not
// know without a word, so a misspelt option would look applied. There
// kvfs passes on the options it knows, refuses those that would break it
// (saying why), and warns about the rest, which it still passes on (a
// newer macFUSE may know them).

// mountOptionSet is what kvfs makes of the -o options.
type mountOptionSet struct {
	allowOther bool     // allow_other (fs.Options.AllowOther)
	writeback  bool     // writeback_cache (fs.Options.WritebackCache)
	kernel     []string // for the kernel or mount helper (fs.Options.KernelOptions)
	warnings   []string // to print before mounting, one line each
	// timeout is the kernel's entry and attribute timeout
	// (fs.Options.Timeout); 0: fs's default.
	timeout time.Duration
}

// macTimeout is the entry and attribute timeout on macOS. On Linux kvfs
// lets the kernel cache names and attributes for long and tells it when
// one changes outside the mount (a put or rename through the control
// socket: fs.Server.Invalidate); go-fuse sends no notifications on macOS
// (macFUSE speaks FUSE 7.19), so there a change made outside the mount is
// seen once the kernel's entry expires: within a second.
const macTimeout = time.Second

// kernelStandardOptions are the generic mount options passed on to the
// kernel on both platforms.
var kernelStandardOptions = []string{"ro", "noexec", "exec", "nosuid", "suid", "nodev", "dev"}

// ignoredMountOptions are accepted and dropped on both platforms: kvfs
// never updates atime on reads (docs/MOUNT.md), and the others are
// mount(8)'s and systemd's own, from fstab.
var ignoredMountOptions = []string{"rw", "defaults", "async",
	"noatime", "relatime", "strictatime", "nodiratime", "lazytime",
	"auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail", "_netdev"}

// macFUSEOptions are the macFUSE options kvfs knows and passes on as
// given (see docs/MACOS.md). An entry ending in "=" takes a value.
var macFUSEOptions = []string{
	"volname=",      // the volume's name in Finder (default: the mount point's name)
	"noappledouble", // no ._* and .DS_Store files (a default)
	"allow_root",    // let root in besides the mounter
	"nobrowse",      // keep the volume out of Finder's sidebar
	"local",         // present the volume as a local disk (Spotlight may then index it)
	"auto_cache",    // drop a file's cached pages when its mtime changes
	"iconpath=",     // the volume's icon in Finder
}

// macFUSERefused are the macFUSE options that would break kvfs, with why.
var macFUSERefused = map[string]string{
	"noubc":             "it turns off the kernel's page cache for the mount, and mmap, which engines use to read snapshots, needs it",
	"direct_io":         "it bypasses the page cache: mmap of a file then fails (ENODEV), and engines mmap their snapshots",
	"nosyncwrites":      "kvfs needs every write to reach it before write(2) returns, so that an error (ENOSPC, EIO) is the write's and nothing is left for after the file's commit",
	"nosynconclose":     "kvfs commits a file when it is closed; pages still cached then would reach it after the commit",
	"noapplexattr":      "it refuses com.apple.* extended attributes, which Finder and apps set and kvfs stores",
	"auto_xattr":        "macFUSE would keep extended attributes in ._* AppleDouble files itself; kvfs stores them, and ._* files would litter the cache directory",
	"daemon_timeout":    "go-fuse sets daemon_timeout=0: with a timeout, a long commit or fsync of a large snapshot would make macFUSE give the mount up as dead",
	"iosize":            "kvfs sets the I/O size itself (1 MiB, macFUSE's largest request)",
	"fsname":            "kvfs names the mount after its store, by which kvfs mount and kvfs unmount recognise their mounts",
	"subtype":           "kvfs names the mount's type itself",
	"defer_permissions": "kvfs mounts with default_permissions (the kernel checks permissions); defer_permissions would leave the checks to the daemon",
}

// buildMountOptions makes the -o options (each comma-separated, as
// mount(8) takes them) into what the daemon mounts with on goos, for the
// mount point mnt (an absolute path). The error is a usage error.
func buildMountOptions(goos, mnt string, opts []string) (mountOptionSet, error) {
	var set mountOptionSet
	var given []string
	for _, opt := range strings.Split(strings.Join(opts, ","), ",") {
		if t := strings.TrimSpace(opt); t != "" {
			given = append(given, t)
		}
	}
	if goos == "darwin" {
		return buildMacOptions(set, mnt, given)
	}
	for _, opt := range given {
		switch {
		case opt == "allow_other":
			set.allowOther = true
		case opt == "writeback_cache":
			set.writeback = true
		case slices.Contains(kernelStandardOptions, opt):
			set.kernel = append(set.kernel, opt)
		case slices.Contains(ignoredMountOptions, opt), forOtherPrograms(opt):
		default:
			return set, usagef("unknown mount option %q (kvfs takes allow_other, writeback_cache, ro, noexec, nosuid, nodev and mount(8)'s and systemd's own)", opt)
		}
	}
	return set, nil
}

// forOtherPrograms reports options that fstab carries for other programs
// (x-systemd.*, x-gvfs-*, comment=).
func forOtherPrograms(opt string) bool {
	return strings.HasPrefix(opt, "x-") || strings.HasPrefix(opt, "comment=")
}

// buildMacOptions is buildMountOptions for macFUSE. By default the volume
// is named after the mount point (volname; macFUSE's default is a
// generic "macFUSE Volume 0 (kvfs)") and macOS writes no AppleDouble files
// (noappledouble: no ._* or .DS_Store in an engine's cache directory,
// where they would be taken for cache entries or slow every listing).
func buildMacOptions(set mountOptionSet, mnt string, given []string) (mountOptionSet, error) {
	set.timeout = macTimeout
	volname, appledouble := false, false
	var passed []string
	for _, opt := range given {
		name, _, hasValue := strings.Cut(opt, "=")
		switch {
		case opt == "allow_other":
			set.allowOther = true
		case opt == "writeback_cache":
			set.warnings = append(set.warnings, "-o writeback_cache: macFUSE has no writeback cache (it speaks FUSE 7.19); ignored")
		case macFUSERefused[name] != "":
			return set, usagef("mount option %q is refused on macOS: %s (see docs/MACOS.md)", opt, macFUSERefused[name])
		case opt == "default_permissions":
			// kvfs always mounts with it (fs.Mount)
		case slices.Contains(kernelStandardOptions, opt):
			passed = append(passed, opt)
		case slices.Contains(ignoredMountOptions, opt), forOtherPrograms(opt):
		case hasValue && slices.Contains(macFUSEOptions, name+"="):
			if name == "volname" {
				volname = true
			}
			passed = append(passed, opt)
		case !hasValue && slices.Contains(macFUSEOptions, name):
			if name == "noappledouble" {
				if appledouble {
					continue
				}
				appledouble = true
			}
			passed = append(passed, opt)
		default:
			set.warnings = append(set.warnings, "-o "+opt+": not an option kvfs knows on macOS; passed on to macFUSE, which ignores options it does not know without a word (check with: mount | grep kvfs)")
			passed = append(passed, opt)
		}
	}
	if !volname {
		if name := volumeName(mnt); name != "" {
			set.kernel = append(set.kernel, "volname="+name)
		}
	}
	if !appledouble {
		set.kernel = append(set.kernel, "noappledouble")
	}
	set.kernel = append(set.kernel, passed...)
	return set, nil
}

// volumeName is the default volume name for a mount at mnt: its last
// element. A comma would end the option (go-fuse escapes it as "\,",
// which not every macFUSE version reads back), so it becomes a space.
func volumeName(mnt string) string {
	base := filepath.Base(filepath.Clean(mnt))
	if base == "/" || base == "." {
		return ""
	}
	return strings.ReplaceAll(base, ",", " ")
}

// simulateDarwin makes a Linux mount's options those of the darwin build
// where they concern staleness (kvfs mount --simulate-darwin, for tests:
// fs.Options.SimulateDarwin): macOS's timeouts, and no writeback cache,
// which is ignored with macOS's warning. The -o options stay Linux's: the
// kernel is Linux's, and would refuse macFUSE's.
func simulateDarwin(set mountOptionSet) mountOptionSet {
	set.timeout = macTimeout
	if set.writeback {
		set.writeback = false
		set.warnings = append(set.warnings, "-o writeback_cache: macFUSE has no writeback cache (simulating macOS); ignored")
	}
	return set
}
