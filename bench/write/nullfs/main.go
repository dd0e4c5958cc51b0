// Command nullfs mounts a filesystem whose files take every write and keep
// nothing (reads return zeros, up to the size written): the floor of what
// FUSE costs a writer on this machine, for bench/write to set kvfs's write
// phase against. It serves until SIGINT or SIGTERM, then unmounts.
//
//	nullfs [-writeback] [-directio] [-maxwrite BYTES] [-copy] MOUNTPOINT
//
// -copy copies each write into a buffer of the file's, as a daemon that
// keeps the bytes must at least do; -writeback asks for the kernel's
// writeback cache; -directio opens files with FOPEN_DIRECT_IO.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

type root struct{ gofs.Inode }

var _ gofs.NodeCreater = (*root)(nil)

func (r *root) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	f := &file{}
	ch := r.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild(name, ch, true)
	return ch, nil, openFlags, 0
}

type file struct {
	gofs.Inode
	mu   sync.Mutex
	size int64
	buf  []byte
}

var (
	copyWrites bool
	openFlags  uint32 // FOPEN_DIRECT_IO with -directio
)

var (
	_ gofs.NodeWriter    = (*file)(nil)
	_ gofs.NodeGetattrer = (*file)(nil)
	_ gofs.NodeSetattrer = (*file)(nil)
	_ gofs.NodeOpener    = (*file)(nil)
	_ gofs.NodeFsyncer   = (*file)(nil)
	_ gofs.NodeFlusher   = (*file)(nil)
)

func (f *file) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return nil, openFlags, 0
}

func (f *file) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if copyWrites {
		if len(f.buf) < len(data) {
			f.buf = make([]byte, len(data))
		}
		copy(f.buf, data)
	}
	f.size = max(f.size, off+int64(len(data)))
	return uint32(len(data)), 0
}

func (f *file) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(f.size)
	return 0
}

func (f *file) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	if sz, ok := in.GetSize(); ok {
		f.size = int64(sz)
	}
	f.mu.Unlock()
	return f.Getattr(ctx, fh, out)
}

func (f *file) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno { return 0 }
func (f *file) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno               { return 0 }

func main() {
	writeback := flag.Bool("writeback", false, "ask for the kernel's writeback cache")
	maxWrite := flag.Int("maxwrite", 1<<20, "largest write request")
	flag.BoolVar(&copyWrites, "copy", false, "copy each write into a buffer")
	direct := flag.Bool("directio", false, "open files with FOPEN_DIRECT_IO: writes go from the writer's pages, not through the page cache")
	flag.Parse()
	if *direct {
		openFlags = fuse.FOPEN_DIRECT_IO
	}
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: nullfs [-writeback] [-directio] [-maxwrite BYTES] [-copy] MOUNTPOINT")
		os.Exit(2)
	}
	opts := &gofs.Options{MountOptions: fuse.MountOptions{
		MaxWrite: *maxWrite, MaxReadAhead: *maxWrite, DirectMountStrict: os.Geteuid() == 0, Name: "nullfs",
	}}
	if *writeback {
		opts.ExtraCapabilities = fuse.CAP_WRITEBACK_CACHE
	}
	srv, err := gofs.Mount(flag.Arg(0), &root{}, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullfs:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; srv.Unmount() }()
	srv.Wait()
}
