package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBuildMountOptions: the -o options become the same kernel options on
// Linux as before the builder (unknown ones refused), and on macOS get
// volname and noappledouble by default, keep go-fuse's daemon_timeout=0
// and the page cache (options that would break kvfs are refused with
// why), pass unknown ones on with a warning, and have the kernel cache
// names and attributes for a second (no notifications there).
func TestBuildMountOptions(t *testing.T) {
	const mnt = "/Users/me/Library/Caches/engine"
	for _, c := range []struct {
		goos       string
		opts       []string
		kernel     []string
		allowOther bool
		writeback  bool
		warn       []string // substrings, one per warning
		err        string   // substring of the usage error
	}{
		// Linux: as kvfs always took them.
		{goos: "linux"},
		{goos: "linux", opts: []string{"allow_other,ro", "noexec"}, kernel: []string{"ro", "noexec"}, allowOther: true},
		{goos: "linux", opts: []string{" nosuid , nodev,exec,suid,dev"}, kernel: []string{"nosuid", "nodev", "exec", "suid", "dev"}},
		{goos: "linux", opts: []string{"writeback_cache"}, writeback: true},
		{goos: "linux", opts: []string{"rw,defaults,noatime,nofail,_netdev,x-systemd.automount,comment=x,noauto,user"}},
		{goos: "linux", opts: []string{"bogus"}, err: `unknown mount option "bogus"`},
		{goos: "linux", opts: []string{"volname=x"}, err: `unknown mount option "volname=x"`},
		{goos: "linux", opts: []string{"noappledouble"}, err: "unknown mount option"},
		{goos: "linux", opts: []string{"direct_io"}, err: "unknown mount option"},

		// macOS: the defaults.
		{goos: "darwin", kernel: []string{"volname=engine", "noappledouble"}},
		{goos: "darwin", opts: []string{"allow_other,ro"}, kernel: []string{"volname=engine", "noappledouble", "ro"}, allowOther: true},
		// The user's volume name wins; noappledouble given is not doubled.
		{goos: "darwin", opts: []string{"volname=KV cache,noappledouble"}, kernel: []string{"KV cache", "noappledouble"}},
		{goos: "darwin", opts: []string{"nobrowse,allow_root,local,auto_cache,iconpath=/x.icns"},
			kernel: []string{"volname=engine", "noappledouble", "nobrowse", "allow_root", "local", "auto_cache", "iconpath=/x.icns"}},
		// fstab's and mount(8)'s own are dropped as on Linux;
		// default_permissions is kvfs's own already.
		{goos: "darwin", opts: []string{"rw,noatime,nofail,x-foo,default_permissions"}, kernel: []string{"volname=engine", "noappledouble"}},
		{goos: "darwin", opts: []string{"writeback_cache"}, kernel: []string{"volname=engine", "noappledouble"}, warn: []string{"no writeback cache"}},
		{goos: "darwin", opts: []string{"novncache,bogus=1"}, kernel: []string{"volname=engine", "noappledouble", "novncache", "bogus=1"},
			warn: []string{"-o novncache: not an option kvfs knows", "-o bogus=1: not an option kvfs knows"}},
		// Refused, with why.
		{goos: "darwin", opts: []string{"noubc"}, err: "mmap"},
		{goos: "darwin", opts: []string{"ro,direct_io"}, err: `"direct_io" is refused on macOS: it bypasses the page cache`},
		{goos: "darwin", opts: []string{"nosyncwrites"}, err: "before write(2) returns"},
		{goos: "darwin", opts: []string{"nosynconclose"}, err: "commits a file when it is closed"},
		{goos: "darwin", opts: []string{"noapplexattr"}, err: "com.apple.*"},
		{goos: "darwin", opts: []string{"auto_xattr"}, err: "AppleDouble"},
		{goos: "darwin", opts: []string{"daemon_timeout=60"}, err: "daemon_timeout=0"},
		{goos: "darwin", opts: []string{"iosize=4096"}, err: "I/O size"},
		{goos: "darwin", opts: []string{"fsname=x"}, err: "after its store"},
		{goos: "darwin", opts: []string{"subtype=x"}, err: "type itself"},
		{goos: "darwin", opts: []string{"defer_permissions"}, err: "default_permissions"},
	} {
		set, err := buildMountOptions(c.goos, mnt, c.opts)
		name := c.goos + " -o " + strings.Join(c.opts, " -o ")
		if c.err != "" {
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &ue) {
				t.Errorf("%s: error %v, want a usage error with %q", name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := c.kernel
		if len(want) > 0 && want[0] == "KV cache" { // the user's volname
			want = []string{"volname=KV cache", "noappledouble"}
		}
		if !slices.Equal(set.kernel, want) || set.allowOther != c.allowOther || set.writeback != c.writeback {
			t.Errorf("%s: kernel %q allow_other %v writeback %v, want %q %v %v", name, set.kernel, set.allowOther, set.writeback, want, c.allowOther, c.writeback)
		}
		if wantTimeout := map[string]time.Duration{"darwin": time.Second}[c.goos]; set.timeout != wantTimeout {
			t.Errorf("%s: timeout %v, want %v", name, set.timeout, wantTimeout)
		}
		if len(set.warnings) != len(c.warn) {
			t.Errorf("%s: warnings %q, want %d", name, set.warnings, len(c.warn))
			continue
		}
		for i, w := range c.warn {
			if !strings.Contains(set.warnings[i], w) {
				t.Errorf("%s: warning %q lacks %q", name, set.warnings[i], w)
			}
		}
	}
}

// TestVolumeName: the default volume name is the mount point's last
// element, without commas (which would end the option).
func TestVolumeName(t *testing.T) {
	for in, want := range map[string]string{
		"/Users/me/kvfs":     "kvfs",
		"/Users/me/kvfs/":    "kvfs",
		"/Volumes/a,b":       "a b",
		"/Users/me/KV Cache": "KV Cache",
		"/":                  "",
	} {
		if got := volumeName(in); got != want {
			t.Errorf("volumeName(%q) = %q, want %q", in, got, want)
		}
	}
	set, err := buildMountOptions("darwin", "/", nil)
	if err != nil || !slices.Equal(set.kernel, []string{"noappledouble"}) {
		t.Errorf("mount at /: %q %v", set.kernel, err)
	}
}

// TestSimulateDarwin: a Linux mount simulating macOS has macOS's timeout
// and no writeback cache (with macOS's warning), and keeps Linux's other
// options.
func TestSimulateDarwin(t *testing.T) {
	set, err := buildMountOptions("linux", "/mnt", []string{"allow_other,ro,writeback_cache"})
	if err != nil {
		t.Fatal(err)
	}
	set = simulateDarwin(set)
	if set.timeout != macTimeout || set.writeback || !set.allowOther || !slices.Equal(set.kernel, []string{"ro"}) {
		t.Errorf("simulated: timeout %v writeback %v allow_other %v kernel %q; want %v false true [ro]", set.timeout, set.writeback, set.allowOther, set.kernel, macTimeout)
	}
	if len(set.warnings) != 1 || !strings.Contains(set.warnings[0], "no writeback cache") {
		t.Errorf("warnings %q, want one about the writeback cache", set.warnings)
	}
}
