package manifest

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkUpdateSmall: the commit of a small change (a new inode and its
// name, as a create does) in plain mode (a synced bbolt transaction) and
// in journal mode over a journal that costs nothing (the overlay and the
// record alone; background checkpoints at the default bounds included).
//
//	go test ./manifest -run XXX -bench UpdateSmall -benchtime 2000x
func BenchmarkUpdateSmall(b *testing.B) {
	for _, mode := range []string{"plain", "journal-noop"} {
		b.Run(mode, func(b *testing.B) {
			var opts []Option
			if mode != "plain" {
				opts = append(opts, WithJournal(JournalOptions{Log: &noopLog{}}))
			}
			db, err := Open(filepath.Join(b.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.ResetTimer()
			for i := range b.N {
				err := db.Update(func(tx *Tx) error {
					ino, err := tx.NextIno()
					if err != nil {
						return err
					}
					name := fmt.Sprintf("file%08d", i)
					if err := tx.PutInode(&Inode{Ino: ino, Mode: 0o644, Parent: RootIno, Name: name, Mtime: 1, Ctime: 1}); err != nil {
						return err
					}
					return tx.Link(RootIno, name, ino)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkViewLookup: a View with one Lookup among 100,000 names, with
// the names all in bbolt (overlay empty) and all in the overlay.
//
//	go test ./manifest -run XXX -bench ViewLookup
func BenchmarkViewLookup(b *testing.B) {
	const names = 100000
	for _, where := range []string{"bbolt", "overlay"} {
		b.Run(where, func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second,
				WithJournal(JournalOptions{Log: &noopLog{}, MaxEntries: -1, MaxBytes: -1, Interval: -1}))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			for i := 0; i < names; i += 1000 {
				err := db.Update(func(tx *Tx) error {
					for j := i; j < i+1000; j++ {
						if err := tx.Link(RootIno, fmt.Sprintf("file%08d", j), uint64(j+2)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if where == "bbolt" {
				if err := db.Checkpoint(); err != nil {
					b.Fatal(err)
				}
			}
			if n := db.j.cur.Load().entries; (n == 0) != (where == "bbolt") {
				b.Fatalf("%d entries in the overlay", n)
			}
			b.ResetTimer()
			for i := range b.N {
				err := db.View(func(tx *Tx) error {
					_, err := tx.Lookup(RootIno, fmt.Sprintf("file%08d", (i*7919)%names))
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
