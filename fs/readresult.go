package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// go-fuse moves a read reply's bytes after the Read handler has returned
// (splicing from a file or a pipe), and calls the result's Done once the
// reply is sent. whenDone wraps a result so that done runs then: what the
// reply reads from (a pinned file version) must live until that moment.
// go-fuse finds the splice sources by interface, so the wrapper keeps them.

// seekableResult and statefulResult are go-fuse's interfaces for replies
// spliced from a file descriptor at an offset, and from a pipe.
type seekableResult interface {
	Seekable() (fd uintptr, off int64, sz int)
}

type statefulResult interface {
	Stateful() (fd uintptr, sz int)
}

type doneResult struct {
	fuse.ReadResult
	done func()
}

func (r *doneResult) Done() {
	r.ReadResult.Done()
	r.done()
}

type doneSeekable struct {
	doneResult
	s seekableResult
}

func (r *doneSeekable) Seekable() (uintptr, int64, int) { return r.s.Seekable() }

type doneStateful struct {
	doneResult
	s statefulResult
}

func (r *doneStateful) Stateful() (uintptr, int) { return r.s.Stateful() }

// whenDone returns res with done run after the reply is sent. Bytes that
// were copied already need nothing kept: done runs at once.
func whenDone(res fuse.ReadResult, done func()) fuse.ReadResult {
	switch s := res.(type) {
	case seekableResult:
		return &doneSeekable{doneResult{res, done}, s}
	case statefulResult:
		return &doneStateful{doneResult{res, done}, s}
	}
	done()
	return res
}
