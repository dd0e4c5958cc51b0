package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
	"github.com/spf13/pflag"
)

// progressMinBytes is the size from which put and get show a progress bar.
const progressMinBytes = 64 << 20

func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var chunk sizeFlag = store.DefaultChunkSize
	fs := newFlags("init", "[--chunk-size SIZE] [--owner USER[:GROUP]] [STORE]", "Create an empty store in the directory STORE (created if missing; default:\n$KVFS_STORE, or kvfs/store under $XDG_DATA_HOME, ~/.local/share (Linux) or\n~/Library/Application Support (macOS, where the store is also kept out of\nSpotlight and Time Machine)), which must be new or empty and outside any\nkvfs mount. The chunk size is fixed for the store's life.\nThe store's owner (by default who runs init) owns the mount's root and the\nfiles stored with put.")
	fs.Var(&chunk, "chunk-size", "chunk size C: the unit of deduplication, 4KiB to 64MiB (e.g. 64KiB, 1MiB)")
	ownerFlag := fs.String("owner", "", "the store's owner, as USER:GROUP (names or numbers) or USER and their primary group (root initialising a store for a user; the store's files are given to them)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("want STORE")
	}
	dir := fs.Arg(0)
	mnt := "" // the default mount point, when the store is the default
	if fs.NArg() == 0 {
		home, _ := os.UserHomeDir()
		var err error
		if dir, mnt, err = defaultPaths(runtime.GOOS, os.Getenv, home); err != nil {
			return usagef("want STORE: %v", err)
		}
	}
	if chunk < store.MinChunkSize || chunk > store.MaxChunkSize {
		return usagef("--chunk-size %s: want 4KiB to 64MiB", formatBytes(int64(chunk)))
	}
	owner := store.ProcessOwner()
	if *ownerFlag != "" {
		var err error
		if owner, err = parseOwner(*ownerFlag); err != nil {
			return usagef("--owner: %v", err)
		}
	}
	if err := checkInitTarget(dir, mnt); err != nil {
		return err
	}
	if err := store.InitAs(dir, int64(chunk), owner); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "initialised store %s (chunk size %s)\n", dir, formatBytes(int64(chunk)))
	fmt.Fprintf(stdout, "  %s\n", emptyFootprint(dir, store.JournalBytes(dir)))
	done, warnings := excludeStore(runtime.GOOS, dir, excludeSys{
		create: func(p string) error { return createMarker(p, owner) },
		run:    func(name string, args ...string) ([]byte, error) { return exec.Command(name, args...).CombinedOutput() },
	})
	for _, d := range done {
		fmt.Fprintf(stdout, "  %s\n", d)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "kvfs init: warning: %s\n", w)
	}
	return nil
}

// storeEntries are the names a store directory holds (kvfs init, the
// store, its daemon), and those a directory may hold for it to be taken
// as empty: a filesystem's lost+found, macOS's markers.
var storeEntries = map[string]bool{
	"kvfs.db": true, "packs": true, "spool": true, "journal": true, "reserve": true, "closed-clean": true,
	socketName: true, "kvfs.log": true,
	"lost+found": true, spotlightMarker: true, ".DS_Store": true,
}

// checkInitTarget refuses, before anything is made, a store directory
// that would fail later or surprise: one that holds a store already, one
// inside a kvfs mount (a store served by a store: the daemon cannot bind
// its control socket there, and a store's files in a store are not what
// anyone means), one holding other files (the store would be mixed into
// them), and, for the default paths, a store at or inside the default
// mount point mnt ("" when paths were given), which the mount would hide.
func checkInitTarget(dir, mnt string) error {
	if _, err := os.Stat(filepath.Join(dir, "kvfs.db")); err == nil {
		return fmt.Errorf("a store already exists at %s (kvfs stats %s describes it)", dir, dir)
	}
	if e, ok, err := mountContaining(dir); err == nil && ok && e.isKvfs() {
		what := "the kvfs mount at " + e.Point
		if e.Source == poolFsName {
			what = "the kvfs pool mount at " + e.Point
		} else if e.Source != "" {
			what += " (of the store " + e.Source + ")"
		}
		return fmt.Errorf("init %s: it is inside %s: a store lives on a local filesystem, not in a kvfs mount; choose a directory outside it", dir, what)
	}
	if mnt != "" {
		s, serr := resolveExisting(dir)
		m, merr := resolveExisting(mnt)
		if serr == nil && merr == nil && pathUnder(s, m) {
			return fmt.Errorf("init %s: the default store is at or inside the default mount point %s ($KVFS_STORE, $KVFS_MOUNT), where the mount would hide it; give them different directories", dir, mnt)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // missing (made by init), or init says why
	}
	var others []string
	for _, e := range ents {
		if !storeEntries[e.Name()] && !strings.HasPrefix(e.Name(), ctlPrivatePrefix) {
			others = append(others, e.Name())
		}
	}
	if len(others) > 0 {
		list := strings.Join(others[:min(len(others), 5)], ", ")
		if len(others) > 5 {
			list += fmt.Sprintf(", and %d more", len(others)-5)
		}
		return fmt.Errorf("init %s: the directory is not empty (it holds %s): a store needs a directory of its own; give a new or empty one", dir, list)
	}
	return nil
}

// createMarker creates the empty file path (a marker such as
// .metadata_never_index), owned by the store's owner; one already there
// is kept.
func createMarker(path string, owner store.Owner) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if owner != store.ProcessOwner() {
		return os.Lchown(path, int(owner.UID), int(owner.GID))
	}
	return nil
}

