package mlx

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type inventory struct {
	Files []struct {
		Path          string `json:"path"`
		Size          int64  `json:"size"`
		FormatVersion int    `json:"formatVersion"`
		HeaderLen     uint32 `json:"headerLen"`
		DataStart     uint32 `json:"dataStart"`
		HeaderHashHex string `json:"headerHashHex"`
	} `json:"files"`
}

func TestParseFixtures(t *testing.T) {
	var inv inventory
	if err := json.Unmarshal(readFile(t, filepath.Join(fixtureDir, "inventory.json")), &inv); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range inv.Files {
		if !strings.HasSuffix(f.Path, ".mlxkv") {
			continue
		}
		n++
		path := filepath.Join(fixtureDir, f.Path)
		s, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p := s.Prefix
		if s.Size != f.Size || s.Header.FormatVersion != f.FormatVersion || p.HeaderLen != f.HeaderLen ||
			p.DataStart != f.DataStart || HashHex(p.HeaderHash) != f.HeaderHashHex {
			t.Errorf("%s: parsed %+v v%d size %d, inventory %+v", f.Path, p, s.Header.FormatVersion, s.Size, f)
		}
		// Re-encoding the parsed header reproduces the engine's bytes.
		js, err := s.Header.MarshalJSON()
		if err != nil || !bytes.Equal(js, s.HeaderJSON) {
			t.Errorf("%s: re-encoded header differs (err %v)", f.Path, err)
		}
		T := len(s.Header.Tokens)
		if s.LogicalBytes() != int64(T)*4*8*64*2 {
			t.Errorf("%s: logical bytes %d", f.Path, s.LogicalBytes())
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if err := s.Verify(context.Background(), fh, BlockDir(filepath.Dir(path))); err != nil {
			t.Errorf("%s: verify: %v", f.Path, err)
		}
		// Every tensor reads back as the generator's logical bytes.
		_, tensors := fixtureSnapshot(T)
		for i, tn := range tensors {
			l, _ := tn.prepare()
			var scratch []byte
			want, _ := l.span(0, l.size, &scratch)
			got, err := io.ReadAll(s.SlotReader(i, fh, BlockDir(filepath.Dir(path))))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: slot %d reads back wrong (err %v)", f.Path, i, err)
			}
		}
	}
	if n != 4 {
		t.Fatalf("inventory lists %d snapshots, want 4", n)
	}
}

// rehead replaces the header of a snapshot file, fixing the prefix so that
// only the intended rule is broken. Whole-layout data stays in place.
func rehead(t *testing.T, file []byte, js string) []byte {
	t.Helper()
	var p Prefix
	if err := p.UnmarshalBinary(file); err != nil {
		t.Fatal(err)
	}
	p.HeaderLen = uint32(len(js))
	p.HeaderHash = Hash([]byte(js))
	var out []byte
	if int(p.DataStart) == len(file) && int(p.DataStart) < Align { // blocks layout
		p.DataStart = uint32(PrefixLen + len(js))
		out, _ = p.AppendBinary(nil)
		return append(out, js...)
	}
	if PrefixLen+len(js) > int(p.DataStart) {
		t.Fatalf("header of %d bytes does not fit before dataStart %d", len(js), p.DataStart)
	}
	out = bytes.Clone(file)
	p.AppendBinary(out[:0])
	clear(out[PrefixLen:p.DataStart])
	copy(out[PrefixLen:], js)
	return out
}

// sub replaces the first old in s, failing if there is none, so that a
// mutation that silently does nothing cannot pass as a rejected input.
func sub(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("mutation target %q not found", old)
	}
	return strings.Replace(s, old, new, 1)
}

