package main

import (
	"errors"
	iofs "io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// TestCheckMacFUSE: the preflight passes when a mount helper go-fuse
// would use is an executable file, and otherwise fails with what is wrong
// and the install and approval steps.
func TestCheckMacFUSE(t *testing.T) {
	exe := &fstest.MapFile{Mode: 0o755}
	for _, c := range []struct {
		name  string
		files map[string]*fstest.MapFile
		errs  map[string]error // stat errors by path
		want  []string         // substrings of the error; none: no error
	}{
		{name: "macFUSE", files: map[string]*fstest.MapFile{macFUSEHelpers[0]: exe}},
		{name: "osxfuse 3 only", files: map[string]*fstest.MapFile{macFUSEHelpers[1]: exe}},
		{name: "missing", want: []string{"macFUSE is not installed", "brew install --cask macfuse", "Privacy & Security", "Reduced Security", "restart"}},
		{name: "not executable", files: map[string]*fstest.MapFile{macFUSEHelpers[0]: {Mode: 0o644}},
			want: []string{"not an executable file", "reinstall macFUSE", "Privacy & Security"}},
		{name: "a directory", files: map[string]*fstest.MapFile{macFUSEHelpers[0]: {Mode: iofs.ModeDir | 0o755}},
			want: []string{"not an executable file"}},
		{name: "unreadable", errs: map[string]error{macFUSEHelpers[0]: iofs.ErrPermission},
			want: []string{"unusable", macFUSEHelpers[0] + ": permission denied"}},
		{name: "broken macFUSE, working osxfuse", files: map[string]*fstest.MapFile{macFUSEHelpers[0]: {Mode: 0o600}, macFUSEHelpers[1]: exe}},
	} {
		fsys := fstest.MapFS{}
		for p, f := range c.files {
			fsys[strings.TrimPrefix(p, "/")] = f
		}
		stat := func(p string) (iofs.FileInfo, error) {
			if err := c.errs[p]; err != nil {
				return nil, &iofs.PathError{Op: "stat", Path: p, Err: err}
			}
			return iofs.Stat(fsys, strings.TrimPrefix(p, "/"))
		}
		err := checkMacFUSE(stat)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
			}
		}
	}
}

// TestMountFailureHint: a failed macFUSE mount gets the approval steps on
// macOS; other errors, and every error on Linux, are left as they are.
func TestMountFailureHint(t *testing.T) {
	helper := errors.New("mount /s on /m: mount_osxfusefs failed: exit status 1. Stderr: mount_macfuse: the file system is not available (1), Stdout: ")
	other := errors.New("open store /s: no store here")
	for _, c := range []struct {
		goos string
		err  error
		hint bool
	}{
		{"darwin", helper, true},
		{"darwin", errors.New("no FUSE mount utility found"), true},
		{"darwin", other, false},
		{"linux", helper, false},
		{"darwin", nil, false},
	} {
		got := mountFailureHint(c.goos, c.err)
		if c.err == nil {
			if got != nil {
				t.Errorf("nil became %v", got)
			}
			continue
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s %v: the cause is lost: %v", c.goos, c.err, got)
		}
		if has := strings.Contains(got.Error(), "Privacy & Security"); has != c.hint {
			t.Errorf("%s %v: hint %v, want %v", c.goos, c.err, has, c.hint)
		}
	}
}
