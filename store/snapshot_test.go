package store_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

const fixtures = "../mlx/testdata/mlxbun"

// TestFixtureParent: the engine's 400-token snapshot, ingested after its
// 300-token one, reuses every full chunk of every row and the parent's
// partial tail chunks.
func TestFixtureParent(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 16384})
	var files [][]byte
	for _, T := range []string{"300", "400"} {
		b, err := os.ReadFile(filepath.Join(fixtures, "whole/fixture-fingerprint/base/00000000-0000-4000-8000-000000000"+T+".mlxkv"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	st300 := put(t, s, "fp/base/300.mlxkv", files[0])
	st400 := put(t, s, "fp/base/400.mlxkv", files[1])
	if st300.Kind != "mlxkv" || st300.ZeroBytes == 0 || st300.Parent != 0 {
		t.Fatalf("300: %+v", st300)
	}
	// 32 rows (4 tensors x 8 heads) of 300 tokens x 128 bytes: 2 full
	// 16 KiB chunks and a 5632-byte tail each, all reused by the 400-token
	// snapshot, whose rows add 100 tokens x 128 bytes.
	if st400.Parent == 0 || st400.ParentReused != 32*300*128 {
		t.Fatalf("400: parent %d, reused %d bytes, want %d", st400.Parent, st400.ParentReused, 32*300*128)
	}
	rowNew := int64(32 * 100 * 128)
	if st400.NewBytes > rowNew+int64(len(files[1][:16384])) {
		t.Fatalf("400 stored %d new bytes, want at most its new tokens (%d) plus its header", st400.NewBytes, rowNew)
	}
	for i, p := range []string{"fp/base/300.mlxkv", "fp/base/400.mlxkv"} {
		if got := get(t, s, p); !bytes.Equal(got, files[i]) {
			t.Fatalf("%s reads back wrong", p)
		}
	}
}

// TestPrefixGrowth: ten snapshots, each 10% longer than the last, store each
// token's bytes once.
func TestPrefixGrowth(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	m := snapgen.Tiny
	tokens := snapgen.Tokens(100, 1)
	var unique int64
	for i := 0; i < 10; i++ {
		b := writeSnap(t, m, tokens)
		snap, err := mlx.Parse(bytes.NewReader(b), int64(len(b)), "s")
		if err != nil {
			t.Fatal(err)
		}
		prev := 0
		if i > 0 {
			prev = len(tokens) * 10 / 11
		}
		st := put(t, s, filepath.Join("fp", "ns", string(rune('a'+i))+".mlxkv"), b)
		newTokenBytes := int64(len(tokens)-prev) * m.BytesPerToken()
		header := int64(mlx.PrefixLen) + int64(snap.Prefix.HeaderLen)
		if i > 0 && st.NewBytes > newTokenBytes+header {
			t.Errorf("snapshot %d (%d tokens): %d new bytes, want at most %d (new tokens) + %d (header)", i, len(tokens), st.NewBytes, newTokenBytes, header)
		}
		unique += header
		tokens = snapgen.Extend(tokens, len(tokens)/10, uint64(i+2))
	}
	unique += int64(len(tokens)*10/11) * m.BytesPerToken()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if float64(st.StoredBytes) > 1.02*float64(unique) {
		t.Fatalf("stored %d bytes, unique %d (%.3fx)", st.StoredBytes, unique, float64(st.StoredBytes)/float64(unique))
	}
}

// TestBranches: A = P + a, B = P + b with P never stored alone: B stores at
// most one chunk per row beyond its own new tokens.
func TestBranches(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	m := snapgen.Tiny
	p := snapgen.Tokens(1000, 7)
	a := snapgen.Extend(p, 200, 8)
	b := snapgen.Extend(p, 300, 9)
	put(t, s, "fp/ns/a.mlxkv", writeSnap(t, m, a))
	bb := writeSnap(t, m, b)
	st := put(t, s, "fp/ns/b.mlxkv", bb)
	rows := int64(m.Layers * 2 * m.KVHeads)
	own := 300 * m.BytesPerToken()
	if st.NewBytes > own+rows*C+16384 {
		t.Fatalf("B stored %d new bytes; its new tokens are %d, plus one %d-byte chunk per row (%d rows)", st.NewBytes, own, C, rows)
	}
	if got := get(t, s, "fp/ns/b.mlxkv"); !bytes.Equal(got, bb) {
		t.Fatal("B reads back wrong")
	}
}

// TestHostileSnapshots: truncated, corrupted and lying .mlxkv files are
// stored as plain files, with the reason, and read back unchanged.
func TestHostileSnapshots(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	good := writeSnap(t, snapgen.Tiny, snapgen.Tokens(50, 1))
	huge := bytes.Clone(good)
	copy(huge[10:], []byte{0xff, 0xff, 0xff, 0x7f}) // headerLen 2 GiB
	flipped := bytes.Clone(good)
	flipped[40] ^= 1
	for name, b := range map[string][]byte{
		"truncated.mlxkv": good[:len(good)-100],
		"short.mlxkv":     good[:20],
		"huge.mlxkv":      huge,
		"flipped.mlxkv":   flipped,
		"empty.mlxkv":     nil,
	} {
		st := put(t, s, name, b)
		if st.Kind != "plain" || (len(b) > 0 && st.Note == "") {
			t.Errorf("%s: stored as %q (%q)", name, st.Kind, st.Note)
		}
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Errorf("%s reads back wrong", name)
		}
	}
	// The fuzz corpus of the mlx package: every seed ingests.
	seeds, _ := filepath.Glob("../mlx/testdata/fuzz/FuzzParse/*")
	for _, p := range seeds {
		b, _ := os.ReadFile(p)
		put(t, s, "corpus/"+filepath.Base(p)+".mlxkv", b)
	}
	if len(seeds) < 10 {
		t.Fatalf("%d corpus seeds", len(seeds))
	}
	_ = store.PutOptions{}
}