func TestParseRejects(t *testing.T) {
	whole := readFile(t, fixturePath("whole", 300))
	blocks := readFile(t, fixturePath("blocks", 300))
	wholeJS := string(whole[PrefixLen : PrefixLen+2331])
	blocksJS := string(blocks[PrefixLen:])
	setU32 := func(b []byte, off int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	firstBlock := blocksJS[strings.Index(blocksJS, `"blocks":[{"hash":"`)+len(`"blocks":[{"hash":"`):][:64]
	cases := []struct {
		name string
		file []byte
		want error
	}{
		{"empty", nil, ErrTruncatedPrefix},
		{"short", whole[:20], ErrTruncatedPrefix},
		{"bad magic", append([]byte("GGUF\x00\x00\x00\x00\x00\x00"), whole[10:100]...), ErrBadMagic},
		{"v1", append([]byte(MagicV1), whole[10:100]...), ErrV1},
		{"header past end", whole[:1000], ErrMalformed},
		{"huge headerLen", setU32(whole, 10, MaxHeaderLen+1), ErrMalformed},
		{"headerLen 2^32-1", setU32(whole, 10, 1<<32-1), ErrMalformed},
		{"header hash", append(append([]byte{}, whole[:30]...), append([]byte{'X'}, whole[31:]...)...), ErrHeaderHash},
		{"dataStart", setU32(whole, 14, 32768), ErrMalformed},
		{"blocks dataStart", setU32(blocks, 14, 16384), ErrMalformed},
		{"blocks trailing bytes", append(bytes.Clone(blocks), 0), ErrMalformed},
		{"truncated tensors", whole[:len(whole)-1], ErrMalformed},
		{"not JSON", rehead(t, whole, "{"+wholeJS), ErrMalformed},
		{"version 6", rehead(t, whole, sub(t, wholeJS, `"formatVersion":3`, `"formatVersion":6`)), ErrVersion},
		{"version 1", rehead(t, whole, sub(t, wholeJS, `"formatVersion":3`, `"formatVersion":1`)), ErrVersion},
		{"overlap", rehead(t, whole, sub(t, wholeJS, `"off":311296`, `"off":300000`)), ErrMalformed},
		{"past end", rehead(t, whole, sub(t, wholeJS, `"off":933888`, `"off":9338880`)), ErrMalformed},
		{"lying bytes", rehead(t, whole, sub(t, wholeJS, `"bytes":307200`, `"bytes":3072000`)), ErrMalformed},
		{"lying shape", rehead(t, whole, sub(t, wholeJS, `[1,8,300,64]`, `[1,8,3000,64]`)), ErrMalformed},
		{"huge off", rehead(t, whole, sub(t, wholeJS, `"off":0`, `"off":9223372036854775807`)), ErrMalformed},
		{"short hash", rehead(t, whole, sub(t, wholeJS, `"hash":"ea37e8c125f8759a"`, `"hash":"ea37e8c125f875"`)), ErrMalformed},
		{"attachments in v3", rehead(t, whole, sub(t, wholeJS, `"ns":""`, `"ns":"","attachments":[]`)), ErrMalformed},
		{"blocks in v3", rehead(t, whole, sub(t, wholeJS, `"hash":"ea37e8c125f8759a"`, `"hash":"ea37e8c125f8759a","blocks":[]`)), ErrMalformed},
		{"uppercase block", rehead(t, blocks, sub(t, blocksJS, firstBlock, strings.ToUpper(firstBlock))), ErrMalformed},
		{"zero block", rehead(t, blocks, sub(t, blocksJS, `"bytes":16384}`, `"bytes":0}`)), ErrMalformed},
		{"block overrun", rehead(t, blocks, sub(t, blocksJS, `"bytes":16384}`, `"bytes":16385}`)), ErrMalformed},
		{"blocks short", rehead(t, blocks, sub(t, blocksJS, `{"hash":"`+firstBlock+`","bytes":16384},`, ``)), ErrMalformed},
		{"no blocks", rehead(t, blocks, sub(t, blocksJS, `"hash":"","blocks":[`, `"hash":"","xblocks":[`)), ErrMalformed},
		{"v5 tensor hash", rehead(t, blocks, sub(t, blocksJS, `"hash":"","blocks"`, `"hash":"ea37e8c125f8759a","blocks"`)), ErrMalformed},
	}
	for _, c := range cases {
		_, err := Parse(bytes.NewReader(c.file), int64(len(c.file)), "bad.mlxkv")
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, c.want) || fe.File != "bad.mlxkv" || !strings.HasPrefix(err.Error(), "bad.mlxkv: ") {
			t.Errorf("%s: err = %v, want a *FormatError naming the file and wrapping %v", c.name, err, c.want)
		}
	}
}

