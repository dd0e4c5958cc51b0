package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"io"
	"log/slog"
	"math/bits"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/safetensors"
)

// A region is a run of the source that is chunked as one unit.
type region struct {
	off, n int64
	// zero marks the holes of a whole-layout snapshot: stored as a zero
	// run if the bytes are zero, cut every C bytes otherwise.
	zero bool
	// row marks one tensor row: cut at its start and every C bytes, after
	// reusing parent's chunks for as long as they match.
	row    bool
	parent []parentChunk
	// known marks one whole chunk whose sha256 (sum) was computed as it
	// was written (CommitChanges): it is not hashed again.
	known bool
	sum   blockstore.ID
	// cdc marks bytes of no parsed format: cut where their content says
	// (cdc.go), not every C bytes.
	cdc bool
}

// parentChunk is one chunk of a parent snapshot's row.
type parentChunk struct {
	id blockstore.ID
	n  int64
}

// Kinds of content, recorded in manifest.Inode.Kind.
const (
	kindMLXKV = "mlxkv"
	kindLlama = "llama"       // a llama.cpp state file (llamastate)
	kindST    = "safetensors" // a safetensors file: mlx-lm's prompt caches
	kindBlob  = "blob"
	kindPlain = "plain"
)

// plan is how a source is chunked.
type plan struct {
	kind    string
	note    string // why a .mlxkv is stored as plain
	regions []region
	// layout and tokens index a snapshot for later parent lookups.
	layout string
	tokens []uint32
	// prefix indexes the snapshot by token-chain key (match.go).
	prefix *manifest.PrefixRecord
	// parentIno is the snapshot whose rows were reused, 0 if none.
	parentIno uint64
	// pins are the distinct blocks a format-5 manifest lists.
	pins []string
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// isBlobPath reports whether comps name a file in a directory named blocks.
func inBlocksDir(comps []string) bool {
	return len(comps) >= 2 && comps[len(comps)-2] == "blocks"
}

// cutEvery covers [off, off+n) with plain regions; processing cuts them
// every C bytes from off.
func cutEvery(off, n int64) []region {
	if n <= 0 {
		return nil
	}
	return []region{{off: off, n: n}}
}

// parseSnapshot parses the snapshot in src, of size bytes, within the
// store's caps: a header too long for them is refused before it is
// parsed.
func (s *Store) parseSnapshot(src io.ReaderAt, size int64, name string) (*mlx.Snapshot, error) {
	return s.caps.parse(src, size, name)
}

// parse parses the snapshot in src within the caps (parseSnapshot).
func (c snapshotCaps) parse(src io.ReaderAt, size int64, name string) (*mlx.Snapshot, error) {
	if err := c.checkHeaderLen(src); err != nil {
		return nil, err
	}
	snap, err := mlx.Parse(src, size, name)
	if err != nil {
		return nil, err
	}
	if err := c.check(snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// sniffLen is how many leading bytes tell the formats apart.
const sniffLen = 16

// sniff returns the kind of content src starts with: kindMLXKV (the
// engine's magic), kindLlama (a llama.cpp state file's), kindST (a
// safetensors header), or kindPlain.
// Engines name cache files as their users choose, so the bytes decide,
// not the name (issue 29).
func sniff(src io.ReaderAt, size int64) string {
	var b [sniffLen]byte
	n, _ := src.ReadAt(b[:min(size, sniffLen)], 0)
	switch {
	case bytes.HasPrefix(b[:n], []byte(mlx.Magic)):
		return kindMLXKV
	case llamastate.Sniff(b[:n]):
		return kindLlama
	case safetensors.Sniff(b[:n], size):
		return kindST
	}
	return kindPlain
}

// rowsFunc parses a committed file's layout key and rows, for a child
// that reuses them (llamaRows, stRows, snapshotRows).
type rowsFunc func(io.ReaderAt, int64) (string, []slotRows, error)

// planner is what planning a file's chunks needs: the caps within which
// formats are parsed, whether bytes of no format are cut by content, and
// where a file's parent comes from. The store plans with its own index
// (Store.planFor); a pool plans with parents among its own files (Cut).
type planner struct {
	caps    snapshotCaps
	log     *slog.Logger
	content bool
	// parent returns the file of layout key with the longest common
	// token prefix with tokens, its rows read by rows, or nil.
	parent func(key string, tokens []uint32, rows rowsFunc) *parentSnap
}

// planFor decides how to chunk src with the store's index for parents.
func (s *Store) planFor(src io.ReaderAt, size int64, comps []string) *plan {
	pl := planner{caps: s.caps, log: s.log, content: s.cutsByContent(), parent: s.findParent}
	return pl.plan(src, size, comps)
}

// plan decides how to chunk src. A snapshot (by its name or its bytes)
// or a llama.cpp state file that fails to parse is stored as a plain
// file, with the reason noted and logged: ingest never fails because of
// what a file contains.
func (s *planner) plan(src io.ReaderAt, size int64, comps []string) *plan {
	name := comps[len(comps)-1]
	p := &plan{kind: kindPlain}
	kind := sniff(src, size)
	switch {
	case inBlocksDir(comps):
		p.kind = kindBlob
	case kind == kindLlama:
		var f *llamastate.File
		err := s.caps.checkLlamaTokens(src)
		if err == nil {
			f, err = llamastate.Parse(src, size, path.Join(comps...))
		}
		var slots []slotRows
		if err == nil {
			slots = llamaSlots(f)
			err = checkRows(slots)
		}
		if err != nil {
			p.note = err.Error()
			s.log.Info("storing a llama.cpp state file as a plain file", "path", path.Join(comps...), "reason", err)
			break
		}
		p.kind, p.tokens, p.layout = kindLlama, f.Tokens, f.Key()
		p.prefix = llamaPrefixRecord(f, src)
		parent := s.parent(p.layout, f.Tokens, llamaRows)
		if parent != nil {
			p.parentIno = parent.ino
		}
		p.regions = rowRegions(f.DataStart(), slots, size, parent)
		return p
	case kind == kindST:
		var f *safetensors.File
		err := checkSTHeader(src)
		if err == nil {
			f, err = safetensors.Parse(src, size, path.Join(comps...))
		}
		var slots []slotRows
		if err == nil {
			err = s.caps.checkSTTensors(f)
		}
		if err == nil {
			slots = stSlots(f)
			err = checkRows(slots)
		}
		if err != nil {
			p.note = err.Error()
			s.log.Info("storing a safetensors file as a plain file", "path", path.Join(comps...), "reason", err)
			break
		}
		p.kind, p.layout = kindST, stKey(f)
		p.tokens = stTokens(src, f, s.caps.tokens)
		parent := s.parent(p.layout, p.tokens, stRows)
		if parent != nil {
			p.parentIno = parent.ino
		}
		p.regions = rowRegions(f.DataStart(), slots, size, parent)
		return p
	case kind == kindMLXKV || strings.HasSuffix(name, ".mlxkv") || strings.HasSuffix(name, ".mlxkv.tmp"):
		snap, err := s.caps.parse(src, size, path.Join(comps...))
		if err != nil {
			p.note = err.Error()
			s.log.Info("storing snapshot as a plain file", "path", path.Join(comps...), "reason", err)
			break
		}
		p.kind = kindMLXKV
		p.tokens = snap.Header.Tokens
		p.layout = layoutKey(snap)
		p.prefix = prefixRecord(snap.Header)
		if !snap.Blocks() {
			parent := s.parent(p.layout, snap.Header.Tokens, snapshotRows)
			if parent != nil {
				p.parentIno = parent.ino
			}
			p.regions = snapshotRegions(snap, parent)
			return p
		}
		seen := map[string]bool{}
		for _, t := range snap.Header.Slots() {
			for _, b := range t.Blocks {
				if !seen[b.Hash] {
					seen[b.Hash] = true
					p.pins = append(p.pins, b.Hash)
				}
			}
		}
	}
	if p.kind == kindPlain {
		if size > 0 {
			p.regions = []region{{off: 0, n: size, cdc: s.content}}
		}
		return p
	}
	// A blob is cut on the grid (CommitChanges relies on it); a
	// blocks-layout manifest is a header.
	p.regions = cutEvery(0, size)
	return p
}

// minRunBytes is the shortest row of a llama.cpp file cut on its own: a
// transposed V block is a run per channel of 2 bytes a token, and below
// this a layer's runs are cut as one region rather than as many tiny
// chunks.
const minRunBytes = 256

// llamaSlots returns a llama.cpp state file's blocks as rows: a
// token-major block is one row that grows at its end; a transposed V
// block is a row per channel, unless those are shorter than minRunBytes.
func llamaSlots(f *llamastate.File) []slotRows {
	var out []slotRows
	for _, b := range f.Blocks() {
		out = append(out, llamaSlot(b))
	}
	return out
}

// llamaSlot returns a block's rows (llamaSlots).
func llamaSlot(b llamastate.Block) slotRows {
	sl := slotRows{off: b.Off, rows: b.Rows, rowBytes: b.RowBytes}
	if sl.rows > 1 && sl.rowBytes < minRunBytes {
		sl.rows, sl.rowBytes = 1, b.Rows*b.RowBytes
	}
	return sl
}

// llamaRows parses a committed llama.cpp state file's rows, for a child
// that reuses them.
func llamaRows(src io.ReaderAt, size int64) (string, []slotRows, error) {
	f, err := llamastate.Parse(src, size, "parent")
	if err != nil {
		return "", nil, err
	}
	return f.Key(), llamaSlots(f), nil
}

// stSlots returns a safetensors file's tensors as rows: the product of
// the last two dimensions (a [B, H, T, D] cache tensor's rows are T×D,
// one per batch and head), or the whole tensor below rank 2.
func stSlots(f *safetensors.File) []slotRows {
	var out []slotRows
	for _, t := range f.Tensors {
		sl := slotRows{off: t.Off, rows: 1, rowBytes: t.End - t.Off}
		if k := len(t.Shape); k >= 2 && sl.rowBytes > 0 {
			sl.rowBytes = t.Shape[k-2] * t.Shape[k-1] * int64(t.ElemSize())
			sl.rows = (t.End - t.Off) / sl.rowBytes
		}
		if sl.rowBytes == 0 {
			sl.rows = 0
		}
		out = append(out, sl)
	}
	return out
}

// stKey identifies safetensors files whose rows correspond: the same
// tensors (by name), dtypes and shapes but for the token dimension (the
// second to last), and the same metadata keys.
func stKey(f *safetensors.File) string {
	h := sha256.New()
	w := func(str string) { h.Write(binary.AppendUvarint(nil, uint64(len(str)))); h.Write([]byte(str)) }
	ts := append([]safetensors.Tensor(nil), f.Tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for _, t := range ts {
		w(t.Name)
		w(t.DType)
		for i, d := range t.Shape {
			if i == len(t.Shape)-2 {
				d = -1
			}
			h.Write(binary.AppendVarint(nil, d))
		}
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w(k)
	}
	return "st:" + hex.EncodeToString(h.Sum(nil))
}

// stTokens stands in for the tokens a safetensors cache does not record:
// a checksum of each token's vector in the first row of the first tensor
// by name ("0.0", layer 0's keys, batch 0, head 0, in mlx-lm's file). Two
// caches of one model share a prefix of these exactly as far as they
// share a prefix of tokens (but for a checksum collision, which only
// makes a parent whose rows are then not reused), so the parent is found
// as for a snapshot: the longest common prefix.
//
// Within the caps: at most maxTokens tokens and a row of maxSTTokenRow
// bytes; past them the file has no parent.
func stTokens(src io.ReaderAt, f *safetensors.File, maxTokens int) []uint32 {
	var first *safetensors.Tensor
	for i := range f.Tensors {
		if t := &f.Tensors[i]; len(t.Shape) >= 2 && (first == nil || t.Name < first.Name) {
			first = t
		}
	}
	if first == nil {
		return nil
	}
	k := len(first.Shape)
	n, width := first.Shape[k-2], first.Shape[k-1]*int64(first.ElemSize())
	if n <= 0 || width <= 0 || n > int64(maxTokens) || n > maxSTTokenRow/width {
		return nil
	}
	row := make([]byte, n*width)
	if _, err := src.ReadAt(row, first.Off); err != nil {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = crc32.Checksum(row[int64(i)*width:int64(i+1)*width], castagnoli)
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stRows parses a committed safetensors file's rows.
func stRows(src io.ReaderAt, size int64) (string, []slotRows, error) {
	f, err := safetensors.Parse(src, size, "parent")
	if err != nil {
		return "", nil, err
	}
	return stKey(f), stSlots(f), nil
}

// snapshotRows parses a committed snapshot's rows.
func snapshotRows(src io.ReaderAt, size int64) (string, []slotRows, error) {
	ps, err := mlx.Parse(src, size, "parent")
	if err != nil {
		return "", nil, err
	}
	return layoutKey(ps), rowsOf(ps), nil
}

// layoutKey identifies snapshots whose rows correspond: same model,
// fingerprint, namespace, layout, and per tensor the same dtype, rank, row
// count and row width. Only the token count may differ.
func layoutKey(s *mlx.Snapshot) string {
	h := sha256.New()
	w := func(str string) { h.Write(binary.AppendUvarint(nil, uint64(len(str)))); h.Write([]byte(str)) }
	n := func(v int64) { h.Write(binary.AppendVarint(nil, v)) }
	w(s.Header.ModelID)
	w(s.Header.ConfigFingerprint)
	w(s.Header.TokenizerHash)
	w(s.Header.NS)
	n(int64(s.Header.FormatVersion / 5)) // whole or blocks
	for _, e := range s.Header.Caches {
		w(string(e.Kind))
	}
	for _, t := range s.Header.Slots() {
		n(int64(t.DType))
		n(int64(len(t.Shape)))
		if k := len(t.Shape); k >= 2 {
			for _, d := range t.Shape[:k-2] {
				n(d)
			}
			n(t.Shape[k-1])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// slotRows describes the rows of one tensor in a whole-layout file.
type slotRows struct {
	off      int64 // absolute file offset of the tensor
	rows     int64
	rowBytes int64
}

func rowsOf(s *mlx.Snapshot) []slotRows {
	var out []slotRows
	for _, t := range s.Header.Slots() {
		r := slotRows{off: s.DataStart() + t.Off}
		if t.Bytes > 0 {
			r.rowBytes = mlx.RowElements(t.Shape) * int64(t.DType.Size())
			r.rows = t.Bytes / r.rowBytes
		}
		out = append(out, r)
	}
	return out
}

// snapshotRegions tiles a whole-layout snapshot: the header, the zero
// padding and gaps, and every tensor row, with parent chunks where a parent
// exists.
func snapshotRegions(snap *mlx.Snapshot, parent *parentSnap) []region {
	return rowRegions(int64(mlx.PrefixLen)+int64(snap.Prefix.HeaderLen), rowsOf(snap), snap.Size, parent)
}

// rowRegions tiles a file of rows: [0, headerEnd) cut every C, then every
// row of every slot (by offset), with its parent's chunks where a parent
// exists, and what lies between and after the rows as zero regions (a
// whole-layout snapshot's padding; a llama.cpp file's per-block headers).
func rowRegions(headerEnd int64, slots []slotRows, size int64, parent *parentSnap) []region {
	var out []region
	out = append(out, cutEvery(0, headerEnd)...)
	cursor := headerEnd
	order := make([]int, len(slots))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return slots[order[a]].off < slots[order[b]].off })
	for _, i := range order {
		sl := slots[i]
		if sl.rows == 0 {
			continue
		}
		if sl.off > cursor {
			out = append(out, region{off: cursor, n: sl.off - cursor, zero: true})
		}
		for r := int64(0); r < sl.rows; r++ {
			reg := region{off: sl.off + r*sl.rowBytes, n: sl.rowBytes, row: true}
			if parent != nil {
				reg.parent = parent.row(i, r, sl.rowBytes)
			}
			out = append(out, reg)
		}
		cursor = sl.off + sl.rows*sl.rowBytes
	}
	if size > cursor {
		out = append(out, region{off: cursor, n: size - cursor, zero: true})
	}
	return out
}

// parentSnap is a committed snapshot whose rows a new one may reuse.
type parentSnap struct {
	ino uint64
	// common is how many leading tokens it shares with the new file, of
	// its tokens in all and the new file's (child).
	common, tokens, child int
	slots                 []slotRows
	starts                []int64 // file offset of each extent
	m                     manifest.Manifest
}

// row returns the parent's chunks of row r of tensor i, from the row's
// start, for a row of rowBytes of the new file: empty if the parent has no
// such row or did not cut it at its start; only those that lie within the
// bytes of the tokens the two share (shared).
func (p *parentSnap) row(i int, r, rowBytes int64) []parentChunk {
	if i >= len(p.slots) || r >= p.slots[i].rows {
		return nil
	}
	start := p.slots[i].off + r*p.slots[i].rowBytes
	end := start + min(p.slots[i].rowBytes, p.shared(rowBytes))
	k := sort.Search(len(p.starts), func(k int) bool { return p.starts[k] >= start })
	var out []parentChunk
	for ; k < len(p.m) && p.starts[k] == start && start < end; k++ {
		e := p.m[k]
		if e.Zero || start+e.Len > end {
			break
		}
		out = append(out, parentChunk{id: e.ID, n: e.Len})
		start += e.Len
	}
	return out
}

// shared is how much of a new file's row of rowBytes holds the tokens it
// shares with the parent: all of it when the parent's tokens are a prefix
// of its own. When a conversation branches, the parent's chunks past the
// tokens they share hold other tokens' keys and values, and were hashed
// at the commit only to find that they did not match (2048 of the 2055
// chunks a branch's commit hashed, TestLlamaPieces). A row's bytes are
// taken to be its tokens', in order; for one that is not, a chunk past
// the share goes unmatched.
func (p *parentSnap) shared(rowBytes int64) int64 {
	if p.common >= p.tokens || p.child <= 0 || p.common > p.child {
		return rowBytes
	}
	hi, lo := bits.Mul64(uint64(rowBytes), uint64(p.common))
	q, _ := bits.Div64(hi, lo, uint64(p.child))
	return int64(q)
}

// findParent returns the committed file of layout key with the longest
// common token prefix with tokens, its rows read by rows, or nil.
func (s *Store) findParent(key string, tokens []uint32, rows rowsFunc) *parentSnap {
	return s.bestParent(tokens, rows, func(tx *manifest.Tx, fn func(string, uint64, []byte) error) error {
		return tx.Snapshots(key, func(ino uint64, tb []byte) error { return fn(key, ino, tb) })
	})
}

// findParentUnder is findParent among the files of every layout key that
// begins with prefix (a file being written, whose key is known only in
// part): the parent's own key must be what its rows say.
func (s *Store) findParentUnder(prefix string, tokens []uint32, rows rowsFunc) *parentSnap {
	return s.bestParent(tokens, rows, func(tx *manifest.Tx, fn func(string, uint64, []byte) error) error {
		return tx.SnapshotsUnder(prefix, fn)
	})
}

// bestParent returns the file of the longest common token prefix with
// tokens among those scan calls fn with, if its rows (read by rows) are
// of the layout key it is indexed under.
func (s *Store) bestParent(tokens []uint32, rows rowsFunc, scan func(*manifest.Tx, func(layout string, ino uint64, tokens []byte) error) error) *parentSnap {
	var best uint64
	var key string
	bestLen, bestTokens := 0, 0
	s.db.View(func(tx *manifest.Tx) error {
		return scan(tx, func(layout string, ino uint64, tb []byte) error {
			n := min(len(tb)/4, len(tokens))
			l := 0
			for l < n && binary.LittleEndian.Uint32(tb[4*l:]) == tokens[l] {
				l++
			}
			if l > bestLen {
				best, key, bestLen, bestTokens = ino, layout, l, len(tb)/4
			}
			return nil
		})
	})
	if best == 0 {
		return nil
	}
	f, err := s.openIno(best)
	if err != nil {
		return nil
	}
	defer f.Close()
	pkey, slots, err := rows(f, f.Size())
	if err != nil || pkey != key {
		return nil
	}
	p := &parentSnap{ino: best, slots: slots, m: f.m, common: bestLen, tokens: bestTokens, child: len(tokens)}
	var off int64
	for _, e := range f.m {
		p.starts = append(p.starts, off)
		off += e.Len
	}
	return p
}
