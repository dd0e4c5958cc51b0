package fs

import (
	"testing"
	"time"
)

func TestLogLimit(t *testing.T) {
	var l logLimit
	t0 := time.Unix(1000, 0)
	for i := range logBurst {
		if ok, d := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok || d != 0 {
			t.Fatalf("message %d: allow = %v, %d; want true, 0", i, ok, d)
		}
	}
	for i := range 5 {
		if ok, _ := l.allow(t0.Add(time.Second + time.Duration(i))); ok {
			t.Fatalf("message %d past the burst was allowed", logBurst+i)
		}
	}
	if ok, d := l.allow(t0.Add(logWindow)); !ok || d != 5 {
		t.Fatalf("first message of the next window: allow = %v, %d; want true, 5", ok, d)
	}
}
