//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// The client processes of prefixview_edge_test.go.

func init() {
	// view-readloop VIEW SECONDS REF...: like prefixreadloop, but goes on
	// after a failure, and prints counts: reads, errors by errno, reads
	// that are none of the REFs (mixed), and the first of each.
	clients["view-readloop"] = func(args []string) error {
		secs, _ := strconv.ParseFloat(args[1], 64)
		var refs [][]byte
		for _, p := range args[2:] {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			refs = append(refs, b)
		}
		reads, mixed := 0, 0
		errs := map[string]int{}
		var first []string
		for end := time.Now().Add(time.Duration(secs * float64(time.Second))); time.Now().Before(end); reads++ {
			b, err := os.ReadFile(args[0])
			if err != nil {
				var en syscall.Errno
				k := err.Error()
				if errors.As(err, &en) {
					k = en.Error()
				}
				if errs[k] == 0 {
					first = append(first, fmt.Sprintf("read %d: %v", reads, err))
				}
				errs[k]++
				continue
			}
			ok := false
			for _, r := range refs {
				ok = ok || bytes.Equal(b, r)
			}
			if !ok {
				if mixed == 0 {
					first = append(first, fmt.Sprintf("read %d: %d bytes, none of the versions", reads, len(b)))
				}
				mixed++
			}
		}
		fmt.Printf("reads=%d mixed=%d errors=%v\n", reads, mixed, errs)
		for _, f := range first {
			fmt.Println(f)
		}
		// VIEW_READLOOP_ALLOW lists errors (errno texts, comma-separated) the
		// case accepts; mixed reads never are.
		allowed := strings.Split(os.Getenv("VIEW_READLOOP_ALLOW"), ",")
		for k := range errs {
			if slices.Contains(allowed, k) {
				delete(errs, k)
			}
		}
		if mixed > 0 || len(errs) > 0 {
			return errors.New("bad reads")
		}
		return nil
	}
}

func init() {
	// index-churn DIR SEEDBASE: write tiny 600-token snapshots as the engine
	// does (NAME.mlxkv.tmp, then rename) over DIR/s0..s7.mlxkv, and remove
	// some, until killed. Seeds grow from SEEDBASE, so each snapshot's
	// tokens (and keys) are its own.
	clients["index-churn"] = func(args []string) error {
		base, _ := strconv.ParseUint(args[1], 10, 64)
		for i := uint64(0); ; i++ {
			seed := base + i
			name := fmt.Sprintf("%s/s%d.mlxkv", args[0], i%8)
			if i%5 == 4 {
				os.Remove(name)
				continue
			}
			h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(600, seed))
			w := &mlx.Writer{}
			if i%3 == 1 {
				w.Layout = mlx.BlocksLayout
			}
			if _, _, err := w.Write(name, h, tensors); err != nil {
				return err
			}
		}
	}
}

func init() {
	// view-pread VIEW REF COUNT: pread VIEW at COUNT random offsets and
	// lengths (unaligned, across chunk and block boundaries, past EOF)
	// and compare each with REF.
	clients["view-pread"] = func(args []string) error {
		want, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		count, _ := strconv.Atoi(args[2])
		r := rand.New(rand.NewPCG(7, uint64(len(want))))
		for i := 0; i < count; i++ {
			off := r.Int64N(int64(len(want)) + 4096)
			n := 1 + r.IntN(3<<20)
			if i%4 == 0 {
				off = off&^(1<<20-1) - int64(r.IntN(7)) // around a MiB boundary
				off = max(off, 0)
			}
			buf := make([]byte, n)
			got, err := f.ReadAt(buf, off)
			exp := 0
			if off < int64(len(want)) {
				exp = min(n, len(want)-int(off))
			}
			if got != exp || (err != nil && !errors.Is(err, io.EOF)) {
				return fmt.Errorf("pread %d at %d: %d bytes, %v; want %d", n, off, got, err, exp)
			}
			if !bytes.Equal(buf[:got], want[off:off+int64(got)]) {
				return fmt.Errorf("pread %d at %d: other bytes", n, off)
			}
		}
		return nil
	}
}

func init() {
	// view-rewrite LAYOUT PATH SECONDS: write tiny 600-token snapshots of
	// seeds 1 and 2 in turn over PATH, as the engine does (.tmp, rename),
	// for SECONDS. Prints the number of writes.
	clients["view-rewrite"] = func(args []string) error {
		secs, _ := strconv.ParseFloat(args[2], 64)
		var hs []*mlx.Header
		var ts [][]mlx.Tensor
		for _, seed := range []uint64{1, 2} {
			h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(600, seed))
			hs, ts = append(hs, h), append(ts, tensors)
		}
		w := &mlx.Writer{}
		if args[0] == "blocks" {
			w.Layout = mlx.BlocksLayout
		}
		i := 0
		for end := time.Now().Add(time.Duration(secs * float64(time.Second))); time.Now().Before(end); i++ {
			if _, _, err := w.Write(args[1], hs[i%2], ts[i%2]); err != nil {
				return err
			}
		}
		fmt.Println(i)
		return nil
	}
}

func init() {
	// zero-snapshot PATH: write a snapshot of the tiny model holding the first
	// 700 of the tokens of seed 1, with every tensor byte zero (not the
	// cache those tokens make).
	clients["zero-snapshot"] = func(args []string) error {
		h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(800, 1)[:700])
		for i, t := range tensors {
			n := int64(t.DType.Size())
			for _, d := range t.Shape {
				n *= d
			}
			tensors[i] = mlx.Contiguous(make([]byte, n), t.DType, t.Shape...)
		}
		_, _, err := (&mlx.Writer{}).Write(args[0], h, tensors)
		return err
	}
}
