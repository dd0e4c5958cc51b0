package testutil

import (
	"os"
	"regexp"
	"strings"
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
	if shortRun(t.Name()) {
		t.Logf("running 3s of %v: it runs at full length in another pass (KVFS_STRESS_SHORT)", full)
		return 3 * time.Second
	}
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

// shortRun reports whether the test named name (its top-level name, for a
// subtest) matches KVFS_STRESS_SHORT, a regular expression of the tests
// that run at their full length in another pass of the same run (under the
// race detector): scripts/test runs each at full length once.
func shortRun(name string) bool {
	expr := os.Getenv("KVFS_STRESS_SHORT")
	if expr == "" {
		return false
	}
	top, _, _ := strings.Cut(name, "/")
	ok, err := regexp.MatchString(expr, top)
	return err == nil && ok
}
