package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
	"github.com/spf13/pflag"
)

// progressMinBytes is the size from which put and get show a progress bar.
const progressMinBytes = 64 << 20

func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var chunk sizeFlag = store.DefaultChunkSize
	fs := newFlags("init", "[--chunk-size SIZE] [--owner UID:GID] STORE", "Create an empty store in the directory STORE (created if missing).\nThe chunk size is fixed for the store's life. The store's owner (by default\nwho runs init) owns the mount's root and the files stored with put.", stderr)
	fs.Var(&chunk, "chunk-size", "chunk size C: the unit of deduplication, 4KiB to 64MiB (e.g. 64KiB, 1MiB)")
	ownerFlag := fs.String("owner", "", "the store's owner, as numeric UID:GID (root initialising a store for a user; the store's files are given to them)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want STORE")
	}
	owner := store.ProcessOwner()
	if *ownerFlag != "" {
		var err error
		if owner, err = parseOwner(*ownerFlag); err != nil {
			return usagef("--owner: %v", err)
		}
	}
	if err := store.InitAs(fs.Arg(0), int64(chunk), owner); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "initialised store %s (chunk size %s)\n", fs.Arg(0), formatBytes(int64(chunk)))
	return nil
}

// parseOwner parses a numeric UID:GID.
func parseOwner(s string) (store.Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil {
		return store.Owner{}, fmt.Errorf("want numeric UID:GID, not %q", s)
	}
	return store.Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}

func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", "STORE SRC DEST", "Store the local file SRC as DEST in STORE, creating DEST's parent\ndirectories and replacing an existing DEST atomically. Snapshots (.mlxkv)\nare chunked along their tensor rows to share bytes with earlier snapshots.", stderr)
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
	bar := newProgress(stdout, "put", progressMinBytes, fi.Size())
	start := time.Now()
	info, st, err := s.Put(ctx, fs.Arg(1), fs.Arg(2), bar.update)
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
	return nil
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("get", "[--verify] STORE PATH DST", "Copy the file PATH out of STORE to the local file DST (\"-\" for standard\noutput). DST is written through a temporary file and renamed into place;\nruns of zeros become holes.", stderr)
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
		return err
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
				return fmt.Errorf("write %s: %w", tmp, err)
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
	fs := newFlags("ls", "[-l] STORE [PATH]", "List the directory PATH (default: the root) of STORE, or describe the file PATH.", stderr)
	long := fs.BoolP("long", "l", false, "show mode, size, modification time and how each file is stored")
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
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', tabwriter.AlignRight)
	for _, e := range ents {
		name := displayName(e.Name)
		if e.IsDir() {
			name += "/"
		}
		if !*long {
			fmt.Fprintln(stdout, name)
			continue
		}
		kind := e.Kind
		if e.IsDir() {
			kind = "dir"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t %s\n", e.Mode, e.Size, e.Mtime.Format("2006-01-02 15:04"), kind, name)
	}
	return tw.Flush()
}

func runRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rm", "STORE PATH...", "Remove files or empty directories from STORE. The bytes of chunks that no\nother file uses are freed.", stderr)
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
	fs := newFlags("mv", "STORE OLD NEW", "Rename OLD to NEW in STORE atomically, replacing a file at NEW.", stderr)
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
	fs := newFlags("stats", "[--json] STORE", "Print a store's totals: logical bytes (what the files hold), stored bytes\n(what the chunks take), the dedup ratio, chunks, packs and dead bytes.", stderr)
	asJSON := fs.Bool("json", false, "print a JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want STORE")
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
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(stdout, "store:         %s\n", filepath.Clean(fs.Arg(0)))
	fmt.Fprintf(stdout, "files:         %d in %d directories\n", st.Files, st.Dirs)
	fmt.Fprintf(stdout, "logical bytes: %d (%s), of which zeros %s\n", st.LogicalBytes, formatBytes(st.LogicalBytes), formatBytes(st.ZeroBytes))
	fmt.Fprintf(stdout, "stored bytes:  %d (%s)\n", st.StoredBytes, formatBytes(st.StoredBytes))
	fmt.Fprintf(stdout, "dedup ratio:   %.2fx\n", st.DedupRatio)
	fmt.Fprintf(stdout, "chunks:        %d (chunk size %s)\n", st.Chunks, formatBytes(st.ChunkSize))
	fmt.Fprintf(stdout, "packs:         %d, %s committed, %s dead\n", st.Packs, formatBytes(st.PackBytes), formatBytes(st.DeadBytes))
	return nil
}

// sizeFlag is a byte size flag accepting suffixes K, KiB, M, MiB, G, GiB.
type sizeFlag int64

var _ pflag.Value = (*sizeFlag)(nil)

func (s *sizeFlag) String() string { return formatBytes(int64(*s)) }
func (s *sizeFlag) Type() string   { return "size" }
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int64, error) {
	var n int64
	var unit string
	if _, err := fmt.Sscanf(v, "%d%s", &n, &unit); err != nil && !errors.Is(err, io.EOF) && unit == "" {
		if _, err := fmt.Sscanf(v, "%d", &n); err != nil {
			return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB)", v)
		}
	}
	mult := map[string]int64{"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GiB": 1 << 30}
	m, ok := mult[unit]
	if !ok || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB)", v)
	}
	return n * m, nil
}

func isCorrupt(err error) bool {
	return errors.Is(err, blockstore.ErrCorrupt) || errors.Is(err, errCorrupt)
}
