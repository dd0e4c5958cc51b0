package store_test

import (
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestTimesAcrossCommits: SetAttr sets the atime and the mtime apart (the
// ctime is the time of the change); a commit of new content takes the
// writer's mtime and ctime, keeps the atime, never moves the ctime back
// and leaves the directory's times alone, while a new name changes them.
func TestTimesAcrossCommits(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	d, err := s.MkdirAt(manifest.RootIno, "d", 0o755, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := s.CreateAt(d.Ino, "f", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Atime.Equal(fi.Mtime) {
		t.Errorf("new file: atime %v, mtime %v", fi.Atime, fi.Mtime)
	}
	at, mt := time.Unix(1000000000, 1), time.Unix(1200000000, 2)
	before := time.Now()
	if fi, err = s.SetAttr(fi.Ino, store.AttrChange{Atime: &at}); err != nil {
		t.Fatal(err)
	}
	if !fi.Atime.Equal(at) || fi.Mtime.Equal(at) || fi.Ctime.Before(before) {
		t.Errorf("atime set alone: %+v", fi)
	}
	created := fi.Mtime
	if fi, err = s.SetAttr(fi.Ino, store.AttrChange{Mtime: &mt}); err != nil {
		t.Fatal(err)
	}
	if !fi.Atime.Equal(at) || !fi.Mtime.Equal(mt) || created.Equal(mt) {
		t.Errorf("mtime set alone: %+v", fi)
	}
	chmodded := fi.Ctime
	dirMtime := time.Unix(1300000000, 3)
	if _, err := s.SetAttr(d.Ino, store.AttrChange{Mtime: &dirMtime}); err != nil {
		t.Fatal(err)
	}
	// The writer's times: a write before the last attribute change.
	wm, wc := time.Unix(1250000000, 4), chmodded.Add(-time.Second)
	b := randBytes(10000, 7)
	nfi, _, err := s.CommitIno(ctx, fi.Ino, spoolFile(t, s, b), int64(len(b)), store.CommitOptions{Mtime: wm, Ctime: wc})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.StatIno(nfi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Mtime.Equal(wm) || !got.Atime.Equal(at) || !got.Ctime.Equal(chmodded) {
		t.Errorf("after a commit: atime %v mtime %v ctime %v, want %v %v %v", got.Atime, got.Mtime, got.Ctime, at, wm, chmodded)
	}
	later := time.Now().Add(time.Hour)
	b = randBytes(5000, 8)
	if nfi, _, err = s.CommitIno(ctx, nfi.Ino, spoolFile(t, s, b), int64(len(b)), store.CommitOptions{Mtime: later, Ctime: later}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.StatIno(nfi.Ino); !got.Ctime.Equal(later) || !got.Mtime.Equal(later) {
		t.Errorf("after a second commit: mtime %v ctime %v, want %v", got.Mtime, got.Ctime, later)
	}
	if dd, _ := s.StatIno(d.Ino); !dd.Mtime.Equal(dirMtime) {
		t.Errorf("a commit of new content changed its directory's mtime to %v", dd.Mtime)
	}
	dd, _ := s.StatIno(d.Ino)
	if _, err := s.CreateAt(d.Ino, "g", 0o644, store.Owner{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.StatIno(d.Ino); got.Mtime.Equal(dirMtime) || !got.Atime.Equal(dd.Atime) {
		t.Errorf("a new entry: directory mtime %v atime %v, want now and %v", got.Mtime, got.Atime, dd.Atime)
	}
}
