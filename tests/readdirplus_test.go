//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// Listings through the mount: the kernel lists a FUSE directory with
// READDIRPLUS, each entry with its inode and attributes, which the daemon
// answers from one store read per listing (fs/dirhandle.go).

func init() {
	clients["rdp-make"] = rdpMakeClient
	clients["rdp-list"] = rdpListClient
	clients["rdp-churn"] = rdpChurnClient
	clients["rdp-write"] = rdpWriteClient
}

// rdpEntry is what rdpNames makes under a name.
type rdpEntry struct {
	name string
	dir  bool
	mode uint32 // permission and set-id bits
	size int
}

// rdpNames are n entries of arbitrary names: a quarter 64-character hex
// names (blocks/<sha256>), a quarter names of arbitrary bytes (all but
// NUL and '/', invalid UTF-8, spaces, newlines), some of 255 bytes, and a
// quarter directories; with assorted modes, set-id and sticky bits.
func rdpNames(n int) []rdpEntry {
	fileModes := []uint32{0o600, 0o644, 0o755, 0o444, 0o4755, 0o2750, 0o000}
	dirModes := []uint32{0o750, 0o1777, 0o700, 0o2755}
	out := make([]rdpEntry, n)
	for i := range out {
		e := &out[i]
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		switch i % 4 {
		case 0:
			e.name = hex.EncodeToString(sum[:])
		case 1:
			b := []byte{0xff, 0xfe, ' ', '\n', byte(1 + i%255), '\\', '*'}
			b = append(b, sum[:8]...)
			for j, c := range b {
				if c == 0 || c == '/' {
					b[j] = 'x'
				}
			}
			e.name = string(b) + strconv.Itoa(i)
		case 2:
			e.name = fmt.Sprintf("long-%d-", i)
			e.name += strings.Repeat("é", (255-len(e.name))/2)
		case 3:
			e.name, e.dir = fmt.Sprintf("dir %d", i), true
		}
		if e.dir {
			e.mode = dirModes[i%len(dirModes)]
		} else {
			e.mode, e.size = fileModes[i%len(fileModes)], i%300
		}
	}
	return out
}

// rdpMakeClient, client rdp-make DIR N: makes rdpNames(N) in DIR.
func rdpMakeClient(args []string) error {
	dir := args[0]
	for _, e := range rdpNames(wbAtoi(args[1])) {
		p := filepath.Join(dir, e.name)
		if e.dir {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		} else if err := os.WriteFile(p, bytes.Repeat([]byte{'k'}, e.size), 0o600); err != nil {
			return err
		}
		if err := os.Chmod(p, os.FileMode(e.mode&0o777)|goSetBits(e.mode)); err != nil {
			return err
		}
	}
	return nil
}

// goSetBits converts set-id and sticky bits to a Go file mode.
func goSetBits(m uint32) os.FileMode {
	var g os.FileMode
	if m&syscall.S_ISUID != 0 {
		g |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		g |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		g |= os.ModeSticky
	}
	return g
}

// rdpListed is one entry of a listing, as rdp-list prints it: what
// getdents(2) said and what lstat(2) of the name says after the listing.
type rdpListed struct {
	Name    []byte // the name's bytes (JSON base64)
	Batch   int    // which getdents call returned it, from 0
	DIno    uint64
	DType   uint8
	Ino     uint64
	Mode    uint32
	Size    int64
	Err     string // lstat's error
	Content string // a regular file's content, if asked for
}

// rdpListClient, client rdp-list DIR [pause] [content]: lists DIR with
// getdents(2) in 4 KiB calls, then lstats every name; prints one JSON
// rdpListed a line. With pause, after the first call it prints "ready"
// and waits for a line on stdin before it goes on; with content it reads
// every regular file too.
func rdpListClient(args []string) error {
	dir := args[0]
	pause, content := false, false
	for _, a := range args[1:] {
		pause = pause || a == "pause"
		content = content || a == "content"
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ents []rdpListed
	buf := make([]byte, 4096)
	for batch := 0; ; batch++ {
		n, err := syscall.Getdents(fd, buf)
		if err != nil {
			return fmt.Errorf("getdents %s: %w", dir, err)
		}
		if n == 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := binary.LittleEndian.Uint16(b[16:18])
			name := b[19:reclen]
			name = name[:bytes.IndexByte(name, 0)]
			if s := string(name); s != "." && s != ".." {
				ents = append(ents, rdpListed{Name: bytes.Clone(name), Batch: batch,
					DIno: binary.LittleEndian.Uint64(b[0:8]), DType: b[18]})
			}
			b = b[reclen:]
		}
		if pause && batch == 0 {
			wbAwaitStart()
		}
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	for _, e := range ents {
		p := filepath.Join(dir, string(e.Name))
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			e.Err = err.Error()
		} else {
			e.Ino, e.Mode, e.Size = st.Ino, st.Mode, st.Size
			if content && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				b, err := os.ReadFile(p)
				if err != nil {
					e.Err = err.Error()
				}
				e.Content = string(b)
			}
		}
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// rdpList runs rdp-list and parses its output.
func rdpList(t *testing.T, out string) []rdpListed {
	t.Helper()
	var ents []rdpListed
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" || line == "ready" {
			continue
		}
		var e rdpListed
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("rdp-list printed %q: %v", line, err)
		}
		ents = append(ents, e)
	}
	return ents
}

