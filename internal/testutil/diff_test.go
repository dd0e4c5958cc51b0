package testutil

import "testing"

func TestMismatch(t *testing.T) {
	for _, c := range []struct {
		got, want string
		kind      string
		at, zeros int
		ok        bool
	}{
		{"abc", "abc", "", 0, 0, true},
		{"", "", "", 0, 0, true},
		{"ab\x00\x00e", "abcde", "zeroed bytes", 2, 2, false},
		{"abXde", "abcde", "wrong bytes", 2, 0, false},
		{"\x00", "a", "zeroed bytes", 0, 1, false},
	} {
		kind, at, zeros, ok := Mismatch([]byte(c.got), []byte(c.want))
		if kind != c.kind || at != c.at || zeros != c.zeros || ok != c.ok {
			t.Errorf("Mismatch(%q, %q) = %q %d %d %v, want %q %d %d %v", c.got, c.want, kind, at, zeros, ok, c.kind, c.at, c.zeros, c.ok)
		}
	}
}
