//go:build linux && soak

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/mlx"
)

// The soak's worker process (client soakworker; the soak itself is
// soak_test.go). The parent starts several and sends each one request at a
// time as a JSON line on stdin; the worker does it through the mount and
// answers with one JSON line on stdout. Requests: write a snapshot in the
// blocks layout or the whole layout as the engine does, verify a file
// (and a manifest's blocks) byte for byte by read() or mmap, collect a
// namespace root as the engine's GC does, remove a snapshot.

func init() {
	clients["soakworker"] = soakWorkerClient
}

// soakModel is the soak's cache geometry: 4 layers, 2 KV heads of 64,
// bf16 (2 KiB per token, so 2048 tokens are 4 MiB).
var soakModel = snapgen.Model{ID: "soak/model", Layers: 4, KVHeads: 2, HeadDim: 64, DType: mlx.BFloat16}

// soakBlockBytes is the blocks layout's block size (the fixtures'): 128
// tokens of one head per block.
const soakBlockBytes = 16384

// soakSpec names a snapshot: the first T tokens of conversation Conv. The
// same spec always gives the same bytes, so anyone can check a file
// against its spec; snapshots of one conversation share their prefix's
// blocks.
type soakSpec struct {
	Conv uint64 `json:"conv"`
	T    int    `json:"t"`
}

func (sp soakSpec) snapshot() (*mlx.Header, []mlx.Tensor) {
	return soakModel.Snapshot(snapgen.Tokens(sp.T, sp.Conv))
}

// soakWholeBytes is the whole-layout file of a snapshot (FORMAT.md §4.4),
// built in memory: prefix, header with each tensor's hash, zero padding,
// tensors at their planned offsets. It is also what /.kvfs/whole shows
// for the snapshot's blocks-layout manifest.
func soakWholeBytes(h *mlx.Header, tensors []mlx.Tensor) ([]byte, error) {
	out := h.Clone()
	dataStart, size, err := mlx.PlanWhole(out)
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	for i, s := range out.Slots() {
		s.Hash = mlx.HashHex(mlx.Hash(tensors[i].Data))
		copy(b[dataStart+s.Off:], tensors[i].Data)
	}
	js, err := out.MarshalJSON()
	if err != nil {
		return nil, err
	}
	p := mlx.Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(dataStart), HeaderHash: mlx.Hash(js)}
	p.AppendBinary(b[:0])
	copy(b[mlx.PrefixLen:], js)
	return b, nil
}

// soakBlocksLayout is the blocks layout of a snapshot (FORMAT.md §4.2,
// §4.3), built in memory: the manifest's bytes and each distinct block by
// its hash.
func soakBlocksLayout(h *mlx.Header, tensors []mlx.Tensor) (manifest []byte, blocks map[string][]byte, err error) {
	out := h.Clone()
	if _, _, err := mlx.PlanWhole(out); err != nil {
		return nil, nil, err
	}
	blocks = map[string][]byte{}
	for i, s := range out.Slots() {
		item := int64(s.DType.Size())
		s.Blocks = []mlx.BlockRef{}
		for sp := range mlx.Segments(s.Shape, item, soakBlockBytes) {
			b := tensors[i].Data[sp.Start*item : (sp.Start+sp.Count)*item]
			sum := sha256.Sum256(b)
			name := hex.EncodeToString(sum[:])
			s.Blocks = append(s.Blocks, mlx.BlockRef{Hash: name, Bytes: int64(len(b))})
			blocks[name] = b
		}
		s.Hash = ""
	}
	out.FormatVersion = 5
	js, err := out.MarshalJSON()
	if err != nil {
		return nil, nil, err
	}
	p := mlx.Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(mlx.PrefixLen + len(js)), HeaderHash: mlx.Hash(js)}
	manifest, _ = p.AppendBinary(make([]byte, 0, mlx.PrefixLen+len(js)))
	return append(manifest, js...), blocks, nil
}

func soakSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// soakReq is one request to a worker. Paths are absolute.
type soakReq struct {
	Op   string   `json:"op"` // write-blocks, write-whole, verify, collect, remove
	Path string   `json:"path"`
	Spec soakSpec `json:"spec"`
	// verify: the expected size and sha256 of the file at Path; Want says
	// what it is ("whole": the whole-layout bytes of Spec, a file or a
	// /.kvfs/whole view; "manifest": Spec's format-5 manifest, whose
	// blocks are verified too); Mmap reads through a mapping instead of
	// pread; Seed draws the read pattern.
	Size int64  `json:"size,omitempty"`
	SHA  string `json:"sha,omitempty"`
	Want string `json:"want,omitempty"`
	Mmap bool   `json:"mmap,omitempty"`
	Seed uint64 `json:"seed,omitempty"`
}

