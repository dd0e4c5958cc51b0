package testutil

import (
	"testing"
	"time"
)

// TestStressShort: KVFS_STRESS_SHORT shortens the tests it names (and
// their subtests), not others, whatever KVFS_STRESS says.
func TestStressShort(t *testing.T) {
	t.Setenv("KVFS_STRESS", "full")
	t.Setenv("KVFS_STRESS_SHORT", "^(TestStressShort|TestOther)$")
	if d := StressDuration(t, time.Minute); d != 3*time.Second {
		t.Errorf("named: %v, want 3s", d)
	}
	t.Run("sub", func(t *testing.T) {
		if d := StressDuration(t, time.Minute); d != 3*time.Second {
			t.Errorf("a subtest of one named: %v, want 3s", d)
		}
	})
	t.Setenv("KVFS_STRESS_SHORT", "^TestOther$")
	if d := StressDuration(t, time.Minute); d != time.Minute {
		t.Errorf("not named: %v, want the full minute", d)
	}
}

// TestStressTiers: each KVFS_STRESS tier's length and size.
func TestStressTiers(t *testing.T) {
	t.Setenv("KVFS_STRESS_SHORT", "")
	for _, c := range []struct {
		env  string
		full time.Duration
		want time.Duration
		size bool
	}{
		{"", time.Minute, 3 * time.Second, false},
		{"ci", time.Minute, 20 * time.Second, false},
		{"ci", 6 * time.Second, 3 * time.Second, false},
		{"full", time.Minute, time.Minute, true},
		{"long", time.Minute, time.Minute, false},
		{"45s", time.Minute, 45 * time.Second, false},
	} {
		t.Setenv("KVFS_STRESS", c.env)
		if d := StressDuration(t, c.full); d != c.want {
			t.Errorf("KVFS_STRESS=%q, %v in full: %v, want %v", c.env, c.full, d, c.want)
		}
		if StressFull() != c.size {
			t.Errorf("KVFS_STRESS=%q: StressFull %v", c.env, !c.size)
		}
	}
}
