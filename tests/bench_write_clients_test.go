//go:build linux

package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// The clients of BenchmarkWriteTable (bench_write_test.go). Each replays
// one write protocol in its own process, against one directory or, where
// the client interleaves the two, against a plain directory and a kvfs
// directory in turn, and prints what it timed. Content is generated before
// the clock starts and is new to the store in every round (kvfs would
// otherwise deduplicate it), so only the file system is timed.
func init() {
	clients["wb-durable"] = wbDurableClient
	clients["wb-blockseries"] = wbBlockSeriesClient
	clients["wb-blockverify"] = wbBlockVerifyClient
	clients["wb-collect"] = wbCollectClient
	clients["wb-whole"] = wbWholeClient
	clients["wb-fsyncwriter"] = wbFsyncWriterClient
	clients["wb-meta"] = wbMetaClient
	clients["wb-smallfiles"] = wbSmallFilesClient
}

// wbSeriesModel is the blocks-layout series geometry: 4 layers,
// 8 KV heads of 128, bf16 (16 KiB per token).
var wbSeriesModel = snapgen.Model{ID: "bench/series", Layers: 4, KVHeads: 8, HeadDim: 128, DType: mlx.BFloat16}

func wbAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("client argument %q: %v", s, err))
	}
	return n
}

// wbFill fills buf with random bytes drawn from seed and i.
func wbFill(buf []byte, seed, i uint64) {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	binary.LittleEndian.PutUint64(s[8:], i)
	rand.NewChaCha8(s).Read(buf)
}

// wbSettle syncs every file system and waits a moment, so that a timed
// part neither pays for the last one's writeback nor overlaps work kvfs
// finishes after the calls return (a release, which FUSE sends
// asynchronously after the last close, commits a file).
func wbSettle() {
	syscall.Sync()
	time.Sleep(250 * time.Millisecond)
}

