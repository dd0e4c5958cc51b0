package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws a one-line progress bar on a terminal. On anything else
// it draws nothing, so scripts and logs stay clean.
type progress struct {
	w     io.Writer
	label string
	on    bool
	start time.Time

	mu    sync.Mutex // guards last, full and drawn
	last  time.Time
	full  time.Time // when done first reached total
	drawn bool      // the bar is on the terminal's current line
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, label string, minBytes, total int64) *progress {
	return &progress{w: w, label: label, on: isTerminal(w) && total >= minBytes, start: time.Now()}
}

// update redraws the bar, at most ten times a second.
func (p *progress) update(done, total int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond && done < total {
		return
	}
	p.last = now
	p.drawn = true
	if done >= total && p.full.IsZero() {
		p.full = now
	} else if done >= total {
		// Reported whole again: the bytes are all there and the work
		// goes on (a daemon storing an upload): say so, with the time.
		fmt.Fprintf(p.w, "\r%s: %s sent, storing (%s) ", p.label, formatBytes(total), now.Sub(p.full).Round(100*time.Millisecond))
		return
	}
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const width = 30
	bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(p.w, "\r%s [%s] %5.1f%% %s / %s, %s/s ", p.label, bar, 100*frac, formatBytes(done), formatBytes(total), formatBytes(int64(rate)))
}

// done ends the bar's line.
func (p *progress) done() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// above returns a writer for output that shares the bar's terminal
// (fsck's results on standard output, the bar on standard error): each
// write first ends the bar's line, so that the output starts a line of
// its own instead of following the bar; the bar is drawn again below.
func (p *progress) above(w io.Writer) io.Writer {
	if p == nil || !p.on {
		return w
	}
	return barWriter{p, w}
}

type barWriter struct {
	p *progress
	w io.Writer
}

func (b barWriter) Write(data []byte) (int, error) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	if b.p.drawn {
		fmt.Fprintln(b.p.w)
		b.p.drawn = false
	}
	return b.w.Write(data)
}
