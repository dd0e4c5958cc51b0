package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is an S3-compatible object store: one bucket, objects under a
// prefix. Its methods are safe for concurrent use.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string // "" or ending in "/"
}

// S3Config says where a pool's objects are.
type S3Config struct {
	// Pool is s3://BUCKET/PREFIX.
	Pool string
	// Endpoint is the server's URL, http://HOST:PORT or https://HOST:PORT.
	Endpoint string
	// AccessKey and SecretKey are the credentials.
	AccessKey, SecretKey string
}

// ParsePool splits s3://BUCKET/PREFIX into its bucket and prefix.
func ParsePool(pool string) (bucket, prefix string, err error) {
	u, err := url.Parse(pool)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("pool %q: want s3://BUCKET/PREFIX", pool)
	}
	prefix = strings.Trim(u.Path, "/")
	// '#' ends the prefix in etcd's keys (coord.go), so that no pool's
	// keys lie inside another's.
	if strings.ContainsAny(prefix, "#\x00") {
		return "", "", fmt.Errorf("pool %q: the prefix may not contain '#' or NUL", pool)
	}
	if prefix != "" {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// OpenS3 connects to the pool's bucket, which must exist.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	bucket, prefix, err := ParsePool(cfg.Pool)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("S3 endpoint %q: want http://HOST:PORT or https://HOST:PORT", cfg.Endpoint)
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("S3 endpoint %s: no credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or --credentials FILE)", cfg.Endpoint)
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       u.Scheme == "https",
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
	})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: %w", cfg.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: bucket %s: %w", cfg.Endpoint, bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 endpoint %s: bucket %s does not exist; create it first", cfg.Endpoint, bucket)
	}
	return &S3{client: c, bucket: bucket, prefix: prefix}, nil
}

func (s *S3) key(name string) string { return s.prefix + name }

// Ping asks the server whether the bucket exists: any answer but an
// error means that it answers.
func (s *S3) Ping(ctx context.Context) error {
	if _, err := s.client.BucketExists(ctx, s.bucket); err != nil {
		return fmt.Errorf("head s3://%s: %w", s.bucket, err)
	}
	return nil
}

// Put implements Objects.
func (s *S3) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.key(name), r, size, minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: size <= 512<<20,
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, s.key(name), err)
	}
	return nil
}

// ReadRange implements Objects.
func (s *S3) ReadRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.key(name), opts)
	if err != nil {
		return nil, s.err("get", name, err)
	}
	defer obj.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(obj, b); err != nil {
		return nil, s.err("get", name, err)
	}
	return b, nil
}

// Stat implements Objects.
func (s *S3) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	fi, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.err("stat", name, err)
	}
	return ObjectInfo{Name: name, Size: fi.Size, Modified: fi.LastModified}, nil
}

// Delete implements Objects.
func (s *S3) Delete(ctx context.Context, name string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{}); err != nil {
		if err := s.err("delete", name, err); !errors.Is(err, ErrNoObject) {
			return err
		}
	}
	return nil
}

// List implements Objects.
func (s *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", s.bucket, s.key(prefix), o.Err)
		}
		if err := fn(ObjectInfo{Name: strings.TrimPrefix(o.Key, s.prefix), Size: o.Size, Modified: o.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// err wraps an S3 error with the operation and the object, as
// ErrNoObject where the server says the object is missing.
func (s *S3) err(op, name string, err error) error {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("%s s3://%s/%s: %w", op, s.bucket, s.key(name), ErrNoObject)
	}
	return fmt.Errorf("%s s3://%s/%s: %w", op, s.bucket, s.key(name), err)
}
