//go:build linux

package tests

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// memRoot is a directory with one in-memory file.
type memRoot struct {
	gofs.Inode
	data []byte
}

func (r *memRoot) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, &gofs.MemRegularFile{Data: r.data, Attr: fuse.Attr{Mode: 0o444}}, gofs.StableAttr{})
	r.AddChild("file", ch, false)
}

func serveMemFS(args []string) error {
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	srv, err := gofs.Mount(args[1], &memRoot{data: data}, &gofs.Options{
		MountOptions: fuse.MountOptions{
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DirectMountStrict: true, FsName: "memfs", Name: "memfs",
		},
	})
	if err != nil {
		return err
	}
	return serveUntilSignal(srv, args[1])
}

// serveUntilSignal waits for srv to be mounted at mnt, sets the mount's
// readahead to kvfs's, prints "ready" and serves until SIGTERM or SIGINT
// unmounts it.
func serveUntilSignal(srv *fuse.Server, mnt string) error {
	if err := srv.WaitMount(); err != nil {
		return err
	}
	setReadaheadKB(mnt, 1024)
	fmt.Println("ready")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; srv.Unmount() }()
	srv.Wait()
	return nil
}

func setReadaheadKB(mnt string, kb int) {
	var st syscall.Stat_t
	if syscall.Stat(mnt, &st) != nil {
		return
	}
	major, minor := (st.Dev>>8)&0xfff, (st.Dev&0xff)|((st.Dev>>12)&0xfff00)
	os.WriteFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor), []byte(fmt.Sprint(kb)), 0o644)
}
