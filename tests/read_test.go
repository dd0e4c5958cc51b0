//go:build linux

package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"golang.org/x/sys/unix"
)

// Read-path tests: every reply carries exactly the bytes asked for (up to
// EOF), whatever the pack layout under the file: chunks at unaligned pack
// offsets, many packs, zero runs, pipes at their smallest.

func init() {
	clients["readcheck"] = readCheck
}

// readPlan is what the readcheck client does: reads of mounted files,
// each compared with a local copy.
type readPlan struct {
	Files []planFile `json:"files"`
	Reads []planRead `json:"reads"`
}

type planFile struct {
	Mounted string `json:"mounted"`
	Local   string `json:"local"`
}

// planRead is one pread of N bytes at Off of file File. Direct reads go
// through an O_DIRECT descriptor, so that the daemon sees exactly this
// offset and size; the others drop the file's cached pages first
// (fadvise DONTNEED), so that the kernel asks the daemon for them again,
// in readahead-sized requests.
type planRead struct {
	File   int   `json:"file"`
	Off    int64 `json:"off"`
	N      int   `json:"n"`
	Direct bool  `json:"direct,omitempty"`
}

// readCheck is the readcheck client: readcheck PLAN runs the reads of the
// JSON plan file PLAN and fails if any returns bytes that differ from the
// local copy's, or fewer bytes than the file holds (reporting up to 20).
func readCheck(args []string) error {
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var p readPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	type open struct {
		cached, direct *os.File
		want           []byte
	}
	files := make([]*open, len(p.Files))
	// get opens a file (through the page cache and directly) and loads
	// its source at its first read.
	get := func(i int) (*open, error) {
		if files[i] != nil {
			return files[i], nil
		}
		o := &open{}
		var err error
		if o.want, err = os.ReadFile(p.Files[i].Local); err != nil {
			return nil, err
		}
		if o.cached, err = os.Open(p.Files[i].Mounted); err != nil {
			return nil, err
		}
		if o.direct, err = os.OpenFile(p.Files[i].Mounted, os.O_RDONLY|syscall.O_DIRECT, 0); err != nil {
			o.cached.Close()
			return nil, err
		}
		files[i] = o
		return o, nil
	}
	defer func() {
		for _, o := range files {
			if o != nil {
				o.cached.Close()
				o.direct.Close()
			}
		}
	}()
	var buf []byte
	var bad []string
	for k, r := range p.Reads {
		o, err := get(r.File)
		if err != nil {
			return err
		}
		f := o.cached
		if r.Direct {
			f = o.direct
		} else if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("fadvise %s: %w", f.Name(), err)
		}
		if cap(buf) < r.N {
			buf = make([]byte, r.N)
		}
		got, first, err := preadFull(f, buf[:r.N], r.Off)
		if err != nil {
			return fmt.Errorf("read %d: pread(%s, %d, %d): %w", k, f.Name(), r.N, r.Off, err)
		}
		want := o.want[min(r.Off, int64(len(o.want))):min(r.Off+int64(r.N), int64(len(o.want)))]
		if first != len(want) && bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("read %d: pread(%s, %d, %d) direct=%v returned %d bytes of %d; the rest came with another pread",
				k, f.Name(), r.N, r.Off, r.Direct, first, len(want)))
		} else if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			bad = append(bad, fmt.Sprintf("read %d: pread(%s, %d, %d) direct=%v: %d bytes, want %d; first difference at +%d",
				k, f.Name(), r.N, r.Off, r.Direct, len(got), len(want), i))
			if len(bad) == 20 {
				break
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d reads differ from the source:\n%s", len(bad), len(p.Reads), strings.Join(bad, "\n"))
	}
	fmt.Println("ok", len(p.Reads))
	return nil
}

// preadFull reads until p is full or the file ends, and returns what the
// first pread returned too: a short reply makes a read through the page
// cache take the file as ending there (so a truncated read shows as fewer
// bytes than the file holds) and a direct read return less than asked for
// (which an engine's single pread takes as a truncated file too).
func preadFull(f *os.File, p []byte, off int64) (got []byte, first int, err error) {
	n := 0
	for i := 0; n < len(p); i++ {
		k, err := syscall.Pread(int(f.Fd()), p[n:], off+int64(n))
		if err == syscall.EINTR {
			i--
			continue
		}
		if err != nil {
			return p[:n], first, err
		}
		if i == 0 {
			first = k
		}
		if k == 0 {
			break
		}
		n += k
	}
	return p[:n], first, nil
}