// soakResp is a worker's answer. Class is empty on success, else one of
// enoent (the file at Path does not exist), blockmissing (a manifest
// that verified lists a block whose name does not resolve: Path),
// mismatch (wrong bytes, wrong size, a short read, a manifest that does
// not parse: always a failure), conn (the FUSE connection is gone), fault
// (a mapping faulted: SIGBUS) or other.
type soakResp struct {
	Class  string `json:"class,omitempty"`
	Err    string `json:"err,omitempty"`
	Path   string `json:"path,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA    string `json:"sha,omitempty"`
	Blocks int    `json:"blocks,omitempty"`
	// write-blocks: the size and sha256 of the snapshot's whole-layout
	// equivalent, what /.kvfs/whole shows for it.
	ViewSize int64  `json:"viewSize,omitempty"`
	ViewSHA  string `json:"viewSha,omitempty"`
	Written  int64  `json:"written,omitempty"`
	Reused   int64  `json:"reused,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`   // verify: bytes read and checked
	Deleted  int    `json:"deleted,omitempty"` // collect: block names deleted
}

// soakError is an error with its class for soakResp.
type soakError struct {
	class, path string
	err         error
}

func (e *soakError) Error() string { return e.err.Error() }

func soakErrf(class, path, format string, args ...any) error {
	return &soakError{class: class, path: path, err: fmt.Errorf(format, args...)}
}

// soakClassify answers with err's class.
func soakClassify(err error) soakResp {
	var se *soakError
	if errors.As(err, &se) {
		return soakResp{Class: se.class, Path: se.path, Err: se.Error()}
	}
	r := soakResp{Class: "other", Err: err.Error()}
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		r.Path = pe.Path
	case errors.As(err, &le):
		r.Path = le.Old
	}
	switch {
	case errors.Is(err, syscall.ENOENT):
		r.Class = "enoent"
	case errors.Is(err, syscall.ENOTCONN), errors.Is(err, syscall.ECONNABORTED):
		r.Class = "conn"
	}
	return r
}

func soakWorkerClient(args []string) error {
	// A mapping of a file on a mount whose daemon was killed faults
	// (SIGBUS): a panic to recover from, not a crash.
	debug.SetPanicOnFault(true)
	dec := json.NewDecoder(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	oracleChecked := false
	for {
		var req soakReq
		if err := dec.Decode(&req); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		resp, err := soakHandle(req, &oracleChecked)
		if err != nil {
			// A failed write still names the file it meant to write,
			// for the parent to check if the file exists after all.
			c := soakClassify(err)
			c.Size, c.SHA, c.ViewSize, c.ViewSHA = resp.Size, resp.SHA, resp.ViewSize, resp.ViewSHA
			resp = c
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
	}
}

func soakHandle(req soakReq, oracleChecked *bool) (resp soakResp, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = soakErrf("fault", req.Path, "%s %s: %v", req.Op, req.Path, p)
		}
	}()
	switch req.Op {
	case "write-blocks":
		return soakWriteBlocks(req.Path, req.Spec)
	case "write-whole":
		return soakWriteWhole(req.Path, req.Spec, oracleChecked)
	case "verify":
		return soakVerify(req)
	case "collect":
		n, err := soakCollect(req.Path)
		return soakResp{Deleted: n}, err
	case "remove":
		return soakResp{}, os.Remove(req.Path)
	}
	return soakResp{}, fmt.Errorf("unknown op %q", req.Op)
}

// soakWriteBlocks writes a snapshot in the blocks layout with mlx.Writer,
// which follows the engine's protocol (FORMAT.md §4.3): a bare existence
// check of each blocks/<h>, new blocks through h.tmp, fsync, rename, the
// manifest last. It checks that the manifest written is the one built in
// memory, whose size and sha256 it returns.
func soakWriteBlocks(path string, sp soakSpec) (soakResp, error) {
	h, tensors := sp.snapshot()
	manifest, blocks, err := soakBlocksLayout(h, tensors)
	if err != nil {
		return soakResp{}, err
	}
	whole, err := soakWholeBytes(h, tensors)
	if err != nil {
		return soakResp{}, err
	}
	resp := soakResp{Size: int64(len(manifest)), SHA: soakSHA(manifest), Blocks: len(blocks), ViewSize: int64(len(whole)), ViewSHA: soakSHA(whole)}
	out, st, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: soakBlockBytes}).Write(path, h, tensors)
	if err != nil {
		return resp, err
	}
	js, err := out.MarshalJSON()
	if err != nil {
		return resp, err
	}
	if !bytes.Equal(js, manifest[mlx.PrefixLen:]) {
		return resp, fmt.Errorf("soak oracle: the manifest mlx.Writer wrote for %s differs from the one built in memory", path)
	}
	resp.Written, resp.Reused = st.WrittenBytes, st.ReusedBytes
	return resp, nil
}