// wbAwaitStart prints "ready" and waits for a line on stdin: the parent
// releases concurrent clients at once (wbRunTogether).
func wbAwaitStart() {
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// wbWriteDurable replays the engine's blocks protocol for one block
// (FORMAT.md §4.3): a bare existence check of blocks/<h>, then h.tmp
// created (0600, truncated), written, fsynced, closed and renamed to h.
// No directory fsync, as the engine.
func wbWriteDurable(name string, b []byte) error {
	if _, err := os.Lstat(name); err == nil {
		return fmt.Errorf("block %s already exists: the content is not new", name)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(name+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s.tmp: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(name+".tmp", name)
}

// wbDurableClient, client wb-durable, DIR SIZE N SEED [wait]: write N durable files of SIZE
// random bytes into DIR/blocks as the engine writes blocks (wbWriteDurable).
// Prints the wall-clock start and end (Unix ns) of the writes, then each
// file's latency in ns on one line. With "wait", waits for the parent's
// start signal (wbAwaitStart) after generating the content.
func wbDurableClient(args []string) error {
	dir, size, n, seed := args[0], wbAtoi(args[1]), wbAtoi(args[2]), uint64(wbAtoi(args[3]))
	blocks := filepath.Join(dir, "blocks")
	if err := os.MkdirAll(blocks, 0o700); err != nil {
		return err
	}
	bufs := make([][]byte, n)
	names := make([]string, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		wbFill(bufs[i], seed, uint64(i))
		sum := sha256.Sum256(bufs[i])
		names[i] = filepath.Join(blocks, hex.EncodeToString(sum[:]))
	}
	if len(args) > 4 && args[4] == "wait" {
		wbAwaitStart()
	}
	lat := make([]string, n)
	start := time.Now()
	for i, b := range bufs {
		t0 := time.Now()
		if err := wbWriteDurable(names[i], b); err != nil {
			return err
		}
		lat[i] = strconv.FormatInt(time.Since(t0).Nanoseconds(), 10)
	}
	end := time.Now()
	fmt.Println(start.UnixNano(), end.UnixNano())
	fmt.Println(strings.Join(lat, " "))
	return nil
}

// wbBlockSeriesClient, client wb-blockseries, BLOCKBYTES SEED T1,T2,... DIR1 DIR2: write the series
// of snapshots of one conversation (wbSeriesModel, the first Ti of the same
// tokens) into DIR1 and DIR2 in the blocks layout with mlx.Writer, snapshot
// by snapshot, alternating which directory goes first. Prints the seconds
// spent writing into each directory.
func wbBlockSeriesClient(args []string) error {
	blockBytes := int64(wbAtoi(args[0]))
	seed := uint64(wbAtoi(args[1]))
	var counts []int
	for _, f := range strings.Split(args[2], ",") {
		counts = append(counts, wbAtoi(f))
	}
	dirs := args[3:5]
	tokens := snapgen.Tokens(slices.Max(counts), seed)
	w := &mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: blockBytes}
	var spent [2]time.Duration
	for i, n := range counts {
		h, tensors := wbSeriesModel.Snapshot(tokens[:n])
		for k := range 2 {
			d := (i + k) % 2
			wbSettle()
			t0 := time.Now()
			if _, _, err := w.Write(filepath.Join(dirs[d], fmt.Sprintf("snap-%d.mlxkv", n)), h, tensors); err != nil {
				return err
			}
			spent[d] += time.Since(t0)
		}
	}
	fmt.Println(spent[0].Seconds(), spent[1].Seconds())
	return nil
}

// wbVerifyDir reads every *.mlxkv of a namespace directory and verifies
// every block against its hash, as the engine's reader with verify does.
func wbVerifyDir(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.mlxkv"))
	if err != nil || len(names) == 0 {
		return fmt.Errorf("no snapshots in %s: %v", dir, err)
	}
	for _, name := range names {
		s, err := mlx.ReadFile(name)
		if err != nil {
			return err
		}
		if err := s.Verify(context.Background(), nil, mlx.BlockDir(dir)); err != nil {
			return err
		}
	}
	return nil
}

// wbBlockVerifyClient, client wb-blockverify, ROUNDS DIR1 DIR2 (each a list of namespace directories
// joined by ","): read back and verify every snapshot, ROUNDS times,
// alternating which list goes first. Prints the best time of each.
func wbBlockVerifyClient(args []string) error {
	rounds := wbAtoi(args[0])
	best := [2]time.Duration{1 << 62, 1 << 62}
	for r := range rounds {
		for k := range 2 {
			d := (r + k) % 2
			t0 := time.Now()
			for _, dir := range strings.Split(args[1+d], ",") {
				if err := wbVerifyDir(dir); err != nil {
					return err
				}
			}
			best[d] = min(best[d], time.Since(t0))
		}
	}
	fmt.Println(best[0].Seconds(), best[1].Seconds())
	return nil
}

// wbCollectScan is the engine's collect (FORMAT.md §4.6) without the
// deletes: in every namespace directory of root that has blocks/, the live
// set is the union of the block lists of every *.mlxkv whose header
// verifies; every entry of blocks/ not in it would be deleted. Returns the
// numbers of live and dead names.
func wbCollectScan(root string) (live, dead int, err error) {
	nss, err := os.ReadDir(root)
	if err != nil {
		return 0, 0, err
	}
	for _, ns := range nss {
		dir := filepath.Join(root, ns.Name())
		blocks, err := os.ReadDir(filepath.Join(dir, "blocks"))
		if err != nil {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return 0, 0, err
		}
		set := map[string]bool{}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".mlxkv") {
				continue
			}
			s, err := mlx.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				if errors.Is(err, mlx.ErrHeaderHash) {
					continue // contributes nothing, as in the engine
				}
				return 0, 0, err
			}
			for _, sl := range s.Header.Slots() {
				for _, b := range sl.Blocks {
					set[b.Hash] = true
				}
			}
		}
		for _, b := range blocks {
			if set[b.Name()] {
				live++
			} else {
				dead++
			}
		}
	}
	return live, dead, nil
}

// wbCollectClient, client wb-collect, ROUNDS ROOT1 ROOT2: the collect scan of each root,
// ROUNDS times, alternating which goes first. Prints the median time of
// each root, then each root's live and dead block counts.
func wbCollectClient(args []string) error {
	rounds := wbAtoi(args[0])
	times := [2][]time.Duration{}
	var counts [2][2]int
	for r := range rounds {
		for k := range 2 {
			d := (r + k) % 2
			t0 := time.Now()
			live, dead, err := wbCollectScan(args[1+d])
			if err != nil {
				return err
			}
			times[d] = append(times[d], time.Since(t0))
			counts[d] = [2]int{live, dead}
		}
	}
	med := func(ts []time.Duration) float64 { slices.Sort(ts); return ts[len(ts)/2].Seconds() }
	fmt.Println(med(times[0]), med(times[1]), counts[0][0], counts[0][1], counts[1][0], counts[1][1])
	return nil
}

