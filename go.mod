module github.com/kvfs/kvfs

go 1.26.0

require (
	github.com/google/btree v1.1.3
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0
	github.com/spf13/pflag v1.0.10
	github.com/zeebo/blake3 v0.2.4
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.48.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/cpuid/v2 v2.0.12 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