// soakWriteWhole writes a snapshot in the whole layout with mlx.Writer
// (the engine's protocol, FORMAT.md §4.4: path.tmp, pwrites, the prefix
// last, fsync, rename) and returns the size and sha256 of the bytes built
// in memory. The first time, it also writes the snapshot to a local
// directory and checks that the two agree byte for byte (the oracle).
func soakWriteWhole(path string, sp soakSpec, oracleChecked *bool) (soakResp, error) {
	h, tensors := sp.snapshot()
	want, err := soakWholeBytes(h, tensors)
	if err != nil {
		return soakResp{}, err
	}
	if !*oracleChecked {
		dir, err := os.MkdirTemp("", "kvfs-soak-oracle-")
		if err != nil {
			return soakResp{}, err
		}
		defer os.RemoveAll(dir)
		local := filepath.Join(dir, "s.mlxkv")
		if _, _, err := (&mlx.Writer{}).Write(local, h, tensors); err != nil {
			return soakResp{}, err
		}
		got, err := os.ReadFile(local)
		if err != nil {
			return soakResp{}, err
		}
		if !bytes.Equal(got, want) {
			return soakResp{}, fmt.Errorf("soak oracle: mlx.Writer's whole-layout file (%d bytes) differs from the one built in memory (%d bytes)", len(got), len(want))
		}
		*oracleChecked = true
	}
	resp := soakResp{Size: int64(len(want)), SHA: soakSHA(want)}
	_, _, err = (&mlx.Writer{}).Write(path, h, tensors)
	return resp, err
}

// soakPiece is a range of a file.
type soakPiece struct{ off, n int64 }

