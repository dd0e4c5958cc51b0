package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/kvfs/kvfs/manifest"
)

// TestBlobRenamedWhileCommitting: an engine block written as
// blocks/t.tmp with content A (committed), then rewritten with B, and
// renamed to blocks/<sha256(A)> while B is being committed. The rename is
// right (the committed content is A); the commit must then fail, since its
// name no longer matches its content, and the name must keep A. Before, the
// commit checked the name the file had when the ingest began, and stored B
// under A's hash.
func TestBlobRenamedWhileCommitting(t *testing.T) {
	s, _ := newTestStore(t)
	ns, err := s.MkdirAt(manifest.RootIno, "ns", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := s.MkdirAt(ns.Ino, "blocks", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := randContent(300_000, 1), randContent(300_000, 2)
	sum := sha256.Sum256(a)
	hash := hex.EncodeToString(sum[:])
	fi, err := s.CreateAt(blocks.Ino, "t.tmp", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err = commitBytes(t, s, fi.Ino, a)
	if err != nil {
		t.Fatal(err)
	}
	s.beforeCommit = func() {
		s.beforeCommit = nil
		if err := s.RenameAt(blocks.Ino, "t.tmp", blocks.Ino, hash, false); err != nil {
			t.Errorf("rename to the committed content's hash: %v", err)
		}
	}
	if _, err := commitBytes(t, s, fi.Ino, b); !errors.Is(err, ErrBlobMismatch) {
		t.Fatalf("commit of other content under a blob name: %v, want ErrBlobMismatch", err)
	}
	if got := readAll(t, s, "ns/blocks/"+hash); !bytes.Equal(got, a) {
		t.Fatalf("blocks/%s holds %d bytes that are not its content", hash, len(got))
	}
}
