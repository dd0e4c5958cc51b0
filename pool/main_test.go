package pool_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/pool"
)

// TestMain runs the publisher child of TestKillMidPublish when the
// environment asks for it, and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("KVFS_POOL_CHILD") != "" {
		os.Exit(publisherChild())
	}
	os.Exit(m.Run())
}

// publisherChild publishes files named KVFS_POOL_CHILD/<i> into the pool
// the environment names, for ever, printing "published NAME SEED SIZE"
// after each one succeeds; its parent kills it at a random moment.
func publisherChild() int {
	cfg := pool.Config{
		S3: pool.S3Config{
			Pool: os.Getenv("KVFS_POOL"), Endpoint: os.Getenv("KVFS_ENDPOINT"),
			AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		},
		Etcd:      strings.Split(os.Getenv("KVFS_ETCD"), ","),
		ChunkSize: 64 << 10,
		PackBytes: 256 << 10,
		LeaseTTL:  2 * time.Second,
		OpTimeout: 5 * time.Second,
	}
	ctx := context.Background()
	p, err := pool.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	prefix := os.Getenv("KVFS_POOL_CHILD")
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for i := 0; ; i++ {
		seed := r.Uint64()
		b := childFile(seed)
		name := fmt.Sprintf("%s/%d", prefix, i)
		if err := p.Publish(ctx, name, bytes.NewReader(b), int64(len(b))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("published %s %d\n", name, seed)
	}
}

// childFile is the file a child publishes for seed: for an odd seed,
// shared chunks (the same for every seed) and new ones, of an unaligned
// length; for an even one, a snapshot of a prefix of one conversation, so
// that publishes find parents (published by killed processes too) and cut
// their rows where the parents' chunks end.
func childFile(seed uint64) []byte {
	if seed%2 == 0 {
		b, err := childModel.Bytes(childTokens[:100+seed%uint64(len(childTokens)-100)])
		if err != nil {
			panic(err)
		}
		return b
	}
	b := randBytes(4*64<<10, 1234)
	return append(b, randBytes(int(seed%(900<<10))+1, seed)...)
}

// The conversation of childFile's snapshots.
var (
	childModel  = snapgen.Model{ID: "test/kill", Layers: 2, KVHeads: 2, HeadDim: 64, DType: snapgen.Tiny.DType}
	childTokens = snapgen.Tokens(3000, 77)
)