// soakPieces cuts [0, size) into pieces of random, mostly unaligned
// lengths (a quarter under a page) and shuffles them: read in that order,
// every byte is read once, at offsets the kernel's readahead does not
// predict.
func soakPieces(size int64, r *rand.Rand) []soakPiece {
	var ps []soakPiece
	for off := int64(0); off < size; {
		n := 1 + r.Int64N(256<<10)
		if r.IntN(4) == 0 {
			n = 1 + r.Int64N(4096)
		}
		n = min(n, size-off)
		ps = append(ps, soakPiece{off, n})
		off += n
	}
	r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// soakRead reads all of f (size bytes) by pread of soakPieces, or through
// a read-only shared mapping copied in the same pieces. Half the time it
// first drops f's cached pages, so that the reads reach the daemon.
func soakRead(f *os.File, size int64, useMmap bool, r *rand.Rand) ([]byte, error) {
	if r.IntN(2) == 0 {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	b := make([]byte, size)
	if size == 0 {
		return b, nil
	}
	if useMmap {
		m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
		}
		defer unix.Munmap(m)
		for _, p := range soakPieces(size, r) {
			copy(b[p.off:p.off+p.n], m[p.off:p.off+p.n])
		}
		return b, nil
	}
	for _, p := range soakPieces(size, r) {
		n, err := f.ReadAt(b[p.off:p.off+p.n], p.off)
		if int64(n) < p.n {
			if err == nil || err == io.EOF {
				return nil, soakErrf("mismatch", f.Name(), "%s: short read: %d of %d bytes at %d of a %d-byte file", f.Name(), n, p.n, p.off, size)
			}
			return nil, err
		}
	}
	// Past the end: nothing.
	var one [1]byte
	if n, _ := f.ReadAt(one[:], size); n != 0 {
		return nil, soakErrf("mismatch", f.Name(), "%s: a read at its end (%d) returned %d bytes", f.Name(), size, n)
	}
	return b, nil
}

// soakDiff describes how got differs from want.
func soakDiff(got, want []byte) string {
	size := ""
	if len(got) != len(want) {
		size = fmt.Sprintf("%d bytes, want %d; ", len(got), len(want))
	}
	n := min(len(got), len(want))
	if kind, at, zeros, ok := testutil.Mismatch(got[:n], want[:n]); !ok {
		return fmt.Sprintf("%s%s at offset %d (%d zero bytes from there)", size, kind, at, zeros)
	}
	if size != "" {
		return size + "the common part agrees"
	}
	return "the same bytes"
}

// soakVerify checks the file at req.Path against its size and sha256;
// for a manifest, then every block it lists, while the manifest is held
// open (an open file is not evicted).
func soakVerify(req soakReq) (soakResp, error) {
	r := rand.New(rand.NewPCG(req.Seed, 7))
	f, err := os.Open(req.Path)
	if err != nil {
		return soakResp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return soakResp{}, err
	}
	b, err := soakRead(f, fi.Size(), req.Mmap, r)
	if err != nil {
		return soakResp{}, err
	}
	if fi.Size() != req.Size || soakSHA(b) != req.SHA {
		h, tensors := req.Spec.snapshot()
		var want []byte
		if req.Want == "manifest" {
			want, _, err = soakBlocksLayout(h, tensors)
		} else {
			want, err = soakWholeBytes(h, tensors)
		}
		detail := fmt.Sprintf("size %d, want %d", fi.Size(), req.Size)
		if err == nil {
			detail = soakDiff(b, want)
		}
		return soakResp{}, soakErrf("mismatch", req.Path, "%s (mmap %v): wrong content: %s", req.Path, req.Mmap, detail)
	}
	resp := soakResp{Bytes: int64(len(b))}
	if req.Want != "manifest" {
		return resp, nil
	}
	s, err := mlx.Parse(bytes.NewReader(b), int64(len(b)), req.Path)
	if err != nil {
		return soakResp{}, soakErrf("mismatch", req.Path, "%v", err)
	}
	dir := filepath.Join(filepath.Dir(req.Path), "blocks")
	seen := map[string]bool{}
	for _, sl := range s.Header.Slots() {
		for _, ref := range sl.Blocks {
			if seen[ref.Hash] {
				continue
			}
			seen[ref.Hash] = true
			n, err := soakVerifyBlock(filepath.Join(dir, ref.Hash), ref, req, r)
			if err != nil {
				return soakResp{}, err
			}
			resp.Bytes += n
			resp.Blocks++
		}
	}
	return resp, nil
}

// soakVerifyBlock checks one block: its size and that its content hashes
// to its name.
func soakVerifyBlock(p string, ref mlx.BlockRef, req soakReq, r *rand.Rand) (int64, error) {
	f, err := os.Open(p)
	if errors.Is(err, syscall.ENOENT) {
		return 0, soakErrf("blockmissing", p, "%s lists block %s, and it does not resolve: %v", req.Path, ref.Hash, err)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if fi.Size() != ref.Bytes {
		return 0, soakErrf("mismatch", p, "block %s of %s: %d bytes, want %d", ref.Hash, req.Path, fi.Size(), ref.Bytes)
	}
	b, err := soakRead(f, fi.Size(), req.Mmap, r)
	if err != nil {
		return 0, err
	}
	if soakSHA(b) != ref.Hash {
		detail := ""
		h, tensors := req.Spec.snapshot()
		if _, blocks, err := soakBlocksLayout(h, tensors); err == nil && blocks[ref.Hash] != nil {
			detail = ": " + soakDiff(b, blocks[ref.Hash])
		}
		return 0, soakErrf("mismatch", p, "block %s of %s (mmap %v): content does not hash to its name%s", ref.Hash, req.Path, req.Mmap, detail)
	}
	return int64(len(b)), nil
}

// soakCollect is the engine's collect (FORMAT.md §4.6) of root: in each
// namespace directory with a blocks directory, every block that no
// *.mlxkv lists is deleted, *.tmp included (another process's block being
// written among them: the engine's own cross-process race). Every
// manifest here was renamed into place after its fsync, so one that does
// not parse is wrong bytes, a mismatch; one that vanishes while the
// collect reads (evicted, removed by another writer) aborts it, as an I/O
// error aborts the engine's.
func soakCollect(root string) (int, error) {
	nss, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, ns := range nss {
		dir := filepath.Join(root, ns.Name())
		if !ns.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "blocks")); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return deleted, err
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return deleted, err
		}
		live := map[string]bool{}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".mlxkv") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				return deleted, err
			}
			s, err := mlx.Parse(bytes.NewReader(b), int64(len(b)), p)
			if err != nil {
				return deleted, soakErrf("mismatch", p, "collect: %v", err)
			}
			for _, sl := range s.Header.Slots() {
				for _, ref := range sl.Blocks {
					live[ref.Hash] = true
				}
			}
		}
		blocks, err := os.ReadDir(filepath.Join(dir, "blocks"))
		if err != nil {
			return deleted, err
		}
		for _, e := range blocks {
			if live[e.Name()] {
				continue
			}
			if err := os.Remove(filepath.Join(dir, "blocks", e.Name())); err == nil {
				deleted++
			} else if !errors.Is(err, syscall.ENOENT) {
				return deleted, err
			}
		}
	}
	return deleted, nil
}
