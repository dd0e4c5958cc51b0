package manifest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	bolt "go.etcd.io/bbolt"
)

// Bucket names. Keys are big-endian integers, so cursors walk them in
// numeric order.
var (
	bucketMeta      = []byte("meta")      // parameter name → value
	bucketInodes    = []byte("inodes")    // ino → Inode (binary, see inode.go; JSON in older stores)
	bucketDirents   = []byte("dirents")   // parent ino ‖ name → child ino
	bucketManifests = []byte("manifests") // ino → Manifest (binary)
	bucketChunks    = []byte("chunks")    // chunk ID → Chunk
	bucketBlobs     = []byte("blobs")     // sha256 ‖ ino → nothing
	bucketSnaps     = []byte("snaps")     // layout key ‖ ino → tokens (u32 LE)
	bucketOrphans   = []byte("orphans")   // ino → nothing
	bucketPacks     = []byte("packs")     // pack → Pack
	bucketBlobRecs  = []byte("blobrecs")  // sha256 → BlobRecord (JSON)
	bucketBlobData  = []byte("blobdata")  // sha256 → Manifest of the blob's content
	bucketPins      = []byte("pins")      // ino → sha256s (32 bytes each) a format-5 manifest lists
	bucketXattrs    = []byte("xattrs")    // ino ‖ name → value (see xattr.go)
	bucketPrefix    = []byte("prefix")    // chain key ‖ ino → group count (u32 BE); prefix.go
	bucketPrefixIno = []byte("prefixino") // ino → its prefix record; prefix.go
	allBuckets      = [][]byte{bucketMeta, bucketInodes, bucketDirents, bucketManifests, bucketChunks, bucketBlobs, bucketSnaps, bucketOrphans, bucketPacks, bucketBlobRecs, bucketBlobData, bucketPins, bucketXattrs, bucketPrefix, bucketPrefixIno}

	keyVersion   = []byte("version")
	keyChunkSize = []byte("chunkSize")
	keyNextIno   = []byte("nextIno")
	keyNextPack  = []byte("nextPack")
)

// SchemaVersion is the version of this bucket layout that an index gets
// once it is written through the journal (SetJournaled): versions of kvfs
// before the journal read only schemaPlain, and so refuse such an index
// rather than open it without the records after its last checkpoint.
const SchemaVersion = 2

// schemaPlain is the bucket layout without the journal: new indexes start
// at it, and it is what kvfs before the journal wrote.
const schemaPlain = 1

// Params are the store's parameters, fixed at creation.
type Params struct {
	ChunkSize int64
}

// DB is the open index.
type DB struct {
	bolt *bolt.DB
	path string

	// file is a second descriptor of the index file, for allocate; bbolt
	// keeps its own (and its lock: flock belongs to bbolt's descriptor).
	file *os.File
	// allocMu guards allocated, the file size whose space allocate last
	// secured.
	allocMu   sync.Mutex
	allocated int64

	// j is the state of journal mode (journal.go); nil in plain mode,
	// where every Update is a synced bbolt transaction.
	j *journal

	watch watch // the change feed (changes.go)
}

