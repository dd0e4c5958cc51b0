package fs

import (
	"context"

	"github.com/kvfs/kvfs/store"
)

// reclassify commits the file again from its own bytes, after a rename
// gave it a snapshot's name (store.IndexedOnRename): chunked by tensor
// rows and indexed by prefix, as if it had been written under that name.
// The bytes do not change, so neither do the kernel's pages of the file.
// A file still being written is left to its own commit, which takes the
// new name. Best effort: the rename has happened; a failure leaves the
// file stored as it was, and is logged.
func (f *fileNode) reclassify(ctx context.Context, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sp != nil || f.writers > 0 {
		return
	}
	ino := f.ino.Load()
	st, err := f.fsys.s.StatIno(ino)
	if err != nil || st.Kind == "mlxkv" {
		return
	}
	src, err := f.fsys.s.OpenIno(ino)
	if err != nil {
		f.fsys.log.Warn("index a snapshot renamed into place", "name", name, "err", err)
		return
	}
	// The commit closes src, in its own transaction, once it succeeds
	// (CommitOptions.Close): the version it replaces goes there.
	fi, _, err := f.fsys.s.CommitIno(context.WithoutCancel(ctx), ino, src, src.Size(),
		store.CommitOptions{Mtime: st.Mtime, Close: []*store.File{src}})
	if err != nil {
		src.Close()
		f.fsys.log.Warn("index a snapshot renamed into place", "name", name, "err", err)
		return
	}
	f.ino.Store(fi.Ino)
	f.vmu.Lock()
	if f.cur != nil {
		f.serveLocked(fi.Ino)
	}
	f.vmu.Unlock()
	if fi.Kind != "mlxkv" {
		f.fsys.log.Info("a file renamed to a snapshot's name is no snapshot", "name", name)
	}
}