// runReadPlan writes p to a file and runs the readcheck client on it, in
// its own process; it returns the client's error and output.
func runReadPlan(t testing.TB, p readPlan) (string, error) {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := client("readcheck", path).CombinedOutput()
	return string(out), err
}

// TestReadAcrossUnalignedPacks is issue 7's reproducer: file A (200,000
// random bytes) becomes a pack of its own; file B is A's first 196,608
// bytes and 59,392 new ones, so its last chunk lies in another pack at an
// offset that is not page-aligned. After a remount, pread(256000) of B
// returned 254,656 bytes: the reply was spliced into a pipe that could not
// hold all its buffers, and the short reply was taken as end of file.
func TestReadAcrossUnalignedPacks(t *testing.T) {
	m := newMount(t)
	p := unalignedPacks(t, m)
	remount(t, m)
	if out, err := runReadPlan(t, p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// stat agrees, and cmp (whole-file reads) too.
	sh(t, fmt.Sprintf("test $(stat -c %%s %s) = 256000 && cmp %s %s", p.Files[0].Mounted, p.Files[0].Local, p.Files[0].Mounted))
}

// unalignedPacks stores the reproducer's files A and B in m and returns a
// plan of 256,000-byte reads of B at offsets around its chunk and pack
// boundaries, and of A, through the page cache and directly.
func unalignedPacks(t testing.TB, m *mount) readPlan {
	t.Helper()
	dir := t.TempDir()
	a := randFile(t, filepath.Join(dir, "A"), 200_000, 71)
	b := append(append([]byte(nil), a[:196_608]...), randBytes(59_392, 72)...)
	if err := os.WriteFile(filepath.Join(dir, "B"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, fmt.Sprintf("cp %s/A %s && cp %s/B %s", dir, m.path("A"), dir, m.path("B")))
	p := readPlan{Files: []planFile{{m.path("B"), filepath.Join(dir, "B")}, {m.path("A"), filepath.Join(dir, "A")}}}
	for _, direct := range []bool{false, true} {
		for _, off := range []int64{0, 1, 4095, 4096, 65536, 196_607, 196_608, 200_000, 255_999} {
			p.Reads = append(p.Reads, planRead{File: 0, Off: off, N: 256_000, Direct: direct})
		}
		p.Reads = append(p.Reads, planRead{File: 1, Off: 0, N: 256_000, Direct: direct})
	}
	return p
}

// TestReadProperty: files built from shared and new chunks (so that
// chunks lie at unaligned offsets across many packs, with zero runs in
// between) are read through the mount at random offsets and sizes, from
// a separate process, and compared with their sources. With splicing (at
// the pipe limit kvfs mount sets), with --verify (copied and checked), and
// with 4 KiB chunks (hundreds of segments per request).
func TestReadProperty(t *testing.T) {
	for _, c := range []struct {
		name       string
		init, args []string
	}{
		{"splice", nil, nil},
		{"verify", nil, []string{"--verify"}},
		{"4KiB-chunks", []string{"--chunk-size", "4KiB"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--metrics", freeAddr(t)}, c.args...)
			m := newMountInit(t, c.init, args...)
			if lim := daemonPipeMax(t, m); lim < 2<<20 {
				t.Fatalf("the daemon splices within %d-byte pipes; kvfs mount should have raised the limit to 2 MiB", lim)
			}
			readProperty(t, m, testutil.StressDuration(t, 30*time.Second), args...)
		})
	}
}

// TestReadAtDefaultPipeLimit: the same reads with fs.pipe-max-size at the
// kernel's default, 1 MiB (kvfs mount told not to raise it): go-fuse's
// pipes are then as small as they get, full 1 MiB replies are copied and
// smaller ones spliced only where their buffers fit.
func TestReadAtDefaultPipeLimit(t *testing.T) {
	requireRoot(t)
	const limitFile, def = "/proc/sys/fs/pipe-max-size", 1 << 20
	orig, err := os.ReadFile(limitFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(limitFile, orig, 0o644); err != nil {
			t.Errorf("restore %s: %v", limitFile, err)
		}
	})
	args := []string{"--keep-pipe-limit", "--metrics", freeAddr(t)}
	m := newMount(t, args...)
	// Other kvfs daemons starting meanwhile raise the limit again; the
	// one that counts is what this daemon read when it started.
	for try := 0; daemonPipeMax(t, m) != def; try++ {
		if try == 5 {
			t.Fatalf("the daemon did not start with fs.pipe-max-size at %d:\n%s", def, daemonLog(m))
		}
		if err := os.WriteFile(limitFile, []byte(fmt.Sprint(def)), 0o644); err != nil {
			t.Fatal(err)
		}
		remount(t, m, args...)
	}
	p := unalignedPacks(t, m)
	if out, err := runReadPlan(t, p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	readProperty(t, m, testutil.StressDuration(t, 30*time.Second), args...)
}

// freeAddr is a local TCP address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metric reads a counter from the daemon's Prometheus endpoint at addr.
func metric(t testing.TB, addr, name string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var n float64 // client_golang writes 1048576 as 1.048576e+06
			fmt.Sscan(v, &n)
			return int64(n)
		}
	}
	t.Fatalf("no metric %s:\n%s", name, b)
	return 0
}

