package main

import "testing"

// TestParseMountinfo: mount points and sources with spaces, tabs,
// newlines and backslashes come back as they were (the kernel escapes
// them in octal), optional fields are skipped, and malformed lines are
// not entries.
func TestParseMountinfo(t *testing.T) {
	for line, want := range map[string]mountEntry{
		`36 35 98:0 / /mnt/a\040b rw,nosuid shared:1 master:2 - fuse.kvfs /srv/my\040store rw,user_id=0`: {Point: "/mnt/a b", FSType: "fuse.kvfs", Source: "/srv/my store"},
		`37 35 0:40 / /tmp/t\011\012\134x rw - tmpfs tmpfs rw,size=1024k`:                                {Point: "/tmp/t\t\n\\x", FSType: "tmpfs", Source: "tmpfs"},
		`38 35 0:41 / /odd\09 rw - ext4 /dev/sda1 rw`:                                                    {Point: `/odd\09`, FSType: "ext4", Source: "/dev/sda1"},
	} {
		got, ok := parseMountinfo(line)
		if !ok || got != want {
			t.Errorf("parseMountinfo(%q) = %+v, %v; want %+v", line, got, ok, want)
		}
	}
	for _, line := range []string{"", "36 35 98:0 / /mnt rw", "36 35 - fuse.kvfs", `1 2 3 4 - x`} {
		if e, ok := parseMountinfo(line); ok {
			t.Errorf("parseMountinfo(%q) = %+v, want no entry", line, e)
		}
	}
}
