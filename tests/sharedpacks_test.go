//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvfs/kvfs/store"
)

// smallFile is the content of the small file named name: 4–64 KiB, its own.
func smallFile(name string) []byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	seed := h.Sum64()
	return randBytes(4096+int(seed%(60<<10+1)), seed)
}

func init() {
	// smallwrite DIR PREFIX N: write N small files DIR/PREFIX-i (smallFile)
	// as a durable file is written: create, write, fsync, close. Each name
	// is printed once its fsync and close have returned; N < 0 writes until
	// an error (the daemon killed under it).
	clients["smallwrite"] = func(args []string) error {
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		for i := 0; n < 0 || i < n; i++ {
			name := fmt.Sprintf("%s-%d", args[1], i)
			f, err := os.OpenFile(filepath.Join(args[0], name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := f.Write(smallFile(name)); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Println(name)
		}
		return nil
	}
	// smallverify DIR LIST: every name in the file LIST (one a line) reads
	// back in DIR as smallFile(name).
	clients["smallverify"] = func(args []string) error {
		list, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		n := 0
		for _, name := range strings.Fields(string(list)) {
			got, err := os.ReadFile(filepath.Join(args[0], name))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, smallFile(name)) {
				return fmt.Errorf("%s reads back %d bytes that differ from the %d written", name, len(got), len(smallFile(name)))
			}
			n++
		}
		fmt.Println(n, "files verified")
		return nil
	}
}

// writeList writes names, one a line, to a new file and returns its path.
func writeList(t *testing.T, names []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "names")
	if err := os.WriteFile(p, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSmallFilesSharePacksMount is issue 9's pack confetti through the
// mount: 2,000 small files (4–64 KiB), written durably by 8 processes at
// once, leave at most stored bytes / 16 MiB + 8 packs (before, each file
// became a pack of its own: 2,000 packs), read back exactly from another
// process, and the store checks clean. The daemon's metrics and kvfs
// stats agree with the pack files on disk.
func TestSmallFilesSharePacksMount(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	const writers, each = 8, 250
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for w := 0; w < writers; w++ {
		cmd := client("smallwrite", m.mnt, fmt.Sprint("w", w), fmt.Sprint(each))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	var names []string
	for w, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v\n%s", w, err, outs[w])
		}
		names = append(names, strings.Fields(outs[w].String())...)
	}
	if len(names) != writers*each {
		t.Fatalf("%d files written, want %d", len(names), writers*each)
	}
	runClientOK(t, "smallverify", m.mnt, writeList(t, names))

	mf := scrape(t, addr)
	packFilesMounted := len(packFiles(t, m))
	if g := gauge(mf, "kvfs_store_packs"); g != float64(packFilesMounted) {
		t.Errorf("kvfs_store_packs is %g, %d pack files on disk", g, packFilesMounted)
	}
	if c := counter(mf, "kvfs_adopted_spools_total"); c != 0 {
		t.Errorf("%g small spools adopted as packs of their own", c)
	}

	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	var st store.Stats
	if err := json.Unmarshal([]byte(kvfs(t, "stats", "--json", m.store)), &st); err != nil {
		t.Fatal(err)
	}
	bound := st.StoredBytes/(16<<20) + 8
	t.Logf("%d files, %d stored bytes: %d packs (bound %d), %d bytes committed, %d dead", st.Files, st.StoredBytes, st.Packs, bound, st.PackBytes, st.DeadBytes)
	if st.Files != writers*each || st.Packs != int64(len(packFiles(t, m))) || st.PackBytes != st.StoredBytes+st.DeadBytes {
		t.Errorf("kvfs stats: %+v; %d pack files on disk", st, len(packFiles(t, m)))
	}
	if st.Packs > bound {
		t.Fatalf("%d packs for %d small files of %d bytes; want at most %d", st.Packs, st.Files, st.StoredBytes, bound)
	}
	// The cleanup checks the store.
}

// gauge is the value of the unlabelled gauge name in mfs, or -1.
func gauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf, ok := mfs[name]
	if !ok || len(mf.GetMetric()) != 1 {
		return -1
	}
	return mf.GetMetric()[0].GetGauge().GetValue()
}

// TestKillDuringSharedCommits: SIGKILL the daemon while 6 processes
// commit small files into the same shared packs; after a remount every
// file whose fsync and close returned reads back exactly, and the store
// checks clean, each pack exactly its committed length.
func TestKillDuringSharedCommits(t *testing.T) {
	m := newMount(t)
	const writers = 6
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for w := 0; w < writers; w++ {
		cmd := client("smallwrite", m.mnt, fmt.Sprint("k", w), "-1")
		out := &bytes.Buffer{}
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	time.Sleep(1500 * time.Millisecond)
	syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
	var names []string
	for w, cmd := range cmds {
		if err := cmd.Wait(); err == nil {
			t.Fatalf("writer %d ended without an error while the daemon was killed", w)
		}
		// Only whole lines: a name is printed with its newline at once.
		sc := bufio.NewScanner(outs[w])
		for sc.Scan() {
			names = append(names, sc.Text())
		}
	}
	if len(names) < writers {
		t.Fatalf("only %d files committed before the kill; the test wants commits from every writer", len(names))
	}
	exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
	waitUnmounted(t, m)
	s := m.openStore(t)
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		s.Close()
		t.Fatal(err)
	}
	st, _ := s.Stats()
	s.Close()
	if bound := st.StoredBytes/(16<<20) + 8; st.Packs > bound {
		t.Errorf("%d packs after the kill for %d stored bytes; want at most %d", st.Packs, st.StoredBytes, bound)
	}
	m.start(t)
	out := runClientOK(t, "smallverify", m.mnt, writeList(t, names))
	t.Logf("%d files committed before the kill by %d writers, %d packs after: %s", len(names), writers, st.Packs, strings.TrimSpace(out))
}
