module github.com/kvfs/kvfs

go 1.26

require (
	github.com/spf13/pflag v1.0.10
	github.com/zeebo/blake3 v0.2.4
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.29.0
)

require (
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	github.com/klauspost/cpuid/v2 v2.0.12 // indirect
)
