//go:build linux

package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// Prefix views (/.kvfs/prefix), the leases their lookups take and the
// prefix index behind kvfs match, at their edges: readers racing in-place
// and rename rewrites, views held open through eviction and the engine's
// collect, kills of the daemon, other users' lookups, odd prompts and
// names. Found by red team 11.

// TestViewReadersInPlaceRewrite: readers in two processes read a prefix
// view whole, over and over, while a writer rewrites the original in
// place (cp over it: O_TRUNC, same inode), alternating two versions.
// Every read must be one version's view whole, as for a replace by
// rename (TestPrefixViewConcurrent); then, once the writer has stopped,
// the view must be the current version's.
func TestViewReadersInPlaceRewrite(t *testing.T) {
	m := newMount(t, strings.Fields(os.Getenv("KVFS_TEST_VIEW_MOUNT_ARGS"))...)
	const total, n = 600, 512
	dir := t.TempDir()
	var srcs []string
	for _, seed := range []uint64{1, 2} {
		src := filepath.Join(dir, fmt.Sprintf("src%d.mlxkv", seed))
		h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(total, seed))
		if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
	}
	orig := m.path("x.mlxkv")
	sh(t, "cp "+srcs[0]+" "+orig)
	refs := []string{writeRef(t, snapgen.Tiny, total, n, 1), writeRef(t, snapgen.Tiny, total, n, 2)}
	view := prefixViewPath(m, "x.mlxkv", n)
	var readers []*exec.Cmd
	outs := make([]*strings.Builder, 2)
	for i := range outs {
		outs[i] = new(strings.Builder)
		c := client("view-readloop", append([]string{view, "3"}, refs...)...)
		// While cp rewrites the original in place, it is for a moment
		// a file that is no snapshot (truncated, then partly written):
		// its view does not exist, as a disk's reader of the file
		// would read it short. Never ESTALE, never mixed bytes.
		c.Env = append(os.Environ(), "VIEW_READLOOP_ALLOW=no such file or directory")
		c.Stdout, c.Stderr = outs[i], outs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, c)
	}
	writes := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); writes++ {
		sh(t, "cp "+srcs[writes%2]+" "+orig)
	}
	for i, c := range readers {
		if err := c.Wait(); err != nil {
			t.Errorf("reader %d: %v\n%s", i, err, outs[i])
			logStale(t, m)
		}
	}
	t.Logf("%d in-place rewrites; readers: %q %q", writes, outs[0], outs[1])
	// At rest, both versions in turn: the view is the current one's.
	for i := range 4 {
		sh(t, "cp "+srcs[i%2]+" "+orig)
		if out, err := client("prefixcheck", view, refs[i%2]).CombinedOutput(); err != nil {
			t.Errorf("at rest, version %d: %v\n%s", i%2+1, err, out)
		}
	}
}

// logStale shows the daemon's log lines about stale answers.
func logStale(t *testing.T, m *mount) {
	b, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if d := os.Getenv("KVFS_TEST_KEEP_LOG"); d != "" {
		os.WriteFile(d, b, 0o644)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if (strings.Contains(l, "stale") || strings.Contains(l, "ESTALE") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) && !strings.Contains(l, "ViewReaders") {
			t.Log(l)
		}
	}
}

