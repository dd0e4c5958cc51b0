package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProgress: package results, failures with their output, skips with
// their reason and slow tests are shown; passing output is not; the run
// counts its failures and packages.
func TestProgress(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"build-output","ImportPath":"x/broken","Output":"broken.go:1: syntax error\n"}`,
		`{"Action":"run","Package":"m/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"m/a","Test":"TestOK","Output":"quiet\n"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"m/a","Test":"TestSlow"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":42}`,
		`{"Action":"run","Package":"m/a","Test":"TestBad"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBad","Output":"    bad_test.go:9: wrong byte at 4097\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestBad","Elapsed":1}`,
		`{"Action":"run","Package":"m/a","Test":"TestSkip"}`,
		`{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    s_test.go:3: needs root\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}`,
		`{"Action":"skip","Package":"m/a","Test":"TestSkip","Elapsed":0}`,
		`{"Action":"run","Package":"m/a","Test":"TestHang"}`,
		`{"Action":"output","Package":"m/a","Test":"TestHang","Output":"panic: test timed out after 10m0s\n"}`,
		`{"Action":"output","Package":"m/a","Output":"FAIL\n"}`,
		`{"Action":"fail","Package":"m/a","Elapsed":44}`,
		`not json: go: downloading something`,
	}, "\n")
	var out strings.Builder
	p := &progress{w: &out, pass: "t", start: time.Now(), slow: 30 * time.Second,
		running: map[key]time.Time{}, output: map[key]*strings.Builder{}, skipped: map[string]int{}}
	if err := p.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	p.summary(2)
	got := out.String()
	for _, want := range []string{"syntax error", "--- FAIL: m/a TestBad", "wrong byte at 4097", "--- SKIP: m/a TestSkip: s_test.go:3: needs root",
		"TestSlow passed in 42s", "--- unfinished: m/a TestHang", "test timed out", "FAIL\tm/a\t44.0s", "not json: go: downloading", "42.0s  m/a TestSlow", "skipped 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") || strings.Contains(got, "TestOK") {
		t.Errorf("a quick passing test's output was shown:\n%s", got)
	}
	if p.failed != 2 || p.pkgs != 1 {
		t.Errorf("failed %d, packages %d; want 2, 1", p.failed, p.pkgs)
	}
	if p.tests.passed != 2 || p.tests.failed != 1 || p.tests.skipped != 1 {
		t.Errorf("tests passed, failed, skipped: %+v; want 2, 1, 1", p.tests)
	}
	times := t.TempDir() + "/times"
	if err := p.appendTimes(times); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(times)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "t\tm/a\tTestSlow\t42.0\n") || strings.Count(string(b), "\n") != 4 {
		t.Errorf("times file, slowest first, one line a test:\n%s", b)
	}
}
