//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// TestLlamaStateThroughMount: llama.cpp state files written into the
// mount under names of the user's choosing (cp, and dd with odd-sized
// writes) are recognised by their bytes and dedup by rows (issue 29:
// 1.00× with fixed chunks), read back exact through the mount and after
// a remount, and leave a clean store.
func TestLlamaStateThroughMount(t *testing.T) {
	m := newMount(t)
	spec := llamastatetest.Spec{Layers: 4, KRow: 256, VEl: 2, VChannels: 128}
	files, ideal := llamastatetest.Series(spec)
	src := t.TempDir()
	sh(t, "mkdir -p "+m.path("slots"))
	for i, f := range files {
		p := filepath.Join(src, fmt.Sprintf("s%d", i))
		if err := os.WriteFile(p, f, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := m.path(fmt.Sprintf("slots/conversation %d.state", i))
		if i%2 == 0 {
			sh(t, fmt.Sprintf("cp %s '%s'", p, dst))
		} else {
			sh(t, fmt.Sprintf("dd if=%s of='%s' bs=4093 conv=fsync status=none", p, dst))
		}
	}
	st := mountStats(t, m)
	ratio := float64(st.StoredBytes) / float64(ideal)
	t.Logf("stored %d bytes of %d, ideal %d: %.3f× the ideal", st.StoredBytes, st.LogicalBytes, ideal, ratio)
	if ratio > 1.5 {
		t.Fatalf("stored %.2f× the ideal through the mount", ratio)
	}
	// kvfs inspect explains the file and how the mount stored it: the
	// file before it in the conversation is its parent.
	var rep struct {
		Format string
		Llama  struct{ Tokens int }
		Stored struct {
			Kind         string
			SharedBytes  int64
			Parent       string
			SharedTokens int
		}
	}
	out := kvfs(t, "inspect", "--json", m.path("slots/conversation 9.state"))
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if rep.Format != "llama.cpp sequence state (ggsq)" || rep.Llama.Tokens != 3100 || rep.Stored.Kind != "llama" ||
		rep.Stored.Parent != "/slots/conversation 8.state" || rep.Stored.SharedTokens != 2800 || rep.Stored.SharedBytes == 0 {
		t.Fatalf("inspect: %+v\n%s", rep, out)
	}
	// A trimmed view is the file of the first N tokens; what cannot be cut
	// so (more tokens than the file holds, none, a sliding-window model's
	// two caches) does not exist.
	sh(t, fmt.Sprintf("cmp '%s' %s", m.path(".kvfs/prefix/slots/conversation 9.state@2800"), filepath.Join(src, "s8")))
	swa := llamastatetest.Write(llamastatetest.Spec{Session: true, Arch: "gemma3", Layers: 2, KRow: 64, FlashAttn: true, Caches: 2}, make([]uint32, 50))
	if err := os.WriteFile(m.path("slots/swa.bin"), swa, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"slots/conversation 9.state@3101", "slots/conversation 9.state@0", "slots/swa.bin@10"} {
		if _, err := os.Stat(m.path(".kvfs/prefix/" + bad)); !os.IsNotExist(err) {
			t.Errorf("view %s: %v, want ENOENT", bad, err)
		}
	}
	verify := func() {
		for i := range files {
			sh(t, fmt.Sprintf("cmp %s '%s'", filepath.Join(src, fmt.Sprintf("s%d", i)), m.path(fmt.Sprintf("slots/conversation %d.state", i))))
		}
	}
	verify()
	kvfs(t, "unmount", m.mnt)
	m.check(t)
	m.start(t)
	verify()
}
