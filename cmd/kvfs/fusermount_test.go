package main

import (
	"errors"
	"strings"
	"testing"
)

// TestExplainFusermount: go-fuse's "fusermount exited with code 256" (a
// wait status) becomes fusermount3's exit code, its words and the likely
// fix; other errors are left alone.
func TestExplainFusermount(t *testing.T) {
	raw := errors.New("fusermount exited with code 256\n")
	for _, c := range []struct {
		said []string
		want []string
	}{
		{[]string{"fusermount3: failed to open /dev/fuse: Permission denied"}, []string{"exit code 1:\nfusermount3: failed to open /dev/fuse: Permission denied", "chmod 0666 /dev/fuse"}},
		{[]string{"fusermount3: user has no write access to mountpoint /mnt/x"}, []string{"exit code 1:", "write access to the mount point", "chown"}},
		{[]string{"fusermount3: option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf"}, []string{"user_allow_other to /etc/fuse.conf"}},
		{nil, []string{"exit code 1 (its message is above)", "ls -l /dev/fuse", "write access to the mount point"}},
	} {
		got := explainFusermount(raw, c.said).Error()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("said %q: %q lacks %q", c.said, got, w)
			}
		}
		if strings.Contains(got, "256") {
			t.Errorf("said %q: the wait status is still there: %q", c.said, got)
		}
	}
	if got := explainFusermount(errors.New("fusermount exited with code 9"), nil).Error(); !strings.Contains(got, "killed by signal 9") {
		t.Errorf("a signal: %q", got)
	}
	other := errors.New("mount point /x does not exist")
	if explainFusermount(other, nil) != other || explainFusermount(nil, nil) != nil {
		t.Error("other errors are changed")
	}
}
