package store

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
)

// BenchmarkMetaOps times the index side of create, rename, chmod and
// unlink of empty files, with and without the journal, interleaved
// (go test ./store -run '^$' -bench MetaOps): what the journal saves
// below FUSE.
func BenchmarkMetaOps(b *testing.B) {
	for _, noJournal := range []bool{false, true} {
		b.Run(fmt.Sprintf("nojournal=%v", noJournal), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "store")
			if err := Init(dir, 65536); err != nil {
				b.Fatal(err)
			}
			s, err := Open(dir, Options{NoJournal: noJournal})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			o := s.owner
			n := 1000
			var spent [4]time.Duration
			for range b.N {
				t0 := time.Now()
				inos := make([]uint64, n)
				for i := range n {
					fi, err := s.CreateAt(manifest.RootIno, fmt.Sprintf("f%d", i), 0o644, o)
					if err != nil {
						b.Fatal(err)
					}
					inos[i] = fi.Ino
				}
				t1 := time.Now()
				for i := range n {
					if err := s.RenameAt(manifest.RootIno, fmt.Sprintf("f%d", i), manifest.RootIno, fmt.Sprintf("g%d", i), false); err != nil {
						b.Fatal(err)
					}
				}
				t2 := time.Now()
				mode := fs.FileMode(0o600)
				for i := range n {
					if _, err := s.SetAttr(inos[i], AttrChange{Mode: &mode}); err != nil {
						b.Fatal(err)
					}
				}
				t3 := time.Now()
				for i := range n {
					if err := s.RemoveAt(manifest.RootIno, fmt.Sprintf("g%d", i), false); err != nil {
						b.Fatal(err)
					}
				}
				t4 := time.Now()
				spent[0] += t1.Sub(t0)
				spent[1] += t2.Sub(t1)
				spent[2] += t3.Sub(t2)
				spent[3] += t4.Sub(t3)
				_ = context.Background()
			}
			for k, name := range []string{"create", "rename", "chmod", "unlink"} {
				b.ReportMetric(float64(spent[k].Microseconds())/float64(b.N*n), name+"-µs/op")
			}
		})
	}
}