// parseOwner parses --owner: USER:GROUP, each a name or a number, or
// USER alone for the user and their primary group.
func parseOwner(s string) (store.Owner, error) {
	u, g, hasGroup := strings.Cut(s, ":")
	if u == "" || hasGroup && (g == "" || strings.Contains(g, ":")) {
		return store.Owner{}, fmt.Errorf("want USER:GROUP (names or numbers) or USER, not %q", s)
	}
	uid, primary, err := lookupUser(u)
	if err != nil {
		return store.Owner{}, err
	}
	if !hasGroup {
		if primary < 0 {
			return store.Owner{}, fmt.Errorf("user %s: no such user to take the group of; give USER:GROUP", u)
		}
		return store.Owner{UID: uid, GID: uint32(primary)}, nil
	}
	gid, err := lookupGroup(g)
	if err != nil {
		return store.Owner{}, err
	}
	return store.Owner{UID: uid, GID: gid}, nil
}

// lookupUser returns the UID of s, a user name or number, and the user's
// primary GID (-1 for a number that names no user).
func lookupUser(s string) (uint32, int64, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		if u, err := user.LookupId(s); err == nil {
			if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				return uint32(n), int64(g), nil
			}
		}
		return uint32(n), -1, nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, 0, fmt.Errorf("no user %q", s)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %s: not a numeric UID and GID (%s:%s)", s, u.Uid, u.Gid)
	}
	return uint32(uid), int64(gid), nil
}

// lookupGroup returns the GID of s, a group name or number.
func lookupGroup(s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return 0, fmt.Errorf("no group %q", s)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %s: not a numeric GID (%s)", s, g.Gid)
	}
	return uint32(gid), nil
}

func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", "STORE SRC DEST", "Store the local file SRC as DEST in STORE (under SRC's name if DEST is a\ndirectory or ends in /), creating DEST's parent directories and replacing\nan existing DEST atomically. Snapshots (.mlxkv) are chunked along their\ntensor rows to share bytes with earlier snapshots. A store with a capacity\n(kvfs config) is kept under it: by its daemon when mounted, here otherwise\n(files are evicted as the daemon would, never DEST, and put says what).")
	quiet := fs.BoolP("quiet", "q", false, "print nothing on success")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		return usagef("want STORE SRC DEST")
	}
	fi, err := os.Stat(fs.Arg(1))
	if err != nil {
		return err
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	dest := fs.Arg(2)
	// As cp does: a DEST that is a directory (or ends in "/") receives
	// SRC under its own name.
	if d, err := s.Stat(dest); strings.HasSuffix(dest, "/") || dest == "" || err == nil && d.Mode.IsDir() {
		dest = path.Join(dest, filepath.Base(fs.Arg(1)))
	}
	bar := newProgress(stdout, "put", progressMinBytes, fi.Size())
	start := time.Now()
	info, st, err := s.Put(ctx, fs.Arg(1), dest, bar.update)
	bar.done()
	if err != nil {
		return err
	}
	if !*quiet {
		fmt.Fprintf(stdout, "%s: %s as %s, %s new, %s reused, %s zeros, in %s\n", displayName(info.Path), formatBytes(info.Size), st.Kind,
			formatBytes(st.NewBytes), formatBytes(st.ReusedBytes), formatBytes(st.ZeroBytes), time.Since(start).Round(time.Millisecond))
		if st.Note != "" {
			fmt.Fprintf(stdout, "  stored as a plain file: %s\n", st.Note)
		}
	}
	// Unmounted, the store's capacity is applied here (a daemon applies
	// it after each commit).
	if l, ok := s.(localClient); ok {
		out := stdout
		if *quiet {
			out = io.Discard
		}
		if err := evictToCapacity(l.Store, info, out, stderr); err != nil {
			return fmt.Errorf("put %s: stored, but: %w", displayName(info.Path), err)
		}
	}
	return nil
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("get", "[--verify] STORE PATH DST", "Copy the file PATH out of STORE to the local file DST (\"-\" for standard\noutput; under PATH's name if DST is a directory). DST is written through a\ntemporary file and renamed into place; runs of zeros become holes.")
	verify := fs.Bool("verify", false, "check every chunk's sha256 while reading; a mismatch fails with exit status 3")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		return usagef("want STORE PATH DST")
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	r, size, err := s.Get(fs.Arg(1), *verify)
	if err != nil {
		return corruptErr(err)
	}
	defer r.Close()
	dst := fs.Arg(2)
	if dst == "-" {
		n, err := io.Copy(stdout, r)
		if err == nil && n != size {
			err = fmt.Errorf("get %s: %d of %d bytes (see the daemon's log)", fs.Arg(1), n, size)
		}
		return corruptErr(err)
	}
	// As cp does: into a directory, under PATH's own name.
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(fs.Arg(1)))
	} else if strings.HasSuffix(dst, "/") {
		return fmt.Errorf("get %s: directory %s: %w", fs.Arg(1), dst, err)
	}
	bar := newProgress(stdout, "get", progressMinBytes, size)
	err = copyOut(ctx, r, size, dst, bar)
	bar.done()
	if err != nil && !errors.Is(err, errCorrupt) {
		err = fmt.Errorf("get %s: %w", fs.Arg(1), err)
	}
	return corruptErr(err)
}

