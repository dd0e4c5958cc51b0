package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// memLog is an in-memory Log that can simulate a crash: crash drops every
// record not synced. It is the worst journal the contract allows: after a
// crash it numbers on from its last surviving record, having forgotten
// what it truncated (the DB tells it again at open).
type memLog struct {
	mu        sync.Mutex
	recs      []memRec
	next      uint64 // last sequence number given
	synced    uint64
	truncated uint64
	appends   int
}

type memRec struct {
	seq     uint64
	payload []byte
}

func (l *memLog) Append(p []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	l.recs = append(l.recs, memRec{l.next, bytes.Clone(p)})
	l.appends++
	return l.next, nil
}

func (l *memLog) Sync(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.next {
		return fmt.Errorf("sync to %d past the last record %d", seq, l.next)
	}
	l.synced = max(l.synced, seq)
	return nil
}

func (l *memLog) Replay(after uint64, fn func(uint64, []byte) error) error {
	l.mu.Lock()
	recs := append([]memRec(nil), l.recs...)
	l.mu.Unlock()
	for _, r := range recs {
		if r.seq > after {
			if err := fn(r.seq, r.payload); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *memLog) Truncate(upto uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i < len(l.recs) && l.recs[i].seq <= upto {
		i++
	}
	l.recs = l.recs[i:]
	l.truncated = max(l.truncated, upto)
	l.next = max(l.next, upto)
	return nil
}

// crash drops the records not synced and forgets the truncation point.
func (l *memLog) crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i < len(l.recs) && l.recs[i].seq <= l.synced {
		i++
	}
	l.recs = l.recs[:i]
	l.next = 0
	if i > 0 {
		l.next = l.recs[i-1].seq
	}
	l.synced = l.next
	l.truncated = 0
}

// noopLog numbers records and keeps nothing: a journal of zero cost, to
// measure the overlay alone.
type noopLog struct{ next uint64 }

func (l *noopLog) Append([]byte) (uint64, error)                   { l.next++; return l.next, nil }
func (l *noopLog) Sync(uint64) error                               { return nil }
func (l *noopLog) Replay(uint64, func(uint64, []byte) error) error { return nil }
func (l *noopLog) Truncate(upto uint64) error                      { l.next = max(l.next, upto); return nil }

// fileLog is a simple Log in one file: a header holding the truncation
// point, then records (seq u64, length u32, payload). Truncate rewrites
// the file. It checks that the DB works with a journal that lives on
// disk across a real close and reopen.
type fileLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	next uint64
}

func openFileLog(path string) (*fileLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	l := &fileLog{path: path, f: f}
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(f, hdr); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, err
		}
		if _, err := f.Write(hdr); err != nil {
			return nil, err
		}
	}
	l.next = binary.BigEndian.Uint64(hdr)
	err = l.Replay(0, func(seq uint64, _ []byte) error { l.next = seq; return nil })
	if _, err2 := f.Seek(0, io.SeekEnd); err == nil {
		err = err2
	}
	return l, err
}

func (l *fileLog) Append(p []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	b := binary.BigEndian.AppendUint64(nil, l.next)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	_, err := l.f.Write(append(b, p...))
	return l.next, err
}

func (l *fileLog) Sync(uint64) error { return l.f.Sync() }

func (l *fileLog) Replay(after uint64, fn func(uint64, []byte) error) error {
	raw, err := os.ReadFile(l.path)
	if err != nil {
		return err
	}
	for b := raw[8:]; len(b) >= 12; {
		seq, n := binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:])
		if uint32(len(b)-12) < n {
			break // torn tail
		}
		if seq > after {
			if err := fn(seq, b[12:12+n]); err != nil {
				return err
			}
		}
		b = b[12+n:]
	}
	return nil
}

func (l *fileLog) Truncate(upto uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = max(l.next, upto)
	out := binary.BigEndian.AppendUint64(nil, upto)
	err := l.Replay(upto, func(seq uint64, p []byte) error {
		out = binary.BigEndian.AppendUint64(out, seq)
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.path+".tmp", out, 0o600); err != nil {
		return err
	}
	if err := os.Rename(l.path+".tmp", l.path); err != nil {
		return err
	}
	l.f.Close()
	l.f, err = os.OpenFile(l.path, os.O_RDWR|os.O_APPEND, 0)
	return err
}

func (l *fileLog) Close() error { return l.f.Close() }

// crashClose closes the DB as a crash would: no final checkpoint.
func (db *DB) crashClose() {
	if db.j != nil {
		close(db.j.stop)
		<-db.j.done
	}
	db.closeBolt()
}

// opener opens an index, in the mode of the test running.
type opener func(path string, create bool, params Params, timeout time.Duration) (*DB, error)

// inBothModes runs a test of the DB in plain mode and in journal mode
// (with an in-memory log per index path, kept across reopening).
func inBothModes(t *testing.T, test func(t *testing.T, open opener)) {
	t.Run("plain", func(t *testing.T) {
		test(t, func(path string, create bool, params Params, timeout time.Duration) (*DB, error) {
			return Open(path, create, params, timeout)
		})
	})
	t.Run("journal", func(t *testing.T) {
		logs := map[string]*memLog{}
		test(t, func(path string, create bool, params Params, timeout time.Duration) (*DB, error) {
			l := logs[path]
			if l == nil {
				l = &memLog{}
				logs[path] = l
			}
			return Open(path, create, params, timeout, WithJournal(JournalOptions{Log: l}))
		})
	})
}
