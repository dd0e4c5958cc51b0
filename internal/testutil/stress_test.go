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