// Open opens the index at path. With create, a missing index is created with
// params; otherwise a missing index is an error. bbolt's file lock makes the
// opener the only process using the store; a second opener fails after
// timeout. WithJournal opens it in journal mode.
func Open(path string, create bool, params Params, timeout time.Duration, options ...Option) (*DB, error) {
	var oo openOptions
	for _, o := range options {
		o(&oo)
	}
	opts := &bolt.Options{Timeout: timeout, NoFreelistSync: false}
	if !create {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open index %s: %w", path, err)
		}
	}
	b, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open index %s: %w", path, ErrInUse)
		}
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	db := &DB{bolt: b, path: path}
	if db.file, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
		b.Close()
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	// Opening an index with all its buckets writes nothing: on a full
	// disk, a write can fail, and the store must still open.
	run := b.View
	if create || missingBuckets(b) {
		run = b.Update
	}
	err = run(func(tx *bolt.Tx) error {
		fresh := tx.Bucket(bucketMeta) == nil
		for _, name := range allBuckets {
			if !tx.Writable() {
				break
			}
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if fresh {
			if !create {
				return errors.New("not a kvfs index")
			}
			if params.ChunkSize <= 0 {
				return fmt.Errorf("chunk size %d", params.ChunkSize)
			}
			putU64(meta, keyVersion, schemaPlain)
			putU64(meta, keyChunkSize, uint64(params.ChunkSize))
			putU64(meta, keyNextIno, RootIno+1)
			putU64(meta, keyNextPack, 1)
			if err := meta.Put(keyPrefixIndexed, []byte{1}); err != nil {
				return err
			}
			now := time.Now().UnixNano()
			root := &Inode{Ino: RootIno, Mode: fs.ModeDir | 0o755, Mtime: now, Ctime: now}
			return (&Tx{tx: tx}).PutInode(root)
		}
		if v := getU64(meta, keyVersion); v != schemaPlain && v != SchemaVersion {
			return fmt.Errorf("%w: schema version %d, this kvfs reads %d and %d", ErrParams, v, schemaPlain, SchemaVersion)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	db.allocate()
	if oo.journal != nil {
		if err := db.openJournal(*oo.journal); err != nil {
			db.closeBolt()
			return nil, fmt.Errorf("open index %s: %w", path, err)
		}
	}
	return db, nil
}

// missingBuckets reports whether the index lacks one of this version's
// buckets.
func missingBuckets(b *bolt.DB) bool {
	missing := false
	b.View(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			missing = missing || tx.Bucket(name) == nil
		}
		return nil
	})
	return missing
}

// Path is the index file's path.
func (db *DB) Path() string { return db.path }

// Close closes the index; in journal mode, it first checkpoints the
// overlay, so that a clean close leaves nothing to replay.
func (db *DB) Close() error { return db.CloseWith(nil) }

// CloseWith is Close, calling last (if set) with the checkpoint's error
// once the index is closed to transactions but before bbolt lets go of its
// file lock: what last does to the store is done before another process
// can open it.
func (db *DB) CloseWith(last func(err error) error) error {
	var err error
	if db.j != nil {
		err = db.closeJournal()
	}
	if last != nil {
		err = last(err)
	}
	if cerr := db.closeBolt(); err == nil {
		err = cerr
	}
	return err
}

func (db *DB) closeBolt() error {
	err := db.bolt.Close()
	db.file.Close()
	return err
}

// Update runs fn in a read-write transaction, committed if fn returns nil:
// synced in plain mode; in journal mode, appended to the journal, durable
// with the next Sync (UpdateSeq, UpdateSync).
func (db *DB) Update(fn func(*Tx) error) error {
	seq, err := db.UpdateSeq(fn)
	if err == nil && db.j != nil {
		if w, ok := db.j.opts.Log.(Writer); ok {
			if err := w.Write(seq); err != nil {
				return fmt.Errorf("index %s: journal write: %w", db.path, err)
			}
		}
	}
	return err
}

// Writer is a Log that can tell when a record has reached its file
// without a sync (journal.Journal.Write): Update waits for that, after
// the transaction (outside the writer lock, since it may wait for a sync
// in progress), so that an Update that returned survives a crash of the
// process, if not of the machine.
type Writer interface {
	Write(seq uint64) error
}

// allocate gives the index file's space to it for real. bbolt grows its
// file with truncate, which allocates nothing, in steps (doubling up to
// 16 MiB, then 16 MiB at a time), and later writes pages into that
// region; on a full disk those writes fail, and with them every
// transaction — a removal's too, so that no space could ever be freed.
// With the grown size allocated at once, transactions write into space
// that the index already has, and only the growth itself can meet a full
// disk. It runs after every write transaction, and costs an fstat unless
// the file grew. It allocates only when the filesystem has room for all
// the holes: on a nearly full disk, a partial allocation (ext4 keeps one)
// would take the last bytes from the writes for pages that the index may
// never need; the store's reserve covers removals then. What is not done
// is left for a later call; without fallocate it does nothing.
func (db *DB) allocate() {
	db.allocMu.Lock()
	defer db.allocMu.Unlock()
	fi, err := db.file.Stat()
	if err != nil || fi.Size() <= db.allocated {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		missing := fi.Size() - int64(st.Blocks)*512
		var fs syscall.Statfs_t
		if missing > 0 && (syscall.Statfs(db.path, &fs) != nil || int64(fs.Bavail)*int64(fs.Bsize) < missing) {
			return
		}
	}
	err = blockstore.Allocate(db.file, 0, fi.Size())
	if err == nil || errors.Is(err, errors.ErrUnsupported) {
		db.allocated = fi.Size()
	}
}

// View runs fn in a read-only transaction: a consistent snapshot of the
// index (in journal mode, of the overlay version and bbolt together).
func (db *DB) View(fn func(*Tx) error) error {
	if db.j == nil {
		return db.bolt.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
	}
	tx, v, err := db.snapshot()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(&Tx{tx: tx, j: &jtx{v: v}})
}

// Tx is a transaction on the index.
type Tx struct {
	// tx is the bbolt transaction: the transaction itself in plain mode,
	// the read transaction under the overlay in journal mode.
	tx *bolt.Tx
	j  *jtx     // nil in plain mode
	ch *Changes // what it changed, for the change feed (changes.go); nil if none
	// bbs are bbolt's buckets, by bucketIndex, as opened: a bucket is
	// found from the root on each Bucket call, which was a third of a
	// chunk lookup's time (a commit of 260,000 chunks looks each up).
	bbs [numBuckets]*bolt.Bucket
}

// Params returns the store's parameters.
func (t *Tx) Params() Params {
	return Params{ChunkSize: int64(getU64(t.b(bucketMeta), keyChunkSize))}
}

func u64key(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// kv is what putU64 and getU64 need of a bucket: bbolt's or the
// package's (bucket).
type kv interface {
	Get(k []byte) []byte
	Put(k, v []byte) error
}

func putU64(b kv, k []byte, v uint64) error { return b.Put(k, u64key(v)) }

func getU64(b kv, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// NextIno allocates an inode number.
func (t *Tx) NextIno() (uint64, error) {
	m := t.b(bucketMeta)
	n := getU64(m, keyNextIno)
	return n, putU64(m, keyNextIno, n+1)
}

// NextPack allocates a pack number.
func (t *Tx) NextPack() (uint32, error) {
	m := t.b(bucketMeta)
	n := getU64(m, keyNextPack)
	return uint32(n), putU64(m, keyNextPack, n+1)
}

// Inode returns an inode, or ErrNotFound.
func (t *Tx) Inode(ino uint64) (*Inode, error) {
	v := t.b(bucketInodes).Get(u64key(ino))
	if v == nil {
		return nil, fmt.Errorf("inode %d: %w", ino, ErrNotFound)
	}
	n, err := unmarshalInode(ino, v)
	if err == nil && v[0] == '{' && n.Parent != 0 && strings.Contains(n.Name, "\uFFFD") {
		n.Name = t.entryName(n)
	}
	return n, err
}

// entryName recovers the name of a legacy (JSON) inode record whose name
// lost its invalid UTF-8 bytes to U+FFFD: the directory entry, a bbolt key,
// kept the bytes. The inode's own name stays if no entry of its directory
// leads to it.
func (t *Tx) entryName(n *Inode) string {
	prefix := u64key(n.Parent)
	want := u64key(n.Ino)
	c := t.b(bucketDirents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if bytes.Equal(v, want) {
			return string(k[len(prefix):])
		}
	}
	return n.Name
}

// PutInode stores an inode's attributes.
func (t *Tx) PutInode(n *Inode) error {
	v, err := marshalInode(n)
	if err != nil {
		return err
	}
	return t.b(bucketInodes).Put(u64key(n.Ino), v)
}

// DeleteInode removes an inode with its manifest, extended attributes and
// index entries. It does
// not release the manifest's chunks; ReleaseManifest does.
func (t *Tx) DeleteInode(n *Inode) error {
	if err := t.b(bucketInodes).Delete(u64key(n.Ino)); err != nil {
		return err
	}
	if err := t.b(bucketManifests).Delete(u64key(n.Ino)); err != nil {
		return err
	}
	if n.Blob != "" {
		if err := t.b(bucketBlobs).Delete(blobKey(n.Blob, n.Ino)); err != nil {
			return err
		}
	}
	if n.Layout != "" {
		if err := t.b(bucketSnaps).Delete(snapKey(n.Layout, n.Ino)); err != nil {
			return err
		}
		if err := t.RemovePrefix(n.Ino); err != nil {
			return err
		}
	}
	if err := t.DeleteXattrs(n.Ino); err != nil {
		return err
	}
	return t.b(bucketOrphans).Delete(u64key(n.Ino))
}

func direntKey(parent uint64, name string) []byte {
	return append(u64key(parent), name...)
}

// Lookup returns the inode number of name in directory parent.
func (t *Tx) Lookup(parent uint64, name string) (uint64, error) {
	v := t.b(bucketDirents).Get(direntKey(parent, name))
	if v == nil {
		return 0, ErrNotFound
	}
	return binary.BigEndian.Uint64(v), nil
}

// Link sets name in parent to ino, replacing any previous entry.
func (t *Tx) Link(parent uint64, name string, ino uint64) error {
	return t.b(bucketDirents).Put(direntKey(parent, name), u64key(ino))
}

// Unlink removes name from parent.
func (t *Tx) Unlink(parent uint64, name string) error {
	return t.b(bucketDirents).Delete(direntKey(parent, name))
}

// Dirent is one directory entry.
type Dirent struct {
	Name string
	Ino  uint64
}

// ReadDir lists a directory in name order.
func (t *Tx) ReadDir(parent uint64) ([]Dirent, error) {
	var out []Dirent
	prefix := u64key(parent)
	c := t.b(bucketDirents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		out = append(out, Dirent{Name: string(k[8:]), Ino: binary.BigEndian.Uint64(v)})
	}
	return out, nil
}

// Empty reports whether a directory has no entries.
func (t *Tx) Empty(dir uint64) bool {
	prefix := u64key(dir)
	k, _ := t.b(bucketDirents).Cursor().Seek(prefix)
	return k == nil || !bytes.HasPrefix(k, prefix)
}

// Manifest returns a file's manifest.
func (t *Tx) Manifest(ino uint64) (Manifest, error) {
	v := t.b(bucketManifests).Get(u64key(ino))
	if v == nil {
		return nil, fmt.Errorf("manifest of inode %d: %w", ino, ErrNotFound)
	}
	var m Manifest
	if err := m.UnmarshalBinary(v); err != nil {
		return nil, fmt.Errorf("manifest of inode %d: %w", ino, err)
	}
	return m, nil
}

// PutManifest stores a file's manifest. It does not change refcounts.
func (t *Tx) PutManifest(ino uint64, m Manifest) error {
	v, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	return t.b(bucketManifests).Put(u64key(ino), v)
}

// Chunk returns a chunk record, or ErrNotFound.
func (t *Tx) Chunk(id blockstore.ID) (Chunk, error) {
	v := t.b(bucketChunks).Get(id[:])
	if v == nil {
		return Chunk{}, ErrNotFound
	}
	return unmarshalChunk(v)
}

// PutChunk stores a chunk record.
func (t *Tx) PutChunk(id blockstore.ID, c Chunk) error {
	return t.b(bucketChunks).Put(id[:], c.marshal())
}

// ForEachChunk calls fn for every chunk record.
func (t *Tx) ForEachChunk(fn func(id blockstore.ID, c Chunk) error) error {
	return t.b(bucketChunks).ForEach(func(k, v []byte) error {
		c, err := unmarshalChunk(v)
		if err != nil {
			return err
		}
		var id blockstore.ID
		copy(id[:], k)
		return fn(id, c)
	})
}

// Release decrements the refcount of each chunk; a chunk that reaches zero
// is removed from the index, its bytes counted dead in its pack, and
// returned, so that the caller can punch it out once the transaction has
// committed.
func (t *Tx) Release(ids []blockstore.ID) ([]blockstore.Loc, error) {
	var freed []blockstore.Loc
	for _, id := range ids {
		c, err := t.Chunk(id)
		if err != nil {
			return nil, fmt.Errorf("release chunk %s: %w", id, err)
		}
		if c.Refs > 1 {
			c.Refs--
			if err := t.PutChunk(id, c); err != nil {
				return nil, err
			}
			continue
		}
		if err := t.b(bucketChunks).Delete(id[:]); err != nil {
			return nil, err
		}
		p, err := t.Pack(c.Loc.Pack)
		if err != nil {
			return nil, err
		}
		p.Dead += c.Loc.Len
		if err := t.PutPack(c.Loc.Pack, p); err != nil {
			return nil, err
		}
		freed = append(freed, c.Loc)
	}
	return freed, nil
}

// Pack returns a pack's state; an unknown pack has the zero state.
func (t *Tx) Pack(pack uint32) (Pack, error) {
	v := t.b(bucketPacks).Get(binary.BigEndian.AppendUint32(nil, pack))
	if v == nil {
		return Pack{}, nil
	}
	return unmarshalPack(v)
}

// PutPack stores a pack's state.
func (t *Tx) PutPack(pack uint32, p Pack) error {
	return t.b(bucketPacks).Put(binary.BigEndian.AppendUint32(nil, pack), p.marshal())
}

// DeletePack forgets a pack.
func (t *Tx) DeletePack(pack uint32) error {
	return t.b(bucketPacks).Delete(binary.BigEndian.AppendUint32(nil, pack))
}

// Packs returns every pack's state.
func (t *Tx) Packs() (map[uint32]Pack, error) {
	out := map[uint32]Pack{}
	err := t.b(bucketPacks).ForEach(func(k, v []byte) error {
		p, err := unmarshalPack(v)
		if err != nil {
			return err
		}
		out[binary.BigEndian.Uint32(k)] = p
		return nil
	})
	return out, err
}

// ForEachInode calls fn for every inode.
func (t *Tx) ForEachInode(fn func(*Inode) error) error {
	return t.b(bucketInodes).ForEach(func(k, v []byte) error {
		n, err := unmarshalInode(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		return fn(n)
	})
}

// AddOrphan records an inode whose last name is gone while it is open.
func (t *Tx) AddOrphan(ino uint64) error { return t.b(bucketOrphans).Put(u64key(ino), nil) }

// Orphans lists the orphaned inodes.
func (t *Tx) Orphans() ([]uint64, error) {
	var out []uint64
	err := t.b(bucketOrphans).ForEach(func(k, _ []byte) error {
		out = append(out, binary.BigEndian.Uint64(k))
		return nil
	})
	return out, err
}

func blobKey(hash string, ino uint64) []byte { return append([]byte(hash), u64key(ino)...) }

// AddBlob indexes a blob file by its content hash (64 hex digits).
func (t *Tx) AddBlob(hash string, ino uint64) error {
	return t.b(bucketBlobs).Put(blobKey(hash, ino), nil)
}

// Blob returns an inode holding the blob with this hash.
func (t *Tx) Blob(hash string) (uint64, error) {
	k, _ := t.b(bucketBlobs).Cursor().Seek([]byte(hash))
	if k == nil || len(k) != len(hash)+8 || string(k[:len(hash)]) != hash {
		return 0, ErrNotFound
	}
	return binary.BigEndian.Uint64(k[len(hash):]), nil
}

// BlobInodes calls fn with each inode holding the blob with this hash, in
// inode order, until fn returns false.
func (t *Tx) BlobInodes(hash string, fn func(ino uint64) bool) {
	prefix := []byte(hash)
	c := t.b(bucketBlobs).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) == len(hash)+8 && !fn(binary.BigEndian.Uint64(k[len(hash):])) {
			return
		}
	}
}

func snapKey(layout string, ino uint64) []byte { return append([]byte(layout), u64key(ino)...) }

// AddSnapshot indexes a committed snapshot's tokens under its layout key.
func (t *Tx) AddSnapshot(layout string, ino uint64, tokens []uint32) error {
	v := make([]byte, 4*len(tokens))
	for i, tk := range tokens {
		binary.LittleEndian.PutUint32(v[4*i:], tk)
	}
	return t.b(bucketSnaps).Put(snapKey(layout, ino), v)
}

// Snapshots calls fn with each snapshot of a layout key and its tokens.
// tokens is valid only during the call.
func (t *Tx) Snapshots(layout string, fn func(ino uint64, tokens []byte) error) error {
	prefix := []byte(layout)
	c := t.b(bucketSnaps).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != len(prefix)+8 {
			continue
		}
		if err := fn(binary.BigEndian.Uint64(k[len(prefix):]), v); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotsUnder calls fn with each snapshot whose layout key begins with
// prefix, its key and its tokens: the files a file being written may
// share rows with, when only the start of its key is known yet
// (llamastate.Head.KeyPrefix). tokens is valid only during the call.
func (t *Tx) SnapshotsUnder(prefix string, fn func(layout string, ino uint64, tokens []byte) error) error {
	c := t.b(bucketSnaps).Cursor()
	for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
		if len(k) < len(prefix)+8 {
			continue
		}
		if err := fn(string(k[:len(k)-8]), binary.BigEndian.Uint64(k[len(k)-8:]), v); err != nil {
			return err
		}
	}
	return nil
}

// IsOrphan reports whether an inode is an orphan.
func (t *Tx) IsOrphan(ino uint64) bool { return t.b(bucketOrphans).Get(u64key(ino)) != nil }

// Unindex removes an inode from the blob and snapshot indexes, so that no
// lookup finds it any more (an orphan keeps its content for open handles
// only).
func (t *Tx) Unindex(n *Inode) error {
	if n.Blob != "" {
		if err := t.b(bucketBlobs).Delete(blobKey(n.Blob, n.Ino)); err != nil {
			return err
		}
	}
	if n.Layout != "" {
		if err := t.RemovePrefix(n.Ino); err != nil {
			return err
		}
		return t.b(bucketSnaps).Delete(snapKey(n.Layout, n.Ino))
	}
	return nil
}

// BlobRecord keeps a blob's content alive independently of its names: while
// committed format-5 manifests list it (Pins), and for a grace period after
// its last name goes (Grace, in ns since the epoch; 0 while it has names).
type BlobRecord struct {
	Pins       uint32 `json:"pins"`
	Grace      int64  `json:"grace,omitempty"`
	HasContent bool   `json:"hasContent"` // its manifest is in blobdata and holds chunk refs
	// Last is the file that last lost its name while holding the blob:
	// who could read the blob where it was, once no file holds it.
	Last *BlobHolder `json:"last,omitempty"`
}

// BlobHolder is the place and permissions of a file that held a blob.
type BlobHolder struct {
	Dir  uint64      `json:"dir"` // the blocks directory it was in
	Mode fs.FileMode `json:"mode"`
	UID  uint32      `json:"uid"`
	GID  uint32      `json:"gid"`
}

// BlobRecord returns the record of a blob, or ErrNotFound.
func (t *Tx) BlobRecord(hash string) (*BlobRecord, error) {
	v := t.b(bucketBlobRecs).Get([]byte(hash))
	if v == nil {
		return nil, ErrNotFound
	}
	r := &BlobRecord{}
	if err := json.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("blob record %s: %w", hash, err)
	}
	return r, nil
}

// PutBlobRecord stores a blob's record.
func (t *Tx) PutBlobRecord(hash string, r *BlobRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return t.b(bucketBlobRecs).Put([]byte(hash), v)
}

// DeleteBlobRecord removes a blob's record and content manifest.
func (t *Tx) DeleteBlobRecord(hash string) error {
	if err := t.b(bucketBlobData).Delete([]byte(hash)); err != nil {
		return err
	}
	return t.b(bucketBlobRecs).Delete([]byte(hash))
}

// BlobContent returns the manifest of a blob's content.
func (t *Tx) BlobContent(hash string) (Manifest, error) {
	v := t.b(bucketBlobData).Get([]byte(hash))
	if v == nil {
		return nil, ErrNotFound
	}
	var m Manifest
	return m, m.UnmarshalBinary(v)
}

// PutBlobContent stores the manifest of a blob's content. It does not
// change refcounts.
func (t *Tx) PutBlobContent(hash string, m Manifest) error {
	v, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	return t.b(bucketBlobData).Put([]byte(hash), v)
}

// ForEachBlobRecord calls fn for every blob record.
func (t *Tx) ForEachBlobRecord(fn func(hash string, r *BlobRecord) error) error {
	return t.b(bucketBlobRecs).ForEach(func(k, v []byte) error {
		r := &BlobRecord{}
		if err := json.Unmarshal(v, r); err != nil {
			return fmt.Errorf("blob record %x: %w", k, err)
		}
		return fn(string(k), r)
	})
}

// Pins returns the blob hashes (hex) an inode's format-5 manifest pins.
func (t *Tx) Pins(ino uint64) []string {
	v := t.b(bucketPins).Get(u64key(ino))
	out := make([]string, 0, len(v)/32)
	for i := 0; i+32 <= len(v); i += 32 {
		out = append(out, hex.EncodeToString(v[i:i+32]))
	}
	return out
}

// PutPins records the blob hashes an inode pins (nil removes the entry).
func (t *Tx) PutPins(ino uint64, hashes []string) error {
	if len(hashes) == 0 {
		return t.b(bucketPins).Delete(u64key(ino))
	}
	v := make([]byte, 0, 32*len(hashes))
	for _, h := range hashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			return fmt.Errorf("pin %q: not a sha256", h)
		}
		v = append(v, b...)
	}
	return t.b(bucketPins).Put(u64key(ino), v)
}
