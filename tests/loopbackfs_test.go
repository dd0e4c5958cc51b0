//go:build linux

package tests

import (
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// serveLoopbackFS mounts go-fuse's loopback file system of directory
// args[0] at args[1], with kvfs's mount options (request size, timeouts,
// default_permissions, kill-priv), and serves until SIGTERM. It is the
// FUSE floor of the write table (KVFS_BENCH_FLOOR=loopback): what any
// go-fuse file system pays on this machine for the same requests, with a
// daemon that does nothing but pass them to the disk. Its fsync is the
// backing file's, so its durable rows are durable. Kernel passthrough
// (which go-fuse's loopback asks for, and which sends reads and writes
// to the backing file without the daemon) is off: kvfs's writes reach its
// daemon, and the floor is of the same requests.
func serveLoopbackFS(args []string) error {
	root, err := gofs.NewLoopbackRoot(args[0])
	if err != nil {
		return err
	}
	timeout := time.Hour
	srv, err := gofs.Mount(args[1], root, &gofs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DirectMountStrict: true, FsName: args[0], Name: "loopback",
			Options:              []string{"default_permissions"},
			ExtraCapabilities:    fuse.CAP_HANDLE_KILLPRIV_V2,
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
	})
	if err != nil {
		return err
	}
	return serveUntilSignal(srv, args[1])
}
