package tests

import (
	"os"
	"testing"
	"time"
)

// stressDuration is how long a race or stress test runs: KVFS_STRESS (a Go
// duration) when set, as CI sets it for one full-length pass, and short
// otherwise, long enough to exercise every path once. full is the length
// the test asks for in its documentation, reported when the run is cut.
func stressDuration(t testing.TB, full time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv("KVFS_STRESS")
	if v == "" {
		t.Logf("running 3s of %v (set KVFS_STRESS=%v for the full run)", full, full)
		return 3 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("KVFS_STRESS=%q: want a positive Go duration such as 30s", v)
	}
	return d
}

// stressFull reports whether the full-length stress pass runs (KVFS_STRESS
// set), for tests whose size is a count rather than a duration.
func stressFull() bool { return os.Getenv("KVFS_STRESS") != "" }
