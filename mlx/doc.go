// Package mlx speaks the KV-cache snapshot format of the MLX engine mlx-bun:
// the .mlxkv files an inference engine writes to save the attention keys and
// values of a prompt, so that a later request with the same prefix can skip
// its prefill.
//
// A snapshot starts with a 26-byte Prefix (magic, header length, data start,
// header hash) and a JSON Header: the exact token prefix, and one CacheEntry
// per cache layer with its tensors (Slot). In the whole layout (formats 3
// and 4) the tensors follow in the same file at 16 KiB-aligned offsets; in
// the blocks layout (format 5) the file is only the header, and each tensor
// is a list of content-addressed blocks in a "blocks" directory beside it.
// docs/FORMAT.md describes both byte by byte.
//
// The package is pure: it reads through io.ReaderAt and BlockSource and
// writes only through Writer, so the store and the filesystem can use it on
// spooled files, pack files or the engine's own directories alike.
//
//   - Parse validates a file: the engine's checks and stricter ones, every
//     failure a *FormatError naming the file and the check, and no
//     allocation sized by a field it has not checked.
//   - Snapshot.Verify checks tensor hashes (Bun.hash, Hash) or block sha256s.
//   - Header.MarshalJSON reproduces the engine's JSON byte for byte.
//   - Segments is the engine's row-aware block rule, which keeps every full
//     block of a shorter snapshot in a longer one, and which kvfs uses to
//     chunk snapshots so that shared prefixes share storage.
//   - PlanWhole lays out the whole layout; Writer writes either layout as
//     the engine does, from tensors in memory with any strides.
//   - Trim cuts a header to a shorter token prefix and maps each tensor of
//     the result to byte ranges of the source.
package mlx
