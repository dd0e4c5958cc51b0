package fs

import "sync"

// A cold sequential read of a snapshot through the mount reached the disk
// one READ at a time: the kernel's readahead sends READs of 1 MiB, each
// spliced from its pack, and the pack's pages are read when the splice
// asks for them, so a reader had about 1 MiB in flight at the disk where
// a reader of a plain file has its whole request (a restore's 8 MiB
// preads: 1.13× plain cold with 16 readers on the H200, issue 28). So a
// handle read sequentially asks the kernel to read the packs under the
// next packAhead bytes of the file ahead of the READs (store.File.Prefetch),
// again each time its reads pass half of that window. Reads that jump
// around prefetch nothing.

// packAhead is how far past a sequential read its packs are read ahead.
const packAhead = 8 << 20

// maxStreams is how many sequential streams a handle tracks: a restore's
// threads read one descriptor at as many places at once (16 in
// bench/gpu's).
const maxStreams = 32

// readAhead is one handle's sequential-read tracking: its streams, each
// where its last read ended and how far it was prefetched.
type readAhead struct {
	mu      sync.Mutex
	streams [maxStreams]stream
	tick    uint64
}

type stream struct {
	next, until int64
	used        uint64 // tick of the last read; 0: free
}

// read notes a read of n bytes at off and prefetches past it (calls
// prefetch with the file's range to read ahead) when
// it continues a stream: it starts where one of the handle's recent reads
// ended, give or take one request (the kernel's readahead sends its READs
// out of order by that much). A read that continues none starts a stream
// in place of the least recently used one.
func (ra *readAhead) read(off int64, n int, prefetch func(off, n int64)) {
	end := off + int64(n)
	var from, to int64
	ra.mu.Lock()
	ra.tick++
	var st *stream
	for i := range ra.streams {
		c := &ra.streams[i]
		if c.used != 0 && off >= c.next-requestBytes && off <= c.next+requestBytes {
			st = c
			break
		}
	}
	if st == nil {
		st = &ra.streams[0]
		for i := range ra.streams {
			if ra.streams[i].used < st.used {
				st = &ra.streams[i]
			}
		}
		*st = stream{next: end, until: end}
	} else if st.next = max(st.next, end); end+packAhead/2 > st.until {
		from, to = max(end, st.until), end+packAhead
		st.until = to
	}
	st.used = ra.tick
	ra.mu.Unlock()
	if to > from {
		prefetch(from, to-from)
	}
}
