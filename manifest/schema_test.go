package manifest

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// schemaOf reads the index's schema version straight from bbolt.
func schemaOf(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var v uint64
	b.View(func(tx *bolt.Tx) error {
		v = getU64(tx.Bucket(bucketMeta), keyVersion)
		return nil
	})
	return v
}

// TestSchemaVersionMarksJournal: a new index has the plain schema, which
// kvfs before the journal reads; marking it journaled raises the version,
// so that such a kvfs refuses it instead of opening it without its
// journal's records. This kvfs opens both, and refuses a later version,
// naming the versions.
func TestSchemaVersionMarksJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvfs.db")
	db, err := Open(path, true, Params{ChunkSize: 4096}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if v := schemaOf(t, path); v != schemaPlain {
		t.Fatalf("new index: schema %d, want %d", v, schemaPlain)
	}
	db, err = Open(path, false, Params{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error { return tx.SetJournaled() }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if v := schemaOf(t, path); v != SchemaVersion || v == schemaPlain {
		t.Fatalf("journaled index: schema %d, want %d", v, SchemaVersion)
	}
	db, err = Open(path, false, Params{}, time.Second)
	if err != nil {
		t.Fatalf("reopen a journaled index: %v", err)
	}
	db.Close()

	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error { return putU64(tx.Bucket(bucketMeta), keyVersion, SchemaVersion+1) })
	b.Close()
	_, err = Open(path, false, Params{}, time.Second)
	if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "schema version 3") {
		t.Fatalf("open of a later schema: %v", err)
	}
}