// TestViewLookupDoesNotPinUnreadable: a user who may not read a file, but may
// search its directory, keeps it from eviction indefinitely by looking
// up /.kvfs/prefix/<dir>/<file>@N now and then: each lookup leases the
// version (fs/lease.go) before the permission check, and the evictor
// passes over leased files. (Any file, not only snapshots: the lease is
// taken before the kind is checked.) Expected: the file the user may not
// read is evicted like the other idle files.
func TestViewLookupDoesNotPinUnreadable(t *testing.T) {
	m := newMount(t, "-o", "allow_other", "--evict-interval", "100ms")
	m.openToOthers(t)
	u := otherUser(t)
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		randFile(t, m.path(fmt.Sprintf("d/idle%d", i)), 256<<10, uint64(i))
	}
	randFile(t, m.path("d/secret"), 256<<10, 99)
	if err := os.Chmod(m.path("d/secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The other user looks the secret's view up every 200 ms, for 8 s.
	pin := u.command(exec.Command("sh", "-c", fmt.Sprintf(
		"i=1; while [ $i -le 40 ]; do stat %s@$i >/dev/null 2>&1; i=$((i+1)); sleep 0.2; done",
		m.path(".kvfs/prefix/d/secret"))))
	if err := pin.Start(); err != nil {
		t.Fatal(err)
	}
	defer pin.Wait()
	if out, _ := u.sh("cat " + m.path("d/secret") + " >/dev/null"); !strings.Contains(out, "Permission denied") {
		t.Fatalf("the other user may read the secret: %q", out)
	}
	time.Sleep(300 * time.Millisecond)
	kvfs(t, "config", m.store, "capacity=1")
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(m.path("d/secret")); err != nil {
			t.Logf("secret evicted after %v", time.Until(deadline))
			return // evicted: as it should be
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	t.Errorf("6 s past capacity, with every other idle file evicted (%d), the file the other user may not read is still there: its lookups lease it",
		strings.Count(string(log), "msg=evicted"))
	pin.Wait()
	// Control: once the lookups stop, it goes.
	deadline = time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(m.path("d/secret")); err != nil {
			t.Logf("control: evicted once the other user's lookups stopped")
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("control: not evicted even after the lookups stopped")
}

// TestPrefixIndexConsistentAfterKill: SIGKILL the daemon while a process writes
// (engine-style .tmp + rename), replaces and removes snapshots; after each
// kill, the store's prefix index must answer exactly the snapshots that
// are there: every present s*.mlxkv found under its own h(2), and no key
// of a snapshot that is gone answering.
func TestPrefixIndexConsistentAfterKill(t *testing.T) {
	m := newMount(t)
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const seeds = 100000
	for round := 0; round < 4; round++ {
		if round > 0 {
			m.start(t)
		}
		base := uint64(round+1) * seeds
		c := client("index-churn", m.path("d"), fmt.Sprint(base))
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(400+200*round) * time.Millisecond)
		syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
		c.Wait()
		exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		s := m.openStore(t)
		present := map[string]string{} // key hex -> path
		for i := 0; i < 8; i++ {
			p := fmt.Sprintf("d/s%d.mlxkv", i)
			f, err := s.Open(p)
			if err != nil {
				continue
			}
			snap, err := mlx.Parse(f, f.Size(), p)
			f.Close()
			if err != nil {
				t.Errorf("round %d: %s: %v", round, p, err)
				continue
			}
			h := snap.Header
			k := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, h.Tokens)[2]
			present[hex.EncodeToString(k[:])] = p
			r, err := s.MatchKey(k, nil)
			if err != nil || r.Path != p {
				t.Errorf("round %d: present %s: MatchKey %+v, %v", round, p, r, err)
			}
		}
		h, _ := snapgen.Tiny.Snapshot(snapgen.Tokens(600, 1))
		answered := 0
		for r := 0; r <= round; r++ {
			for seed := uint64(r+1) * seeds; seed < uint64(r+1)*seeds+3000; seed++ {
				k := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, snapgen.Tokens(600, seed))[2]
				res, err := s.MatchKey(k, nil)
				if err != nil {
					continue
				}
				answered++
				if present[hex.EncodeToString(k[:])] != res.Path {
					t.Errorf("round %d: seed %d answered by %s, which holds another snapshot", round, seed, res.Path)
				}
			}
		}
		t.Logf("round %d: %d present, %d keys answered; churn: %s", round, len(present), answered, strings.TrimSpace(out.String()))
		s.Close()
	}
	m.start(t)
}

