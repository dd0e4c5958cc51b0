// Command fcopy copies files into a directory as dd bs=1M conv=fsync does
// (1 MiB reads and writes, then one fsync; -bs sets another size), all of
// them at once, one goroutine each, and prints how long the writes and the
// fsyncs took:
// bench/write's copier, which splits dd's one number in two, so that a
// slow row shows whether the bytes' way in (for kvfs: FUSE WRITEs into the
// spool) or the commit at fsync is the cost.
//
//	fcopy [-bs BYTES] DIR SRC...
//
// It prints one line: the seconds until the last write returned, until
// the last fsync returned (from the start, so the total), and the bytes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

func main() {
	bs := flag.Int("bs", 1<<20, "bytes per read and write")
	flag.Parse()
	if flag.NArg() < 2 || *bs <= 0 {
		fmt.Fprintln(os.Stderr, "usage: fcopy [-bs BYTES] DIR SRC...")
		os.Exit(2)
	}
	dir, srcs := flag.Arg(0), flag.Args()[1:]
	t0 := time.Now()
	var mu sync.Mutex
	var wrote, synced time.Duration
	var total int64
	var wg sync.WaitGroup
	errs := make(chan error, len(srcs))
	for _, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, s, n, err := copyFile(src, filepath.Join(dir, filepath.Base(src)), t0, *bs)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			wrote, synced, total = max(wrote, w), max(synced, s), total+n
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "fcopy:", err)
		os.Exit(1)
	}
	fmt.Printf("%.3f %.3f %d\n", wrote.Seconds(), synced.Seconds(), total)
}

// copyFile copies src to dst and returns when, from t0, its last write and
// its fsync returned.
func copyFile(src, dst string, t0 time.Time, bs int) (wrote, synced time.Duration, n int64, err error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, 0, 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, 0, 0, err
	}
	defer out.Close()
	buf := make([]byte, bs)
	for {
		m, rerr := io.ReadFull(in, buf)
		if m > 0 {
			if _, err := out.Write(buf[:m]); err != nil {
				return 0, 0, n, fmt.Errorf("write %s: %w", dst, err)
			}
			n += int64(m)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return 0, 0, n, fmt.Errorf("read %s: %w", src, rerr)
		}
	}
	wrote = time.Since(t0)
	if err := out.Sync(); err != nil {
		return 0, 0, n, fmt.Errorf("fsync %s: %w", dst, err)
	}
	synced = time.Since(t0)
	if err := out.Close(); err != nil {
		return 0, 0, n, fmt.Errorf("close %s: %w", dst, err)
	}
	return wrote, synced, n, nil
}