// TestVerifyDetectsCorruption flips one tensor byte of a whole file and one
// byte of a block, and shortens and lengthens a block.
func TestVerifyDetectsCorruption(t *testing.T) {
	whole := readFile(t, fixturePath("whole", 300))
	bad := bytes.Clone(whole)
	bad[16384+311296+5] ^= 1 // slot 1
	s, err := Parse(bytes.NewReader(bad), int64(len(bad)), "w.mlxkv")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Verify(context.Background(), bytes.NewReader(bad), nil)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "slot 1") {
		t.Fatalf("corrupt tensor: %v", err)
	}

	dir := t.TempDir()
	manifest := filepath.Join(dir, "m.mlxkv")
	h, tensors := fixtureSnapshot(300)
	written, _, err := (&Writer{Layout: BlocksLayout, BlockBytes: fixtureBlockSize}).Write(manifest, h, tensors)
	if err != nil {
		t.Fatal(err)
	}
	s, err = ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	ref := written.Slots()[2].Blocks[1]
	blockPath := filepath.Join(dir, "blocks", ref.Hash)
	orig := readFile(t, blockPath)
	for name, content := range map[string][]byte{
		"flipped": append([]byte{orig[0] ^ 0x80}, orig[1:]...),
		"short":   orig[:len(orig)-1],
		"long":    append(bytes.Clone(orig), 0),
	} {
		if err := os.WriteFile(blockPath, content, 0o600); err != nil {
			t.Fatal(err)
		}
		err := s.Verify(context.Background(), nil, BlockDir(dir))
		if err == nil || !strings.Contains(err.Error(), ref.Hash) || !strings.Contains(err.Error(), "slot 2") {
			t.Errorf("%s block: %v", name, err)
		}
		if _, rerr := io.ReadAll(s.SlotReader(2, nil, BlockDir(dir))); name != "flipped" && rerr == nil {
			t.Errorf("%s block: SlotReader read without error", name)
		}
	}
	os.Remove(blockPath)
	if err := s.Verify(context.Background(), nil, BlockDir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing block: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Verify(ctx, nil, BlockDir(dir)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled verify: %v", err)
	}
}

func TestPrefixRoundTrip(t *testing.T) {
	p := Prefix{HeaderLen: 2331, DataStart: 16384, HeaderHash: 0xec6f5a822a956720}
	b, err := p.MarshalBinary()
	if err != nil || len(b) != PrefixLen {
		t.Fatal(len(b), err)
	}
	whole := readFile(t, fixturePath("whole", 300))
	if !bytes.Equal(b, whole[:PrefixLen]) {
		t.Fatalf("encoded prefix %x, fixture %x", b, whole[:PrefixLen])
	}
	var q Prefix
	if err := q.UnmarshalBinary(b); err != nil || q != p {
		t.Fatalf("decoded %+v, %v", q, err)
	}
}

// TestParseV2 reads a format 2 file: the same layout, with tensor hashes
// that were not zero-padded.
func TestParseV2(t *testing.T) {
	whole := readFile(t, fixturePath("whole", 300))
	js := string(whole[PrefixLen : PrefixLen+2331])
	v2 := rehead(t, whole, sub(t, js, `"formatVersion":3`, `"formatVersion":2`))
	s, err := Parse(bytes.NewReader(v2), int64(len(v2)), "v2.mlxkv")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(context.Background(), bytes.NewReader(v2), nil); err != nil {
		t.Fatal(err)
	}
	short := rehead(t, whole, sub(t, sub(t, js, `"formatVersion":3`, `"formatVersion":2`), `"hash":"ea37e8c125f8759a"`, `"hash":"ea37e8c125f875"`))
	s, err = Parse(bytes.NewReader(short), int64(len(short)), "v2.mlxkv")
	if err != nil {
		t.Fatalf("unpadded v2 hash rejected: %v", err)
	}
	if err := s.Verify(context.Background(), bytes.NewReader(short), nil); !errors.Is(err, ErrChecksum) {
		t.Fatalf("wrong v2 hash verified: %v", err)
	}
}
