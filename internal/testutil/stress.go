package testutil

import (
	"os"
	"testing"
	"time"
)

// StressDuration is how long a race or stress test runs: full (the length
// its documentation asks for) when KVFS_STRESS is full or long, as CI sets
// it; KVFS_STRESS as a Go duration when it is one; and short otherwise,
// long enough to exercise every path once.
func StressDuration(t testing.TB, full time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv("KVFS_STRESS")
	switch v {
	case "":
		t.Logf("running 3s of %v (KVFS_STRESS=full for the full run)", full)
		return 3 * time.Second
	case "full", "long":
		return full
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("KVFS_STRESS=%q: want full, long or a positive Go duration such as 30s", v)
	}
	return d
}

// StressFull reports whether the full-size stress pass runs
// (KVFS_STRESS=full), for tests whose size is a count rather than a
// duration. CI runs it once, without the race detector; KVFS_STRESS=long
// (under the race detector) runs durations at full length, counts short.
func StressFull() bool { return os.Getenv("KVFS_STRESS") == "full" }
