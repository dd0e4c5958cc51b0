package fs

import (
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// TestReadHandlesDoNotFlush: rawReplies tells the kernel not to send
// FLUSH for read-only opens, which is right only while no handle that a
// read-only open returns has work to do at a flush.
func TestReadHandlesDoNotFlush(t *testing.T) {
	for name, h := range map[string]gofs.FileHandle{
		"reader":      &reader{},
		"bytesHandle": bytesHandle(nil),
		"wholeReader": &wholeReader{},
		"fixedView":   &fixedView{},
	} {
		if _, ok := h.(gofs.FileFlusher); ok {
			t.Errorf("%s has a Flush, which read-only opens skip (FOPEN_NOFLUSH, rawReplies): remove the flag or the Flush", name)
		}
	}
	// go-fuse asks the node first.
	for name, n := range map[string]gofs.InodeEmbedder{
		"fileNode": &fileNode{}, "wholeFile": &wholeFile{}, "statsFile": &statsFile{},
	} {
		if _, ok := n.(gofs.NodeFlusher); ok {
			t.Errorf("%s has a Flush, which read-only opens skip (FOPEN_NOFLUSH, rawReplies)", name)
		}
	}
}
