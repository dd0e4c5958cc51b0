package testutil

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The lengths of race and stress tests, set by KVFS_STRESS. There are
// three tiers (scripts/test --help):
//
//	(unset)  3 s each, small counts: a developer's go test, and
//	         scripts/test --quick
//	ci       a third of the full length (at least 3 s), small counts:
//	         scripts/test, what CI runs, inside its time limit
//	full     the full length and counts the tests document: scripts/test
//	         --long, before a release (with scripts/soak)
//	long     the full length, small counts: --long's race passes, whose
//	         instrumented daemon would take hours over the full counts
//
// A Go duration (KVFS_STRESS=45s) sets every length to it.
const stressEnv = "KVFS_STRESS"

// StressDuration is how long a race or stress test runs, given the full
// length its documentation asks for.
func StressDuration(t testing.TB, full time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(stressEnv)
	if shortRun(t.Name()) {
		t.Logf("running 3s of %v: it runs longer in another pass (KVFS_STRESS_SHORT)", full)
		return 3 * time.Second
	}
	switch v {
	case "":
		t.Logf("running 3s of %v (KVFS_STRESS=ci for a third of it, full for all)", full)
		return 3 * time.Second
	case "ci":
		d := max(full/3, 3*time.Second)
		t.Logf("running %v of %v (KVFS_STRESS=full for all of it)", d, full)
		return d
	case "full", "long":
		return full
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("KVFS_STRESS=%q: want ci, full, long or a positive Go duration such as 30s", v)
	}
	return d
}

// StressFull reports whether the full-size stress tier runs
// (KVFS_STRESS=full), for tests whose size is a count rather than a
// duration: scripts/test --long runs it once, without the race detector.
func StressFull() bool { return os.Getenv(stressEnv) == "full" }

// shortRun reports whether the test named name (its top-level name, for a
// subtest) matches KVFS_STRESS_SHORT, a regular expression of the tests
// that run at length in another pass of the same run (under the race
// detector): scripts/test runs each at length once.
func shortRun(name string) bool {
	expr := os.Getenv("KVFS_STRESS_SHORT")
	if expr == "" {
		return false
	}
	top, _, _ := strings.Cut(name, "/")
	ok, err := regexp.MatchString(expr, top)
	return err == nil && ok
}