// TestReaddirplusListing: a listing of 2000 entries of arbitrary names,
// which the kernel does not know yet (after a remount), returns every
// name once, each with the inode number and type that lstat then gives
// and the mode and size it was made with; the daemon reads the store once
// for the whole listing (not once per entry: the kernel's READDIRPLUS asks
// for every entry's attributes), and answers no lookup for the lstats,
// which the listing's entries serve. Without the journal (no change mark),
// the daemon reads the store once per batch of entries. ls -l, find and du
// agree.
func TestReaddirplusListing(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{{"journal", nil}, {"no-journal", []string{"--no-journal"}}} {
		t.Run(c.name, func(t *testing.T) {
			const n = 2000
			addr := freeAddr(t)
			args := append([]string{"--metrics", addr}, c.args...)
			m := newMount(t, args...)
			dir := m.path("d")
			sh(t, "mkdir "+dir)
			runClientOK(t, "rdp-make", dir, strconv.Itoa(n))
			// A remount, so that the kernel knows none of the names.
			kvfs(t, "unmount", m.mnt)
			// Once the daemon let go of the store (opened as it was:
			// opened with the journal, a store needs it from then on).
			s, err := store.Open(m.store, store.Options{NoJournal: c.args != nil, LockTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			m.start(t, args...)

			before := scrape(t, addr)
			ents := rdpList(t, runClientOK(t, "rdp-list", dir))
			after := scrape(t, addr)
			// (A counter that is not there counts -1: no change.)
			grew := func(name string) int64 { return int64(counter(after, name) - counter(before, name)) }
			batches, reads := grew("kvfs_readdir_batches_total"), grew("kvfs_readdir_store_reads_total")
			looked := histogram(t, after, "kvfs_lookup_duration_seconds").GetSampleCount() -
				histogram(t, before, "kvfs_lookup_duration_seconds").GetSampleCount()
			t.Logf("%d entries: %d batches, %d store reads, %d lookups", len(ents), batches, reads, looked)

			want := map[string]rdpEntry{}
			for _, e := range rdpNames(n) {
				want[e.name] = e
			}
			seen := map[string]bool{}
			inos := map[uint64]string{}
			for _, e := range ents {
				name := string(e.Name)
				w, ok := want[name]
				switch {
				case !ok:
					t.Errorf("listed %q, which was not made", name)
					continue
				case seen[name]:
					t.Errorf("listed %q twice", name)
				case e.Err != "":
					t.Errorf("lstat %q after the listing: %s", name, e.Err)
					continue
				}
				seen[name] = true
				typ, dtype := uint32(syscall.S_IFREG), uint8(syscall.DT_REG)
				if w.dir {
					typ, dtype = syscall.S_IFDIR, syscall.DT_DIR
				}
				if e.DIno != e.Ino || e.DType != dtype {
					t.Errorf("%q: getdents says inode %d type %d, lstat inode %d (type %d wanted)", name, e.DIno, e.DType, e.Ino, dtype)
				}
				if e.Mode != typ|w.mode {
					t.Errorf("%q: mode %o, made with %o", name, e.Mode, typ|w.mode)
				}
				if !w.dir && e.Size != int64(w.size) {
					t.Errorf("%q: size %d, made with %d", name, e.Size, w.size)
				}
				if o, dup := inos[e.Ino]; dup {
					t.Errorf("%q and %q have the same inode %d", name, o, e.Ino)
				}
				inos[e.Ino] = name
			}
			if len(seen) != n {
				t.Errorf("listed %d of the %d names", len(seen), n)
			}
			if batches < n/40 {
				t.Errorf("%d batches for %d entries: the listing did not go through READDIRPLUS in 4 KiB calls", batches, n)
			}
			if c.args == nil && reads != 1 {
				t.Errorf("the listing read the store %d times, want once (the store did not change)", reads)
			}
			if reads > batches {
				t.Errorf("the listing read the store %d times in %d batches, want at most once a batch", reads, batches)
			}
			if looked > 2 {
				t.Errorf("the listing and the lstats made %d lookups: the entries' attributes did not come with the listing", looked)
			}

			// The tools agree: ls -l lists every name (and the two dots),
			// find finds every entry, du sizes every file.
			if got := strings.Count(sh(t, "ls -la --quoting-style=escape "+dir), "\n"); got != n+3 {
				t.Errorf("ls -la printed %d lines, want %d", got, n+3)
			}
			if got := sh(t, "find "+dir+" -mindepth 1 -printf x | wc -c"); strings.TrimSpace(got) != strconv.Itoa(n) {
				t.Errorf("find found %s entries, want %d", got, n)
			}
			if got := sh(t, "du -a0 "+dir+" | tr -cd '\\0' | wc -c"); strings.TrimSpace(got) != strconv.Itoa(n+1) {
				t.Errorf("du -a printed %s entries, want %d", got, n+1)
			}
		})
	}
}

// rdpChurnClient, client rdp-churn DIR N: while another process lists
// DIR, which holds f-0000 … f-(N-1), each holding its own name: renames a
// tenth of the files to new names, removes a tenth, renames a tenth over
// others, and creates new files, then prints each name it touched with
// the inode lstat gives it after all that ("-" for a name that is gone).
func rdpChurnClient(args []string) error {
	dir, n := args[0], wbAtoi(args[1])
	f := func(i int) string { return filepath.Join(dir, fmt.Sprintf("f-%04d", i)) }
	var touched []string
	for i := 0; i < n; i += 10 {
		steps := []struct{ from, to string }{
			{f(i), filepath.Join(dir, fmt.Sprintf("g-%04d", i))}, // renamed away
			{f(i + 1), ""},       // removed
			{f(i + 2), f(i + 3)}, // renamed over another
			{"", filepath.Join(dir, fmt.Sprintf("f-%04d-new", i))}, // created
		}
		for _, s := range steps {
			var err error
			switch {
			case s.to == "":
				err = os.Remove(s.from)
			case s.from == "":
				err = os.WriteFile(s.to, []byte(filepath.Base(s.to)), 0o644)
			default:
				err = os.Rename(s.from, s.to)
			}
			if err != nil {
				return err
			}
			touched = append(touched, s.from, s.to)
		}
	}
	for _, p := range touched {
		if p == "" {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			fmt.Println(filepath.Base(p), "-")
		} else {
			fmt.Println(filepath.Base(p), st.Ino)
		}
	}
	return nil
}

// TestReaddirplusChurn: names renamed, removed, renamed over and created
// by another process in the middle of a listing (after its first batch)
// never give a name a wrong inode: after the listing, every name that is
// there has the inode it had when the other process was done and holds
// its own content (a file renamed g-… holds its old name), no name that
// went is there (a listing that answered from what it read at opendir
// would bring them back, or give f-…3 the inode of the file renamed over
// it), no two names share an inode; and the batches listed after the
// changes list no name that went, and every name with its new inode.
// The names that did not change are listed once each.
func TestReaddirplusChurn(t *testing.T) {
	const n = 2000
	m := newMount(t)
	dir := m.path("d")
	sh(t, "mkdir "+dir)
	sh(t, fmt.Sprintf(`cd %s && for i in $(seq -f %%04g 0 %d); do printf f-$i > f-$i; done`, dir, n-1))
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	m.start(t)

	lister := client("rdp-list", dir, "pause", "content")
	var stderr bytes.Buffer
	lister.Stderr = &stderr
	in, err := lister.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := lister.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := lister.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(outp)
	if line, _ := out.ReadString('\n'); line != "ready\n" {
		lister.Wait()
		t.Fatalf("rdp-list: %q\n%s", line, stderr.String())
	}
	truth := map[string]string{} // name: inode after the churn, "-" if gone
	for _, line := range strings.Split(strings.TrimSpace(runClientOK(t, "rdp-churn", dir, strconv.Itoa(n))), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			truth[f[0]] = f[1]
		}
	}
	in.Write([]byte("go\n"))
	in.Close()
	rest, _ := io.ReadAll(out)
	if err := lister.Wait(); err != nil {
		t.Fatalf("rdp-list: %v\n%s", err, stderr.String())
	}
	ents := rdpList(t, string(rest))

	firstAfter := -1 // the first entry of the second batch may have been read in the first
	for i, e := range ents {
		if e.Batch > 0 {
			firstAfter = i
			break
		}
	}
	seen := map[string]int{}
	inos := map[uint64]string{}
	for i, e := range ents {
		name := string(e.Name)
		seen[name]++
		tr, touched := truth[name]
		switch {
		case touched && tr == "-":
			if e.Err == "" {
				t.Errorf("%s went, but lstat finds it after the listing (inode %d)", name, e.Ino)
			}
			if e.Batch > 0 && i != firstAfter {
				t.Errorf("%s went before batch %d, which lists it", name, e.Batch)
			}
			continue
		case e.Err != "":
			t.Errorf("lstat %s after the listing: %s", name, e.Err)
			continue
		case touched && tr != strconv.FormatUint(e.Ino, 10):
			t.Errorf("%s: lstat after the listing gives inode %d, the name had %s", name, e.Ino, tr)
		}
		if touched && e.Batch > 0 && i != firstAfter && tr != strconv.FormatUint(e.DIno, 10) {
			t.Errorf("%s: batch %d lists inode %d, the name had %s", name, e.Batch, e.DIno, tr)
		}
		want := name
		if g, ok := strings.CutPrefix(name, "g-"); ok {
			want = "f-" + g
		} else if k, err := strconv.Atoi(strings.TrimPrefix(name, "f-")); err == nil && k%10 == 3 {
			want = fmt.Sprintf("f-%04d", k-1) // renamed over
		}
		if e.Content != want {
			t.Errorf("%s holds %q, want %q", name, e.Content, want)
		}
		if o, dup := inos[e.Ino]; dup {
			t.Errorf("%s and %s have the same inode %d", name, o, e.Ino)
		}
		inos[e.Ino] = name
	}
	for i := range n {
		name := fmt.Sprintf("f-%04d", i)
		if _, touched := truth[name]; !touched && seen[name] != 1 {
			t.Errorf("%s, which did not change, was listed %d times", name, seen[name])
		}
	}
	for name, tr := range truth {
		if seen[name] > 1 {
			t.Errorf("%s was listed %d times", name, seen[name])
		}
		if tr == "-" {
			missing(t, filepath.Join(dir, name))
		}
	}
}

// rdpWriteClient, client rdp-write FILE SIZE: creates FILE, writes SIZE
// bytes, prints "ready" and waits for a line on stdin before it closes
// the file.
func rdpWriteClient(args []string) error {
	f, err := os.Create(args[0])
	if err != nil {
		return err
	}
	if _, err := f.Write(bytes.Repeat([]byte{'w'}, wbAtoi(args[1]))); err != nil {
		return err
	}
	wbAwaitStart()
	return f.Close()
}

// TestReaddirplusWrittenSize: a file being written through the mount shows
// the size of its writes in ls -l, and in stat, during the write (before
// the close commits it): the listing's entries describe a file being
// written as its writes left it, not as its last commit did (the kernel
// would take that size). After the close, the same.
func TestReaddirplusWrittenSize(t *testing.T) {
	m := newMount(t)
	dir := m.path("d")
	sh(t, fmt.Sprintf("mkdir %[1]s && for i in $(seq 100); do echo $i > %[1]s/other-$i; done", dir))
	const size = 300000
	w := client("rdp-write", filepath.Join(dir, "written"), strconv.Itoa(size))
	var stderr bytes.Buffer
	w.Stderr = &stderr
	in, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(outp).ReadString('\n'); line != "ready\n" {
		w.Wait()
		t.Fatalf("rdp-write: %q\n%s", line, stderr.String())
	}
	check := func(when string) {
		t.Helper()
		for range 3 { // each listing answers from the store again
			got := ""
			for _, line := range strings.Split(sh(t, "ls -ln "+dir), "\n") {
				if f := strings.Fields(line); len(f) == 9 && f[8] == "written" {
					got = f[4]
				}
			}
			if got != strconv.Itoa(size) {
				t.Errorf("%s: ls -l shows size %q, the writes made %d", when, got, size)
			}
			if got := strings.TrimSpace(sh(t, "stat -c %s "+filepath.Join(dir, "written"))); got != strconv.Itoa(size) {
				t.Errorf("%s: stat shows size %s, the writes made %d", when, got, size)
			}
		}
	}
	check("while written")
	in.Write([]byte("go\n"))
	in.Close()
	if err := w.Wait(); err != nil {
		t.Fatalf("rdp-write: %v\n%s", err, stderr.String())
	}
	check("after the close")
}
