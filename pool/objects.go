package pool

import (
	"context"
	"errors"
	"io"
	"time"
)

// Objects is what the pool needs of an object store: immutable objects,
// written whole, read by range, listed with their age. S3 is the one
// implementation (s3.go); the interface is here, where it is used.
type Objects interface {
	// Put stores an object of size bytes read from r. Objects are named
	// by their content's hash, so a second Put of a name writes the same
	// bytes again.
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	// ReadRange reads n bytes at off of an object. A missing object is
	// ErrNoObject.
	ReadRange(ctx context.Context, name string, off, n int64) ([]byte, error)
	// Stat reports whether an object exists (ErrNoObject when not).
	Stat(ctx context.Context, name string) (ObjectInfo, error)
	// Delete removes an object; a missing one is no error.
	Delete(ctx context.Context, name string) error
	// List calls fn for every object whose name starts with prefix.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Name     string
	Size     int64
	Modified time.Time
}

// ErrNoObject is the error of an object that is not in the store.
var ErrNoObject = errors.New("no such object")
