package fs

import (
	"sync"
	"time"
)

// logLimit bounds how often a message that any caller can provoke is
// logged: every user who may search a directory can ask for views that do
// not exist as fast as it likes, and each answer logged grew the daemon's
// log without bound (red team 11). Up to logBurst messages per logWindow
// are logged; the rest are counted, and the count rides on the next one
// logged.
type logLimit struct {
	mu      sync.Mutex
	start   time.Time // of the current window
	n       int       // logged in it
	dropped int       // not logged since the last one that was
}

const (
	logWindow = time.Minute
	logBurst  = 20
)

// allow reports whether to log a message now and, if so, how many were
// dropped since the last one logged.
func (l *logLimit) allow(now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= logWindow {
		l.start, l.n = now, 0
	}
	if l.n >= logBurst {
		l.dropped++
		return false, 0
	}
	l.n++
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}