// daemonPipeMax is the pipe size limit m's daemon splices within, from the
// last "mounted" line of its log.
func daemonPipeMax(t testing.TB, m *mount) int {
	t.Helper()
	lines := strings.Split(daemonLog(m), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, v, ok := strings.Cut(lines[i], " pipe_max_size="); ok && strings.Contains(lines[i], "msg=mounted") {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("no mounted line with pipe_max_size in the daemon log:\n%s", daemonLog(m))
	return 0
}

// readProperty writes files into m round after round for d, each round
// reading all files so far at random offsets and sizes from a readcheck
// process. Halfway it remounts m (with args, which must serve --metrics),
// so that reads start again from cold packs and descriptors. At the end
// (since the remount) the daemon must have spliced some replies and copied
// others, or with --verify spliced none.
func readProperty(t *testing.T, m *mount, d time.Duration, args ...string) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	g := &fileGen{t: t, r: r, dir: t.TempDir(), chunk: 64 << 10}
	start := time.Now()
	rounds, reads, remounted := 0, 0, false
	for rounds < 2 || time.Since(start) < d {
		var cmds []string
		for k := 0; k < 2+r.IntN(3); k++ {
			name := g.next()
			cmds = append(cmds, fmt.Sprintf("cp %s %s", filepath.Join(g.dir, name), m.path(name)))
		}
		sh(t, strings.Join(cmds, " && "))
		if !remounted && time.Since(start) > d/2 {
			remount(t, m, args...)
			remounted = true
		}
		p := g.plan(m, 150)
		if out, err := runReadPlan(t, p); err != nil {
			t.Fatalf("round %d (seed %d): %v\n%s", rounds, seed, err, out)
		}
		rounds++
		reads += len(p.Reads)
	}
	if log := daemonLog(m); strings.Contains(log, "trySplice") {
		t.Errorf("go-fuse could not splice a reply kvfs handed it:\n%s", log)
	}
	addr := args[slices.Index(args, "--metrics")+1]
	requests, spliced := metric(t, addr, "kvfs_read_requests_total"), metric(t, addr, "kvfs_spliced_reads_total")
	t.Logf("%d rounds, %d files, %d reads; the daemon answered %d requests since the remount, %d spliced", rounds, len(g.files), reads, requests, spliced)
	if slices.Contains(args, "--verify") {
		if spliced != 0 {
			t.Errorf("%d replies spliced with --verify: their bytes were not checked", spliced)
		}
	} else if simulatingDarwin() {
		if spliced != 0 {
			t.Errorf("%d replies spliced simulating macOS, which has no splice", spliced)
		}
	} else if spliced == 0 || spliced == requests {
		t.Errorf("of %d requests %d were spliced: the test should exercise both paths", requests, spliced)
	}
}

// fileGen makes files whose chunks are shared with earlier ones in every
// way the store can share them.
type fileGen struct {
	t     *testing.T
	r     *rand.Rand
	dir   string
	chunk int
	files []genFile
}

type genFile struct {
	name   string
	size   int
	tokens []uint32 // snapshots: their tokens
}

// next writes a new file into g.dir and returns its name: random bytes of
// an odd size; an earlier file's prefix (cut anywhere) and new bytes; new
// chunks around an earlier file's middle chunks at the same chunk
// positions; a sparse file; or a whole-layout snapshot that extends an
// earlier one (row-wise shared chunks, zero runs between tensors).
func (g *fileGen) next() string {
	r := g.r
	name := fmt.Sprintf("f%03d", len(g.files))
	var b []byte
	var tokens []uint32
	var base []byte
	if len(g.files) > 0 {
		if bf := g.files[r.IntN(len(g.files))]; bf.tokens == nil {
			base = g.read(bf.name)
		}
	}
	switch kind := r.IntN(5); {
	case kind == 0 || base == nil && kind < 3:
		b = randBytes(1+r.IntN(3<<20), r.Uint64())
	case kind == 1:
		cut := r.IntN(len(base) + 1)
		if r.IntN(2) == 0 {
			cut -= cut % g.chunk // whole chunks, then new ones
		}
		b = append(append([]byte(nil), base[:cut]...), randBytes(1+r.IntN(1<<20), r.Uint64())...)
	case kind == 2:
		b = randBytes(len(base)+r.IntN(200_000), r.Uint64())
		lo := r.IntN(len(base)/g.chunk + 1)
		hi := lo + r.IntN(4)
		copy(b[lo*g.chunk:min(hi*g.chunk, len(base))], base[min(lo*g.chunk, len(base)):min(hi*g.chunk, len(base))])
	case kind == 3:
		b = make([]byte, 1+r.IntN(2<<20))
		for k := 0; k < 3; k++ {
			off := r.IntN(len(b))
			copy(b[off:], randBytes(1+r.IntN(100_000), r.Uint64()))
		}
	default:
		var prev []uint32
		for _, f := range g.files {
			if f.tokens != nil && r.IntN(2) == 0 {
				prev = f.tokens
			}
		}
		tokens = snapgen.Extend(prev, 1+r.IntN(300), r.Uint64())
		name += ".mlxkv"
		if err := snapgen.Tiny.WriteFile(filepath.Join(g.dir, name), tokens); err != nil {
			g.t.Fatal(err)
		}
		b = g.read(name)
	}
	if tokens == nil {
		if err := os.WriteFile(filepath.Join(g.dir, name), b, 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	g.files = append(g.files, genFile{name: name, size: len(b), tokens: tokens})
	return name
}

func (g *fileGen) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		g.t.Fatal(err)
	}
	return b
}

// plan draws n reads over every file so far: single bytes, reads across a
// page boundary, whole files, reads of 1 MiB and more, reads just under
// the pipe sizes' powers of two, and anything else, at any offset
// (past the end too), through the page cache or directly.
func (g *fileGen) plan(m *mount, n int) readPlan {
	r := g.r
	var p readPlan
	for _, f := range g.files {
		p.Files = append(p.Files, planFile{Mounted: m.path(f.name), Local: filepath.Join(g.dir, f.name)})
	}
	for range n {
		i := r.IntN(len(g.files))
		size := g.files[i].size
		rd := planRead{File: i, Off: r.Int64N(int64(size) + 1), Direct: r.IntN(2) == 0}
		switch r.IntN(7) {
		case 0:
			rd.N = 1
		case 1:
			rd.Off = max(0, rd.Off-rd.Off%4096-int64(1+r.IntN(100)))
			rd.N = 2 + r.IntN(200)
		case 2:
			rd.Off, rd.N = 0, size+r.IntN(2)
		case 3:
			rd.N = 1<<20 + r.IntN(1<<20)
		case 4:
			rd.N = (64<<10)<<r.IntN(5) - 16 - 4096 - r.IntN(3*4096)
		case 5:
			rd.Off = int64(size) + int64(r.IntN(3))
			rd.N = 1 + r.IntN(10_000)
		default:
			rd.N = 1 + r.IntN(300_000)
		}
		p.Reads = append(p.Reads, rd)
	}
	return p
}

// randBytes returns n random bytes drawn from seed.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
	return b
}