// TestMatchRawTokensStartingWithBracket: kvfs match --tokens FILE takes
// a JSON array or raw little-endian u32; a raw file is taken for JSON when
// its first bytes, after white space, are '[': a prompt whose first token
// is 91 (0x5b), or 0x5b20/0x5b0a/... (white space, then '['). Expected:
// the raw prompt's answer (a hit); observed: a JSON syntax error.
func TestMatchRawTokensStartingWithBracket(t *testing.T) {
	m := newMount(t)
	prompt := snapgen.Tokens(800, 1)
	prompt[0] = 91
	h, tensors := snapgen.Tiny.Snapshot(prompt[:600])
	if _, _, err := (&mlx.Writer{}).Write(m.path("a.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 0, 4*len(prompt))
	for _, tk := range prompt {
		raw = binary.LittleEndian.AppendUint32(raw, tk)
	}
	tokFile := filepath.Join(t.TempDir(), "prompt.u32")
	if err := os.WriteFile(tokFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kvfsBin, "match", "--model", h.ModelID, "--fingerprint", h.ConfigFingerprint, "--tokens", tokFile, m.store).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"hit":true`) {
		t.Errorf("kvfs match with a raw u32 prompt whose first token is 91: %v\n%s", err, out)
	}
}

// TestPrefixViewBlocksHeld: as TestWholeViewHoldsSnapshot for
// /.kvfs/whole: a blocks-layout snapshot whose prefix view is open is not
// evicted, nor are its blocks, however far past capacity the store is;
// the open view reads back what it read before.
func TestPrefixViewBlocksHeld(t *testing.T) {
	m := newMount(t, "--blob-grace", "1ms", "--evict-interval", "100ms")
	const fx = "../mlx/testdata/mlxbun"
	const name = "00000000-0000-4000-8000-000000000400.mlxkv"
	sh(t, "mkdir -p "+m.path("fp")+" && cp -r "+fx+"/blocks/fixture-fingerprint/base "+m.path("fp/"))
	for i := 0; i < 8; i++ {
		randFile(t, m.path(fmt.Sprintf("idle%d", i)), 256<<10, uint64(i))
	}
	viewPath := m.path(".kvfs/prefix/fp/base/" + name + "@300")
	want, err := os.ReadFile(viewPath)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	view, err := os.Open(viewPath)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	head := make([]byte, 4096)
	if _, err := view.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	sh(t, "sync; echo 3 > /proc/sys/vm/drop_caches")
	kvfs(t, "config", m.store, "capacity=1")
	waitEvictions(t, m, 8)
	time.Sleep(500 * time.Millisecond)
	got := make([]byte, len(want))
	copy(got, head)
	if n, err := view.ReadAt(got[4096:], 4096); n != len(want)-4096 {
		log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		t.Fatalf("prefix view read while held, past capacity: %d of %d bytes, %v\n%s", n, len(want)-4096, err, log)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the held prefix view reads other bytes than before")
	}
}

// TestOpenViewAfterEngineCollect: a reader holds a view open of a
// blocks-layout snapshot; the engine writes a new version over it and
// collects the blocks no manifest lists any more (rm). The reader's next
// reads of its open view, for /.kvfs/whole and /.kvfs/prefix alike: an
// open file on a disk would go on reading the version it opened.
func TestOpenViewAfterEngineCollect(t *testing.T) {
	m := newMount(t)
	if err := os.Mkdir(m.path("e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tree := range []string{"whole", "prefix"} {
		t.Run(tree, func(t *testing.T) {
			rel := "e/" + tree + ".mlxkv"
			runClientOK(t, "prefixwrite", "tiny", "blocks", m.path(rel), "600", "1")
			viewPath := m.path(".kvfs/whole/" + rel)
			if tree == "prefix" {
				viewPath = prefixViewPath(m, rel, 512)
			}
			want, err := os.ReadFile(viewPath)
			if err != nil {
				t.Fatal(err)
			}
			view, err := os.Open(viewPath)
			if err != nil {
				t.Fatal(err)
			}
			defer view.Close()
			head := make([]byte, 4096)
			if _, err := view.ReadAt(head, 0); err != nil {
				t.Fatal(err)
			}
			runClientOK(t, "prefixwrite", "tiny", "blocks", m.path(rel), "600", "2")
			// The engine's collect: blocks no manifest in e/ lists.
			listed := map[string]bool{}
			ents, _ := os.ReadDir(m.path("e"))
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".mlxkv") {
					s, err := mlx.ReadFile(m.path("e/" + e.Name()))
					if err != nil {
						t.Fatal(err)
					}
					for _, sl := range s.Header.Slots() {
						for _, b := range sl.Blocks {
							listed[b.Hash] = true
						}
					}
				}
			}
			blocks, _ := os.ReadDir(m.path("e/blocks"))
			removed := 0
			for _, b := range blocks {
				if !listed[b.Name()] {
					os.Remove(m.path("e/blocks/" + b.Name()))
					removed++
				}
			}
			sh(t, "sync; echo 3 > /proc/sys/vm/drop_caches")
			got := make([]byte, len(want))
			copy(got, head)
			n, err := view.ReadAt(got[4096:], 4096)
			t.Logf("%s: %d blocks collected; read of the open view: %d of %d bytes, %v", tree, removed, n, len(want)-4096, err)
			if n != len(want)-4096 || !bytes.Equal(got, want) {
				t.Errorf("%s: the open view no longer reads its version after the engine's collect: %d bytes, %v", tree, n, err)
			}
		})
	}
}

// TestMatchPathNotUTF8: a snapshot whose name is not UTF-8 (a
// Latin-1 "café") is answered by kvfs match (and POST /v1/match) with a
// path that names no file: JSON strings replace the byte with U+FFFD.
// The /.kvfs/match link carries the bytes. Expected: a path the caller
// can open (the control protocol carries other names as bytes: wireInfo).
func TestMatchPathNotUTF8(t *testing.T) {
	m := newMount(t)
	prompt := snapgen.Tokens(800, 1)
	h, tensors := snapgen.Tiny.Snapshot(prompt[:600])
	name := "caf\xe9.mlxkv"
	if _, _, err := (&mlx.Writer{}).Write(m.path(name), h, tensors); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "prompt.json")
	b, _ := json.Marshal(prompt)
	if err := os.WriteFile(tokFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, prompt)
	if got, err := os.Readlink(m.path(".kvfs/match/" + hex.EncodeToString(keys[2][:]))); err != nil || got != "../../"+name {
		t.Errorf("link: %q, %v", got, err)
	}
	var viaSocket struct {
		matchAnswer
		PathBytes []byte `json:"pathBytes"` // the path, if it is not UTF-8
	}
	if err := json.Unmarshal([]byte(kvfs(t, "match", "--model", h.ModelID, "--fingerprint", h.ConfigFingerprint, "--tokens", tokFile, m.store)), &viaSocket); err != nil {
		t.Fatal(err)
	}
	if viaSocket.PathBytes == nil {
		t.Errorf("kvfs match answers path %q without pathBytes", viaSocket.Path)
	}
	if _, err := os.Stat(m.path(string(viaSocket.PathBytes))); err != nil {
		t.Errorf("kvfs match answers pathBytes %q: %v", viaSocket.PathBytes, err)
	}
	viaMount := viaSocket
	viaMount.PathBytes = nil
	if err := json.Unmarshal([]byte(kvfs(t, "match", "--model", h.ModelID, "--fingerprint", h.ConfigFingerprint, "--tokens", tokFile, "--mount", m.mnt)), &viaMount); err != nil {
		t.Fatal(err)
	}
	if string(viaMount.PathBytes) != name {
		t.Errorf("kvfs match --mount answers pathBytes %q, want %q", viaMount.PathBytes, name)
	}
}

// TestViewUnalignedPread: random unaligned preads of a view of either layout
// (Llama-shaped, 1,500 tokens cut to 1,100), across chunk and block
// boundaries and past the end, equal the engine's own file's bytes.
func TestViewUnalignedPread(t *testing.T) {
	m := newMount(t)
	const total, n = 1500, 1100
	ref := writeRef(t, llama4, total, n, 5)
	for _, layout := range []string{"whole", "blocks"} {
		if err := os.Mkdir(m.path("l"+layout), 0o755); err != nil {
			t.Fatal(err)
		}
		rel := "l" + layout + "/s.mlxkv"
		runClientOK(t, "prefixwrite", "llama4", layout, m.path(rel), fmt.Sprint(total), "5")
		runClientOK(t, "view-pread", prefixViewPath(m, rel, n), ref, "300")
	}
}

// TestViewLeaseThenKill: a view's lookup leases the original; it is
// removed within the lease and the daemon is killed (SIGKILL) before the
// lease ends. After a restart, the orphan must be gone and its space
// freed (the store's open releases orphans), and the index must not
// answer it.
func TestViewLeaseThenKill(t *testing.T) {
	m := newMount(t)
	prompt := snapgen.Tokens(800, 1)
	h, tensors := snapgen.Tiny.Snapshot(prompt[:600])
	if _, _, err := (&mlx.Writer{}).Write(m.path("a.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(prefixViewPath(m, "a.mlxkv", 512)); err != nil {
		t.Fatal(err)
	}
	sh(t, "rm "+m.path("a.mlxkv"))
	st := storeStats(t, m)
	t.Logf("within the lease: orphans %d, stored bytes %d", st.Orphans, st.StoredBytes)
	syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)
	exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
	m.start(t)
	st = storeStats(t, m)
	t.Logf("after restart: orphans %d, files %d, stored bytes %d", st.Orphans, st.Files, st.StoredBytes)
	if st.Orphans != 0 || st.Files != 0 {
		t.Errorf("after restart: %d orphans, %d files, want none", st.Orphans, st.Files)
	}
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, prompt)
	if _, err := os.Readlink(m.path(".kvfs/match/" + hex.EncodeToString(keys[2][:]))); err == nil {
		t.Errorf("the removed snapshot is still answered after restart")
	}
}

// TestViewLookupLogRateLimited: every refused view name is logged at info
// level ("no prefix view"), before the name is even looked up, with no
// rate limit; misses are not cached by the kernel. An ordinary user can
// grow the daemon's log without bound (stat of names that exist nowhere).
// Logged: bytes of log per 5,000 stats.
func TestViewLookupLogRateLimited(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	logPath := filepath.Join(m.store, "kvfs.log")
	before := fileSize(t, logPath)
	start := time.Now()
	u.sh(fmt.Sprintf("cd %s && i=0; while [ $i -lt 5000 ]; do stat -- \"no-such-$i@x\" >/dev/null 2>&1; i=$((i+1)); done", m.path(".kvfs/prefix")))
	grown := fileSize(t, logPath) - before
	t.Logf("5,000 stats of bogus view names by %s in %v: the daemon's log grew by %d bytes", u.name, time.Since(start), grown)
	if grown > 64<<10 {
		t.Errorf("an ordinary user grew the daemon's log by %d bytes with 5,000 stats of names that do not exist", grown)
	}
}

// TestViewReadersRenameRace: TestPrefixViewConcurrent's case (the engine's
// .tmp + rename over the original, in a loop) with a writer in one
// process that never pauses, and readers that go on after a failure and
// count: no open may fail (ESTALE) and no read may be mixed.
func TestViewReadersRenameRace(t *testing.T) {
	m := newMount(t)
	const total, n = 600, 512
	// "original": the control, readers of the original's own name (the
	// whole files): no mixed bytes.
	// "wholeview": /.kvfs/whole of a blocks-layout original, which has
	// the same lease and walks.
	for _, layout := range []string{"whole", "blocks", "original", "wholeview"} {
		t.Run(layout, func(t *testing.T) {
			if err := os.Mkdir(m.path("r"+layout), 0o755); err != nil {
				t.Fatal(err)
			}
			rel := "r" + layout + "/x.mlxkv"
			wl := layout
			switch layout {
			case "original":
				wl = "whole"
			case "wholeview":
				wl = "blocks"
			}
			runClientOK(t, "prefixwrite", "tiny", wl, m.path(rel), fmt.Sprint(total), "1")
			refs := []string{writeRef(t, snapgen.Tiny, total, n, 1), writeRef(t, snapgen.Tiny, total, n, 2)}
			target := prefixViewPath(m, rel, n)
			if layout == "original" {
				refs = []string{writeRef(t, snapgen.Tiny, total, total, 1), writeRef(t, snapgen.Tiny, total, total, 2)}
				target = m.path(rel)
			}
			if layout == "wholeview" {
				refs = []string{writeRef(t, snapgen.Tiny, total, total, 1), writeRef(t, snapgen.Tiny, total, total, 2)}
				target = m.path(".kvfs/whole/" + rel)
			}
			var readers []*exec.Cmd
			outs := make([]*strings.Builder, 2)
			for i := range outs {
				outs[i] = new(strings.Builder)
				c := client("view-readloop", append([]string{target, "4"}, refs...)...)
				if layout == "original" {
					// The known gap of docs/READPATH.md: a file's own
					// name replaced twice between the kernel's lookup
					// and open, on one thread, answers ESTALE.
					c.Env = append(os.Environ(), "VIEW_READLOOP_ALLOW=stale file handle")
				}
				c.Stdout, c.Stderr = outs[i], outs[i]
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				readers = append(readers, c)
			}
			w := runClientOK(t, "view-rewrite", wl, m.path(rel), "4")
			for i, c := range readers {
				if err := c.Wait(); err != nil {
					t.Errorf("reader %d: %v\n%s", i, err, outs[i])
					logStale(t, m)
				}
			}
			t.Logf("%s writes; readers: %q %q", strings.TrimSpace(w), outs[0], outs[1])
		})
	}
}

// TestRenamedIntoPlaceIsIndexed (fixed: fs/reclassify.go): a snapshot copied into the mount
// under a temporary name other than .mlxkv.tmp and then renamed to its
// .mlxkv name (cp then mv; rsync's .name.XXXXXX; any "write then rename"
// tool but the engine) is a snapshot by name and content, yet it is never
// found by chain key, and its prefix view does not exist: it was
// classified when committed under the temporary name, and the rename
// changes nothing. Expected: found and viewable like one written as .mlxkv.
func TestRenamedIntoPlaceIsIndexed(t *testing.T) {
	m := newMount(t)
	const total, n = 600, 512
	tokens := snapgen.Tokens(total, 1)
	src := filepath.Join(t.TempDir(), "src.mlxkv")
	h, tensors := snapgen.Tiny.Snapshot(tokens)
	if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
		t.Fatal(err)
	}
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, tokens)
	link := m.path(".kvfs/match/" + hex.EncodeToString(keys[2][:]))
	// Control: copied under its own name, it is found.
	sh(t, "cp "+src+" "+m.path("direct.mlxkv"))
	if got, err := os.Readlink(link); err != nil || got != "../../direct.mlxkv" {
		t.Fatalf("control: %s -> %q, %v", link, got, err)
	}
	sh(t, "rm "+m.path("direct.mlxkv"))
	sh(t, "cp "+src+" "+m.path(".a.mlxkv.Xy12Zq")+" && mv "+m.path(".a.mlxkv.Xy12Zq")+" "+m.path("a.mlxkv"))
	if got, err := os.Readlink(link); err != nil {
		t.Errorf("renamed into place: %s: %v, want ../../a.mlxkv", link, err)
	} else if got != "../../a.mlxkv" {
		t.Errorf("renamed into place: %s -> %q", link, got)
	}
	if _, err := os.Stat(prefixViewPath(m, "a.mlxkv", n)); err != nil {
		t.Errorf("renamed into place: view: %v", err)
	}
	kind := make([]byte, 64)
	if n, err := syscall.Getxattr(m.path("a.mlxkv"), "user.kvfs.kind", kind); err != nil || string(kind[:max(n, 0)]) != "mlxkv" {
		t.Errorf("user.kvfs.kind of a.mlxkv: %q, %v; want mlxkv", kind[:max(n, 0)], err)
	}
	// The bytes are the same, read through a handle opened before the
	// rename and through a new one; and a file that is no snapshot,
	// renamed to a snapshot's name, stays as it was.
	f, err := os.Open(m.path("a.mlxkv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sh(t, "mv "+m.path("a.mlxkv")+" "+m.path("b.tmp")+" && mv "+m.path("b.tmp")+" "+m.path("b.mlxkv"))
	want, _ := os.ReadFile(src)
	if got, err := io.ReadAll(f); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read through a handle opened before the renames: %d bytes, %v; want the %d bytes copied", len(got), err, len(want))
	}
	if got, err := os.ReadFile(m.path("b.mlxkv")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read after the renames: %d bytes, %v", len(got), err)
	}
	junk := bytes.Repeat([]byte("not a snapshot "), 10000)
	if err := os.WriteFile(m.path("junk.bin"), junk, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "mv "+m.path("junk.bin")+" "+m.path("junk.mlxkv"))
	if got, err := os.ReadFile(m.path("junk.mlxkv")); err != nil || !bytes.Equal(got, junk) {
		t.Errorf("a file that is no snapshot, renamed to a snapshot's name: %d bytes, %v", len(got), err)
	}
}
