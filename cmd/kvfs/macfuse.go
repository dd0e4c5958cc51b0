package main

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"strings"
)

// macFUSE's mount helpers, where go-fuse looks for them (fusermountBinary
// in go-fuse's fuse/mount_darwin.go, in this order): macFUSE 4 and later,
// then osxfuse 3. go-fuse mounts only through one of them.
var macFUSEHelpers = []string{
	"/Library/Filesystems/macfuse.fs/Contents/Resources/mount_macfuse",
	"/Library/Filesystems/osxfuse.fs/Contents/Resources/mount_osxfuse",
}

// macFUSEInstall says how to install macFUSE and let its system extension
// load on Apple silicon, for messages.
const macFUSEInstall = `Install macFUSE (https://macfuse.github.io, or: brew install --cask macfuse),
then let its kernel extension load (once):
  1. Apple silicon only: shut down, press and hold the power button until
     "Loading startup options" shows, choose Options → Continue, then
     Utilities → Startup Security Utility; select the startup disk →
     Security Policy → Reduced Security, tick "Allow user management of
     kernel extensions from identified developers", and restart.
  2. Open System Settings → Privacy & Security; under Security, allow the
     system software from developer "Benjamin Fleischer" (macFUSE), and
     restart when asked.
  3. Run kvfs mount again.
See docs/MACOS.md.`

// checkMacFUSE is kvfs mount's preflight on macOS, before a daemon
// starts: without a mount helper go-fuse fails with "no FUSE mount utility
// found" in the daemon's log, which says neither what is missing nor how
// to get it. stat is os.Stat (a parameter, for the tests). A helper that
// is there but is not an executable file is reported as a broken install.
// Whether the extension may load is known only when the helper loads it
// at the mount; mountFailureHint explains that failure.
func checkMacFUSE(stat func(string) (iofs.FileInfo, error)) error {
	var problems []string
	for _, p := range macFUSEHelpers {
		fi, err := stat(p)
		switch {
		case err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0:
			return nil
		case err == nil:
			problems = append(problems, fmt.Sprintf("%s is not an executable file (mode %v): the install is broken; reinstall macFUSE", p, fi.Mode()))
		case errors.Is(err, iofs.ErrNotExist):
		default:
			problems = append(problems, fmt.Sprintf("%s: %v", p, err))
		}
	}
	msg := "macFUSE is not installed (no mount helper at " + macFUSEHelpers[0] + ")"
	if len(problems) > 0 {
		msg = "macFUSE's mount helper is unusable:\n  " + strings.Join(problems, "\n  ")
	}
	return fmt.Errorf("%s\n%s", msg, macFUSEInstall)
}

// mountFailureHint adds, on macOS, the approval steps to a failed mount:
// macFUSE's helper fails when its system extension is not allowed to
// load (the usual first-run failure on Apple silicon), and go-fuse reports
// it as "mount_osxfusefs failed: exit status N" with the helper's words.
func mountFailureHint(goos string, err error) error {
	if err == nil || goos != "darwin" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, "mount_osxfusefs failed") && !strings.Contains(msg, "mount_macfuse") && !strings.Contains(msg, "no FUSE mount utility") {
		return err
	}
	return fmt.Errorf("%w\nmacFUSE could not mount; if its system extension has not been allowed yet:\n%s", err, macFUSEInstall)
}