// wbWholeClient, client wb-whole, TOKENS ROUNDS SEED DIR1 DIR2: in each round, generate a
// new Llama-3-8B-shaped snapshot of TOKENS tokens (128 KiB each) and write
// it into DIR1 and DIR2 in the whole layout with mlx.Writer (tmp, write,
// fsync, close, rename, directory fsync), alternating which goes first;
// each file is removed after its round. Prints the best time of each
// directory and the file size.
func wbWholeClient(args []string) error {
	n, rounds, seed := wbAtoi(args[0]), wbAtoi(args[1]), uint64(wbAtoi(args[2]))
	dirs := args[3:5]
	best := [2]time.Duration{1 << 62, 1 << 62}
	var size int64
	for r := range rounds {
		h, tensors := snapgen.Llama3_8B.Snapshot(snapgen.Tokens(n, seed+uint64(r)))
		for k := range 2 {
			d := (r + k) % 2
			p := filepath.Join(dirs[d], "snap.mlxkv")
			wbSettle()
			t0 := time.Now()
			if _, _, err := (&mlx.Writer{}).Write(p, h, tensors); err != nil {
				return err
			}
			best[d] = min(best[d], time.Since(t0))
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			size = fi.Size()
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	fmt.Println(best[0].Seconds(), best[1].Seconds(), size)
	return nil
}

// wbFsyncWriterClient, client wb-fsyncwriter, FILE WRITES SEED: open the existing FILE for writing
// (no truncation), then WRITES pwrites of 4 KiB to 1 MiB of random bytes
// at random offsets inside it, with an fsync after every 64th, and close.
// Waits for the start signal after generating the content; prints the
// start and end (Unix ns) and the bytes written.
func wbFsyncWriterClient(args []string) error {
	path, writes, seed := args[0], wbAtoi(args[1]), uint64(wbAtoi(args[2]))
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	src := make([]byte, 2<<20)
	wbFill(src, seed, 0)
	type op struct{ off, n, from int64 }
	ops := make([]op, writes)
	var total int64
	for i := range ops {
		n := 4096 + rng.Int64N(1<<20-4096+1)
		ops[i] = op{off: rng.Int64N(fi.Size() - n + 1), n: n, from: rng.Int64N(1 << 20)}
		total += n
	}
	wbAwaitStart()
	start := time.Now()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	for i, o := range ops {
		if _, err := f.WriteAt(src[o.from:o.from+o.n], o.off); err != nil {
			f.Close()
			return err
		}
		if (i+1)%64 == 0 {
			if err := f.Sync(); err != nil {
				f.Close()
				return fmt.Errorf("fsync %s: %w", path, err)
			}
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Println(start.UnixNano(), time.Now().UnixNano(), total)
	return nil
}

// wbMetaClient, client wb-meta, N DIR1 DIR2: create N empty files in each directory, then
// stat, rename, chmod and unlink each, phase by phase, each phase timed
// in both directories. Prints, for each directory, the seconds of create,
// stat, rename, chmod and unlink.
func wbMetaClient(args []string) error {
	n := wbAtoi(args[0])
	dirs := args[1:3]
	name := func(dir, p string, i int) string { return filepath.Join(dir, fmt.Sprintf("%s%05d", p, i)) }
	phases := []func(dir string, i int) error{
		func(dir string, i int) error {
			fd, err := syscall.Open(name(dir, "f", i), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("create %s: %w", name(dir, "f", i), err)
			}
			return syscall.Close(fd)
		},
		func(dir string, i int) error {
			var st syscall.Stat_t
			return syscall.Stat(name(dir, "f", i), &st)
		},
		func(dir string, i int) error { return syscall.Rename(name(dir, "f", i), name(dir, "g", i)) },
		func(dir string, i int) error { return syscall.Chmod(name(dir, "g", i), 0o600) },
		func(dir string, i int) error { return syscall.Unlink(name(dir, "g", i)) },
	}
	var spent [2][]float64
	for p, phase := range phases {
		for k := range 2 {
			d := (p + k) % 2
			wbSettle()
			t0 := time.Now()
			for i := range n {
				if err := phase(dirs[d], i); err != nil {
					return fmt.Errorf("phase %d in %s: %w", p, dirs[d], err)
				}
			}
			spent[d] = append(spent[d], time.Since(t0).Seconds())
		}
	}
	for _, s := range spent {
		fmt.Println(strings.Trim(fmt.Sprint(s), "[]"))
	}
	return nil
}

// wbSmallFilesClient, client wb-smallfiles, DIR N SEED: write N files of 4 KiB to 64 KiB of random
// bytes (create, write, close: committed at close). Prints the bytes
// written and the seconds.
func wbSmallFilesClient(args []string) error {
	dir, n, seed := args[0], wbAtoi(args[1]), uint64(wbAtoi(args[2]))
	rng := rand.New(rand.NewPCG(seed, 2))
	buf := make([]byte, 64<<10)
	var total int64
	t0 := time.Now()
	for i := range n {
		b := buf[:4096+rng.IntN(60<<10+1)]
		wbFill(b, seed, uint64(i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%05d", i)), b, 0o644); err != nil {
			return err
		}
		total += int64(len(b))
	}
	fmt.Println(total, time.Since(t0).Seconds())
	return nil
}