// corruptErr marks chunk corruption so that it exits with exitCorrupt.
func corruptErr(err error) error {
	if err != nil && isCorrupt(err) {
		return fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return err
}

// copyOut writes size bytes of r to dst through dst.tmp, leaving holes
// for runs of zeros.
func copyOut(ctx context.Context, r io.Reader, size int64, dst string, bar *progress) error {
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		// Named for the destination, not the temporary file beside it,
		// which the user never asked for.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("write %s: %w (the directory %s does not exist)", dst, err, filepath.Dir(dst))
		}
		return fmt.Errorf("write %s (through %s): %w", dst, filepath.Base(tmp), err)
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(tmp)
		}
	}()
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if !allZero(buf[:n]) {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("write %s (through %s): %w", dst, filepath.Base(tmp), err)
			}
		}
		off += int64(n)
		bar.update(off, size)
	}
	if err := out.Truncate(size); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	ok = true
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ls", "[-l [-h]] STORE [PATH]", "List the directory PATH (default: the root) of STORE, or describe the file PATH.")
	long := fs.BoolP("long", "l", false, "show mode, size, modification time and how each file is stored")
	human := fs.BoolP("human-readable", "h", false, "with -l, sizes as 1.2M, 64K (powers of 1024), as ls -lh prints them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return usagef("want STORE [PATH]")
	}
	path := "/"
	if fs.NArg() == 2 {
		path = fs.Arg(1)
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	fi, err := s.Stat(path)
	if err != nil {
		return err
	}
	ents := []*store.FileInfo{fi}
	if fi.IsDir() {
		if ents, err = s.List(path); err != nil {
			return err
		}
	}
	// Columns as ls -l has them: the size right-aligned, the rest left.
	type row struct{ mode, size, mtime, kind, name string }
	var rows []row
	sizeW, kindW := 0, 0
	for _, e := range ents {
		name := displayName(e.Name)
		if e.IsDir() {
			name += "/"
		}
		if !*long {
			fmt.Fprintln(stdout, name)
			continue
		}
		r := row{mode: e.Mode.String(), size: strconv.FormatInt(e.Size, 10), mtime: e.Mtime.Format("2006-01-02 15:04"), kind: e.Kind, name: name}
		if *human {
			r.size = humanSize(e.Size)
		}
		if e.IsDir() {
			r.kind = "dir"
		}
		sizeW, kindW = max(sizeW, len(r.size)), max(kindW, len(r.kind))
		rows = append(rows, r)
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(stdout, "%s %*s %s %-*s %s\n", r.mode, sizeW, r.size, r.mtime, kindW, r.kind, r.name); err != nil {
			return err
		}
	}
	return nil
}

// humanSize is a size as ls -h prints it: bytes below 1024, then K, M, G,
// ... (powers of 1024) with one decimal below 10, rounded up as ls does.
func humanSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10)
	}
	v := float64(n)
	unit := 0
	for v >= 1024 && unit < 6 {
		v /= 1024
		unit++
	}
	suffix := string("KMGTPE"[unit-1])
	if v < 10 {
		v = math.Ceil(v*10) / 10
		if v < 10 {
			return strconv.FormatFloat(v, 'f', 1, 64) + suffix
		}
	}
	v = math.Ceil(v)
	if v >= 1024 && unit < 6 {
		return "1.0" + string("KMGTPE"[unit])
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + suffix
}

func runRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rm", "STORE PATH...", "Remove files or empty directories from STORE. The bytes of chunks that no\nother file uses are freed.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return usagef("want STORE PATH...")
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	for _, p := range fs.Args()[1:] {
		if err := s.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

func runMv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mv", "STORE OLD NEW", "Rename OLD to NEW in STORE atomically, replacing a file at NEW.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		return usagef("want STORE OLD NEW")
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Rename(fs.Arg(1), fs.Arg(2))
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("stats", "[--json] STORE", "Print a store's totals: logical bytes (what the files hold), stored bytes\n(what the chunks take), the dedup ratio, chunks, packs and dead bytes:\nbytes of packs that no chunk uses any more (released by removals and\nrewrites, reserved by commits that failed or are in flight, and the padding\nthat starts each commit on a page). Dead bytes are punched out of the packs\nwhere the filesystem can, and reclaimed by compaction (kvfs gc).\n\nFor the directory of a pool mount (kvfs mount --pool), print what the pool\nholds and this host's cache, as kvfs pool stats does.")
	asJSON := fs.Bool("json", false, "print a JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want STORE")
	}
	// A pool mount's directory (kvfs mount --pool): the pool's figures.
	if pf, ok, err := readPoolConfig(fs.Arg(0), 30*time.Second); err != nil {
		return err
	} else if ok {
		if *asJSON {
			return usagef("--json is for a store, not a pool mount's directory")
		}
		p, err := pf.withoutCache().open(ctx, stderr)
		if err != nil {
			return timedOut(err, pf.timeout, "--pool-timeout")
		}
		defer p.Close()
		return timedOut(printPoolStats(ctx, p, &pf, stdout), pf.timeout, "--pool-timeout")
	}
	s, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Stats()
	if err != nil {
		return err
	}
	// What the store's files take on disk, which an empty store's
	// reserve and journal make far more than its stored bytes.
	var disk *footprint
	if real, err := filepath.EvalSymlinks(fs.Arg(0)); err == nil {
		if f, err := storeFootprint(real); err == nil {
			disk = &f
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*store.Stats
			Disk *footprint `json:"disk,omitempty"`
		}{st, disk})
	}
	fmt.Fprintf(stdout, "store:         %s\n", filepath.Clean(fs.Arg(0)))
	fmt.Fprintf(stdout, "files:         %d in %s\n", st.Files, plural(st.Dirs, "directory", "directories"))
	fmt.Fprintf(stdout, "logical bytes: %d (%s), of which zeros %s\n", st.LogicalBytes, formatBytes(st.LogicalBytes), formatBytes(st.ZeroBytes))
	fmt.Fprintf(stdout, "stored bytes:  %d (%s)\n", st.StoredBytes, formatBytes(st.StoredBytes))
	fmt.Fprintf(stdout, "dedup ratio:   %s\n", dedupRatio(st.DedupRatio, st.StoredBytes))
	fmt.Fprintf(stdout, "chunks:        %d (chunk size %s)\n", st.Chunks, formatBytes(st.ChunkSize))
	fmt.Fprintf(stdout, "packs:         %d, %s committed, %s dead\n", st.Packs, formatBytes(st.PackBytes), formatBytes(st.DeadBytes))
	if st.DeadBytes > 0 {
		fmt.Fprintf(stdout, "               (dead: pack bytes no chunk uses any more: released, or commit padding;\n"+
			"                punched where the filesystem can, reclaimed by compaction: kvfs gc)\n")
	}
	if disk != nil {
		fmt.Fprintf(stdout, "on disk:       %s\n", disk)
	}
	return nil
}

// plural is n and the noun, singular or plural.
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// dedupRatio prints a dedup ratio; with nothing stored there is none
// ("0.00x" read as a store that grew its data).
func dedupRatio(r float64, stored int64) string {
	if stored == 0 {
		return "— (nothing stored)"
	}
	return fmt.Sprintf("%.2fx", r)
}

// sizeFlag is a byte size flag: a number with an optional unit, as
// store.ParseSize reads it ("64KiB", "1m", "64.0 KiB" as kvfs prints it).
type sizeFlag int64

var _ pflag.Value = (*sizeFlag)(nil)

func (s *sizeFlag) String() string { return formatBytes(int64(*s)) }
func (s *sizeFlag) Type() string   { return "size" }
func (s *sizeFlag) Set(v string) error {
	n, err := store.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func isCorrupt(err error) bool {
	return errors.Is(err, blockstore.ErrCorrupt) || errors.Is(err, errCorrupt)
}
