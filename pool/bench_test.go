package pool_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

// benchBytes is the file size of the pool benchmarks: KVFS_POOL_BENCH_BYTES,
// or 256 MiB.
func benchBytes(b *testing.B) int {
	if v := os.Getenv("KVFS_POOL_BENCH_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("KVFS_POOL_BENCH_BYTES=%q", v)
		}
		return n
	}
	return 256 << 20
}

// BenchmarkPool measures, on one pair of local servers, against
// baselines in the same run:
//
//   - publish: a new file published to the pool (1 MiB chunks, 32 MiB
//     packs), vs put-object: the same bytes PUT as one object with
//     minio-go;
//   - cold-read: the file read whole on another host with an empty cache,
//     vs ranged-get: one ranged GET of the same bytes;
//   - warm-read: read again from that host's cache, vs store-read: the
//     same bytes read from a single-host store.
//
// docs/BENCHMARKS.md has the ratios and the command.
func BenchmarkPool(b *testing.B) {
	s := startServices(b)
	size := benchBytes(b)
	cfg := s.config(b, "")
	cfg.ChunkSize, cfg.PackBytes, cfg.CacheBytes = 1<<20, 32<<20, int64(size)*2
	a := s.host(b, cfg)
	cfgB := cfg
	cfgB.CacheDir = b.TempDir()
	mc, err := minio.New(s.env["KVFS_ENDPOINT"][len("http://"):], &minio.Options{
		Creds: credentials.NewStaticV4(s.env["AWS_ACCESS_KEY_ID"], s.env["AWS_SECRET_ACCESS_KEY"], ""), BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		b.Fatal(err)
	}
	seed := uint64(0)
	fresh := func() []byte { seed++; return randBytes(size, seed) }

	b.Run("publish", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			data := fresh()
			b.StartTimer()
			if err := a.Publish(ctx, "bench/publish-"+strconv.Itoa(i), bytes.NewReader(data), int64(size)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put-object", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			data := fresh()
			b.StartTimer()
			if _, err := mc.PutObject(ctx, "kvfs", "other/put-"+strconv.Itoa(i), bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})

	data := fresh()
	if err := a.Publish(ctx, "bench/read", bytes.NewReader(data), int64(size)); err != nil {
		b.Fatal(err)
	}
	if _, err := mc.PutObject(ctx, "kvfs", "other/read", bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	readFile := func(b *testing.B, host *pool.Pool) {
		f, err := host.Open(ctx, "bench/read")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(discard{}, io.NewSectionReader(f, 0, f.Size()), buf); err != nil || n != int64(size) {
			b.Fatal(n, err)
		}
	}
	b.Run("cold-read", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			c := cfgB
			c.CacheDir = b.TempDir()
			h, err := pool.Open(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			readFile(b, h)
			b.StopTimer()
			h.Close()
			b.StartTimer()
		}
	})
	b.Run("ranged-get", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			var opts minio.GetObjectOptions
			opts.SetRange(0, int64(size)-1)
			obj, err := mc.GetObject(ctx, "kvfs", "other/read", opts)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(discard{}, obj, buf); err != nil || n != int64(size) {
				b.Fatal(n, err)
			}
			obj.Close()
		}
	})
	warm := s.host(b, cfgB)
	readFile(b, warm)
	b.Run("warm-read", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			readFile(b, warm)
		}
	})
	dir := filepath.Join(b.TempDir(), "store")
	if err := store.Init(dir, store.DefaultChunkSize); err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, _, err := st.Put(ctx, bytes.NewReader(data), int64(size), "read", store.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Run("store-read", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			f, err := st.Open("read")
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(discard{}, io.NewSectionReader(f, 0, f.Size()), buf); err != nil || n != int64(size) {
				b.Fatal(n, err)
			}
			f.Close()
		}
	})
}

// discard is io.Discard without its ReadFrom, so that io.CopyBuffer reads
// with the benchmark's buffer (4 MiB), as an engine's reads would, not
// 8 KiB at a time.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