// remount unmounts m, waits for the daemon to exit (dropping the kernel's
// page cache of the mount with it) and mounts it again with args.
func remount(t testing.TB, m *mount, args ...string) {
	t.Helper()
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	m.start(t, args...)
}

// daemonLog is the daemon's log so far, for failure messages.
func daemonLog(m *mount) string {
	b, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	return strings.TrimSpace(string(b))
}

// TestManyPacksBoundedFds: a store of more packs than the daemon may keep
// open (packs of 64 KiB, so that each file spans packs), read by several
// processes at once. Every byte must be right, and the daemon's pack
// descriptors, counted in /proc/PID/fd, must stay near the cap: at most the
// cap idle plus those of the replies in flight, and at most the cap once
// the readers are done.
func TestManyPacksBoundedFds(t *testing.T) {
	const files, maxOpen, readers = 200, 16, 6
	// Replies in flight hold their packs' descriptors beyond the cap: the
	// kernel sends at most a few dozen read requests at once.
	const inFlight = 48
	args := []string{"--max-open-packs", fmt.Sprint(maxOpen), "--pack-bytes", "65536"}
	m := newMount(t, args...)
	src := t.TempDir()
	r := rand.New(rand.NewPCG(8, 9))
	var p readPlan
	for i := 0; i < files; i++ {
		name := fmt.Sprintf("p%03d", i)
		size := 20_000 + r.IntN(200_000)
		if err := os.WriteFile(filepath.Join(src, name), randBytes(size, uint64(1000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		p.Files = append(p.Files, planFile{Mounted: m.path(name), Local: filepath.Join(src, name)})
		p.Reads = append(p.Reads, planRead{File: i, N: size + 1})
	}
	sh(t, fmt.Sprintf("cp %s/* %s", src, m.mnt))
	remount(t, m, args...)
	if n := len(packFiles(t, m)); n < files {
		t.Fatalf("the store has %d packs; the test needs at least one per file (%d)", n, files)
	}
	pid := daemonPID(t, m)
	stop := make(chan struct{})
	peak := make(chan int)
	go func() {
		most := 0
		for {
			most = max(most, packFds(t, pid, m))
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	errs := make(chan error, readers)
	for k := 0; k < readers; k++ {
		plan := p
		plan.Reads = append([]planRead(nil), p.Reads...)
		r.Shuffle(len(plan.Reads), func(i, j int) { plan.Reads[i], plan.Reads[j] = plan.Reads[j], plan.Reads[i] })
		for i := range plan.Reads {
			plan.Reads[i].Direct = k%2 == 1
		}
		go func() {
			out, err := runReadPlan(t, plan)
			if err != nil {
				err = fmt.Errorf("%v\n%s", err, out)
			}
			errs <- err
		}()
	}
	for k := 0; k < readers; k++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	most := <-peak
	after := packFds(t, pid, m)
	t.Logf("%d packs, cap %d: at most %d pack descriptors open while %d processes read, %d after", files, maxOpen, most, readers, after)
	if most > maxOpen+inFlight {
		t.Errorf("the daemon had %d pack descriptors open; cap %d, plus at most %d in flight", most, maxOpen, inFlight)
	}
	if after > maxOpen {
		t.Errorf("the daemon keeps %d pack descriptors open when no one reads; cap %d", after, maxOpen)
	}
}

// packFiles lists the store's pack files.
func packFiles(t testing.TB, m *mount) []string {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(m.store, "packs", "*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	return packs
}

// packFds counts the descriptors of process pid that are open on m's pack
// files.
func packFds(t testing.TB, pid int, m *mount) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("list the daemon's descriptors: %v", err)
		return 0
	}
	prefix := filepath.Join(m.store, "packs") + "/"
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
