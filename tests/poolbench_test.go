//go:build linux

package tests

import (
	"context"
	crand "crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// BenchmarkPoolMount measures the pool through kvfs mount --pool (issue
// 14), each row against a baseline in the same run, with a 1 GiB file
// (KVFS_POOL_BENCH_BYTES sets another size):
//
//   - publish: cp of a new file into mount A (published at its close), vs
//     put-object: the same file PUT as one object with minio-go;
//   - cold-read: the file read whole through mount B, mounted anew with an
//     empty chunk cache and the page cache dropped, vs ranged-get: one
//     ranged GET of the same bytes with minio-go;
//   - warm-read: read again through B with the page cache dropped (from
//     B's chunk cache), vs store-read: the same bytes read through a
//     single-host kvfs mount with the page cache dropped.
//
// Reads go through a 4 MiB buffer, as an engine's would. docs/BENCHMARKS.md
// has the ratios and the command.
func BenchmarkPoolMount(b *testing.B) {
	requireRoot(b)
	size := int64(1 << 30)
	if v := os.Getenv("KVFS_POOL_BENCH_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("KVFS_POOL_BENCH_BYTES=%q", v)
		}
		size = n
	}
	env, _ := poolServices(b)
	get := func(k string) string {
		if v := envValue(env, k); v != "" {
			return v
		}
		b.Fatalf("no %s", k)
		return ""
	}
	mc, err := minio.New(strings.TrimPrefix(get("KVFS_ENDPOINT"), "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"), ""), BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cacheSize := strconv.FormatInt(3*size, 10)
	a := poolMount(b, env, "a", "--cache-size", cacheSize)
	src := filepath.Join(b.TempDir(), "src")
	fresh := func() {
		f, err := os.Create(src)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyN(f, crand.Reader, size); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 4<<20)
	readAll := func(b *testing.B, path string) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if n, err := io.CopyBuffer(discardW{}, f, buf); err != nil || n != size {
			b.Fatalf("read %s: %d bytes, %v", path, n, err)
		}
	}

	b.Run("publish", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			fresh()
			dropCaches(b)
			b.StartTimer()
			sh(b, "cp "+src+" "+filepath.Join(a, "pub-"+strconv.Itoa(i)))
		}
	})
	b.Run("put-object", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			fresh()
			dropCaches(b)
			b.StartTimer()
			if _, err := mc.FPutObject(ctx, "kvfs", "other/put-"+strconv.Itoa(i), src, minio.PutObjectOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})

	fresh()
	sh(b, "cp "+src+" "+filepath.Join(a, "read"))
	if _, err := mc.FPutObject(ctx, "kvfs", "other/read", src, minio.PutObjectOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Run("cold-read", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			mb := poolMount(b, env, "cold"+strconv.Itoa(i), "--cache-size", cacheSize)
			dropCaches(b)
			b.StartTimer()
			readAll(b, filepath.Join(mb, "read"))
		}
	})
	b.Run("ranged-get", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			var opts minio.GetObjectOptions
			opts.SetRange(0, size-1)
			obj, err := mc.GetObject(ctx, "kvfs", "other/read", opts)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(discardW{}, obj, buf); err != nil || n != size {
				b.Fatal(n, err)
			}
			obj.Close()
		}
	})
	warm := poolMount(b, env, "warm", "--cache-size", cacheSize)
	readAll(b, filepath.Join(warm, "read"))
	b.Run("warm-read", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dropCaches(b)
			b.StartTimer()
			readAll(b, filepath.Join(warm, "read"))
		}
	})
	m := newMount(b)
	sh(b, "cp "+src+" "+m.path("read"))
	b.Run("store-read", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dropCaches(b)
			b.StartTimer()
			readAll(b, m.path("read"))
		}
	})
}

// discardW is io.Discard without its ReadFrom, so that io.CopyBuffer
// reads with the benchmark's buffer.
type discardW struct{}

func (discardW) Write(p []byte) (int, error) { return len(p), nil }
