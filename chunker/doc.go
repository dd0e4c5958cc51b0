// Package chunker cuts bytes into content-defined chunks: where a cut
// falls depends on the bytes around it, not on its offset, so that bytes
// inserted or removed early in a file move the cuts after them along with
// the content, and the chunks after the change are the same as before.
// A file of a format the store does not parse (another engine's cache, a
// checkpoint, a page-per-file tier) then dedups against its earlier
// versions and its copies at other offsets, where fixed-size chunks from
// offset 0 share nothing once one byte is inserted (issue 29: llama.cpp's
// state files stored 1.00x).
//
// The cut rule is FastCDC's (Xia et al., USENIX ATC 2016): a gear hash
// rolls over the bytes (h = h<<1 + gear[b], so bit i of h depends on the
// last i+1 bytes and the top bits on the last 64), no cut falls before
// Min bytes or after Max, and a cut falls where the hash's top bits are
// zero: more of them must be before Avg bytes (cuts there are rarer), fewer
// after (cuts there are likelier), which narrows the sizes around Avg
// ("normalized chunking", level 2). The gear table is fixed forever: a
// change would move every cut of every file, and nothing stored before it
// would dedup with anything stored after.
package chunker
