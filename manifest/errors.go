package manifest

import "errors"

// Errors of name and inode operations. Callers wrap them with the path.
var (
	// ErrNotFound: no such name, inode, manifest or chunk.
	ErrNotFound = errors.New("not found")
	// ErrExists: the name is taken.
	ErrExists = errors.New("already exists")
	// ErrNotDir: a path component is not a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a file operation met a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a directory to remove or replace has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrParams: the store was created with parameters this build cannot use.
	ErrParams = errors.New("incompatible store parameters")
	// ErrBadInode: an inode record cannot be decoded (a damaged index), or
	// an inode cannot be encoded (a field out of bounds).
	ErrBadInode = errors.New("bad inode record")
	// ErrInUse: another process (a mount, most often) holds the store's
	// lock.
	ErrInUse = errors.New("store is in use by another process")
)
