package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// kvfs match and POST /v1/match: the longest-prefix lookup of
// docs/PREFIX.md, the same answer as /.kvfs/match in a mount.

func runMatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("match", "(--model M --fingerprint F [--ns NS] | --like CACHEFILE) --tokens FILE (STORE | --mount MNT | --pool POOL)",
		`Find the snapshot whose tokens best seed a prompt, by the engine's rules
(docs/PREFIX.md), and print the answer as JSON: {"hit", "path", "tokens",
"snapshotTokens", "trim"} or {"hit": false, "reason"}. FILE holds the
prompt's tokens as a JSON array, or as raw little-endian u32 ("-": standard
input). With STORE, the lookup runs in the store's daemon (or the store
opened here) as the calling user; with --mount, through MNT/.kvfs/match;
with --pool (or $KVFS_POOL, when neither STORE nor --mount is given), among
the snapshots every host of the pool published, by the same rules (the
earliest published name wins a tie). --like takes the model from CACHEFILE, a cache
file the caller has: a .mlxkv snapshot's modelId, configFingerprint and ns,
or a llama.cpp state file's shape (its layers, cache types and row sizes,
which stand for the model: see docs/ENGINES.md); the answer is then among
the state files of that shape, and a hit longer than the prompt's prefix
is read cut to it through the mount's /.kvfs/prefix/PATH@N.`)
	var q store.MatchQuery
	fs.StringVar(&q.Model, "model", "", "the snapshots' modelId")
	fs.StringVar(&q.Fingerprint, "fingerprint", "", "the snapshots' configFingerprint")
	fs.StringVar(&q.NS, "ns", "", `the namespace (header field ns; "" is the base model)`)
	tokens := fs.String("tokens", "", "the prompt's tokens: a JSON array or raw little-endian u32")
	format := fs.String("tokens-format", "auto", `how FILE holds the tokens: "json", "u32", or "auto" (a JSON array if it
parses as one, else raw u32: a raw file that is also a JSON array needs "u32")`)
	like := fs.String("like", "", "take --model, --fingerprint and --ns from this .mlxkv snapshot or llama.cpp state file")
	mnt := fs.String("mount", "", "look up through this kvfs mount")
	var pf poolFlags
	pf.add(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *like != "" {
		if fs.Changed("model") || fs.Changed("fingerprint") || fs.Changed("ns") {
			return usagef("want --like or --model, --fingerprint and --ns, not both")
		}
		var err error
		if q.Model, q.Fingerprint, q.NS, err = modelOf(*like); err != nil {
			return err
		}
	}
	if q.Model == "" || q.Fingerprint == "" || *tokens == "" {
		return usagef("want --model and --fingerprint (or --like), and --tokens")
	}
	inPool := fs.Changed("pool") || pf.pool != "" && *mnt == "" && fs.NArg() == 0
	switch {
	case fs.NArg() > 1:
		return usagef("want one STORE")
	case inPool && (*mnt != "" || fs.NArg() == 1):
		return usagef("want one of STORE, --mount MNT and --pool POOL")
	case !inPool && (*mnt == "") == (fs.NArg() != 1):
		return usagef("want STORE, --mount MNT or --pool POOL")
	}
	var err error
	if q.Tokens, err = readTokens(*tokens, *format); err != nil {
		return err
	}
	var r *store.MatchResult
	switch {
	case inPool:
		p, perr := pf.withoutCache().open(ctx, stderr)
		if perr != nil {
			return timedOut(perr, pf.timeout, "--pool-timeout")
		}
		defer p.Close()
		r, err = p.Match(ctx, q)
		err = timedOut(err, pf.timeout, "--pool-timeout")
	case *mnt != "":
		var root string
		if root, err = matchMountRoot(*mnt); err == nil {
			r, err = matchMount(root, q)
		}
	default:
		r, err = matchStore(fs.Arg(0), q)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// readTokens reads a token file in format "json" (an array), "u32" (raw
// little-endian) or "auto": a JSON array if it parses as one, else raw.
// Raw tokens can look like the start of an array (a first token of 91 is
// "[" and three NULs), so a failed parse of what starts with "[" falls back
// to raw u32 rather than failing (red team 11).
func readTokens(name, format string) ([]uint32, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	switch format {
	case "json":
		return jsonTokens(name, b)
	case "u32":
		return rawTokens(name, b)
	case "auto":
		if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "[") {
			out, jerr := jsonTokens(name, b)
			if jerr == nil {
				return out, nil
			}
			out, rerr := rawTokens(name, b)
			if rerr != nil {
				return nil, fmt.Errorf("%w (nor raw u32: %v)", jerr, rerr)
			}
			return out, nil
		}
		return rawTokens(name, b)
	}
	return nil, usagef("--tokens-format %q: want json, u32 or auto", format)
}

// jsonTokens parses a JSON array of tokens.
func jsonTokens(name string, b []byte) ([]uint32, error) {
	var out []uint32
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("read tokens %s as a JSON array: %w", name, err)
	}
	return out, nil
}

// rawTokens parses raw little-endian u32 tokens.
func rawTokens(name string, b []byte) ([]uint32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("read tokens %s: %d bytes is not a whole number of u32", name, len(b))
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out, nil
}

// matchStore asks the store's daemon, or the store opened here as the
// calling user.
func matchStore(dir string, q store.MatchQuery) (*store.MatchResult, error) {
	c, err := connect(dir)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	switch c := c.(type) {
	case *socketClient:
		var r store.MatchResult
		b, err := json.Marshal(q)
		if err != nil {
			return nil, err
		}
		if _, err := c.do("POST", "/v1/match", nil, strings.NewReader(string(b)), &r); err != nil {
			return nil, err
		}
		return &r, nil
	case localClient:
		groups, _ := os.Getgroups()
		cr := &store.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
		for _, g := range groups {
			cr.Groups = append(cr.Groups, uint32(g))
		}
		return c.Match(q, cr)
	}
	return nil, fmt.Errorf("match %s: no lookup through %T", dir, c)
}

// matchMountRoot returns the mount point of the kvfs mount (of a store
// or a pool) that mnt lies in, for kvfs match --mount: a lookup through
// anything else (a directory not mounted) would answer a plain miss. Where the mount table cannot be read, mnt is taken as it
// is.
func matchMountRoot(mnt string) (string, error) {
	e, ok, err := mountContaining(mnt)
	if err != nil {
		return mnt, nil
	}
	return matchMountEntry(mnt, e, ok)
}

// matchMountEntry is matchMountRoot's decision, given the mount e that
// mnt lies in (ok false: none).
func matchMountEntry(mnt string, e mountEntry, ok bool) (string, error) {
	switch {
	case ok && e.Source == poolFsName:
		return e.Point, nil // a pool mount's /.kvfs answers as kvfs match --pool does
	case !ok || !e.isKvfs():
		return "", usagef("--mount %s: not in a kvfs mount (give a kvfs mount point, or the store itself: kvfs match STORE)", mnt)
	}
	return e.Point, nil
}

// matchMount runs the lookup through MNT/.kvfs as the calling user, with
// the rules and order of store.Match, so that it gives the socket's
// answer: the model key's and h0's links in MNT/.kvfs/match tell the
// misses no-snapshot-for-model and namespace; then from h(K) down to h(1),
// each key's candidates in MNT/.kvfs/candidates are read (their headers,
// through the mount) and judged against the whole prompt, until no
// shorter key can hold a better one.
//
// The socket answers from one snapshot of the index; a walk of the tree
// can meet snapshots renamed, rewritten or removed as it goes: a listed
// candidate whose link or file is gone, or a name that leads to another
// file by the time it is opened (a link is a path). Such a walk is made
// again, up to matchWalks times in all, so that a snapshot only renamed
// or rewritten in place is not missed (red team 12).
func matchMount(mnt string, q store.MatchQuery) (*store.MatchResult, error) {
	ctl := filepath.Join(mnt, ".kvfs")
	exists := func(k mlx.ChainKey) (bool, error) {
		_, err := os.Lstat(filepath.Join(ctl, "match", hex.EncodeToString(k[:])))
		if errors.Is(err, iofs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("match through %s: %w", mnt, err)
		}
		return true, nil
	}
	keys := mlx.ChainKeys(q.Model, q.Fingerprint, q.NS, q.Tokens)
	for i, k := range []mlx.ChainKey{mlx.ModelKey(q.Model, q.Fingerprint), keys[0]} {
		if ok, err := exists(k); err != nil {
			return nil, err
		} else if !ok {
			return &store.MatchResult{Reason: []string{store.MissNoModel, store.MissNamespace}[i]}, nil
		}
	}
	if len(keys) < 2 {
		return &store.MatchResult{Reason: store.MissPromptShort}, nil
	}
	for walk := 1; ; walk++ {
		r, raced, err := matchWalk(ctl, keys, q.Tokens)
		if err != nil {
			return nil, fmt.Errorf("match through %s: %w", mnt, err)
		}
		if !raced || walk == matchWalks {
			return r, nil
		}
		// Let the change that raced this walk finish: on one CPU, a
		// renamer in a loop raced 8 walks in a row (TestMatchMountDuringRenames
		// with GOMAXPROCS=1, 1 lookup in 26).
		time.Sleep(time.Duration(walk) * 100 * time.Microsecond)
	}
}

// matchWalks bounds the walks of one lookup through a mount whose
// snapshots change under it (their waits add up to 50 ms at most).
const matchWalks = 32

// matchWalk is one walk of the candidates of keys[K] … keys[1] for prompt,
// and whether it met a snapshot changing under it.
func matchWalk(ctl string, keys []mlx.ChainKey, prompt []uint32) (r *store.MatchResult, raced bool, err error) {
	var best *store.MatchResult
	var bestIno uint64
	miss, missP := store.MissNoCommonPrefix, int64(-1)
	n := int64(len(prompt))
	seen := map[uint64]bool{}
	for k := len(keys) - 1; k >= 1; k-- {
		if best != nil && best.Tokens >= int64(k+1)*mlx.GroupTokens {
			break
		}
		cands, gone, err := mountCandidates(filepath.Join(ctl, "candidates", hex.EncodeToString(keys[k][:])))
		if err != nil {
			return nil, false, err
		}
		raced = raced || gone
		for _, c := range cands {
			if seen[c.Ino] {
				continue
			}
			seen[c.Ino] = true
			h, err := mountSnapshot(c.link)
			if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
				raced = true // renamed, rewritten or removed since the listing
				continue
			} else if err != nil {
				return nil, false, err
			}
			st := int64(len(h.tokens))
			cpl := int64(0)
			for cpl < min(st, n) && h.tokens[cpl] == prompt[cpl] {
				cpl++
			}
			if cpl < int64(k)*mlx.GroupTokens {
				// Not the file listed: its name leads elsewhere now.
				raced = true
				continue
			}
			p := min(cpl, n-1)
			if p <= 0 || !store.Better(p, c.Ino, bestTokens(best), bestIno) {
				continue
			}
			if why := store.Rejection(p, st, h.minReusable, h.trimmable); why != "" {
				if p > missP {
					miss, missP = why, p
				}
				continue
			}
			best = &store.MatchResult{Hit: true, Path: c.Path, Tokens: p, SnapshotTokens: st, Trim: st > p, Ino: c.Ino}
			if !utf8.ValidString(c.Path) {
				best.PathBytes = []byte(c.Path)
			}
			bestIno = c.Ino
		}
	}
	if best == nil {
		return &store.MatchResult{Reason: miss}, raced, nil
	}
	return best, raced, nil
}

func bestTokens(r *store.MatchResult) int64 {
	if r == nil {
		return 0
	}
	return r.Tokens
}

// mountCandidate is an entry of MNT/.kvfs/candidates/<hex>.
type mountCandidate struct {
	store.MatchCandidate
	link string // the entry's path, which leads to the snapshot
}

// mountCandidates lists a key's candidates directory, earliest committed
// first; a key with none (the directory does not exist) has no entries.
// gone says that a listed entry was gone before its link was read.
func mountCandidates(dir string) (out []mountCandidate, gone bool, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, e := range ents {
		ino, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("candidates %s: entry %q is not an inode number", dir, e.Name())
		}
		link := filepath.Join(dir, e.Name())
		t, err := os.Readlink(link)
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			gone = true
			continue
		} else if err != nil {
			return nil, false, err
		}
		out = append(out, mountCandidate{store.MatchCandidate{Ino: ino, Path: strings.TrimPrefix(t, "../../../")}, link})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ino < out[j].Ino })
	return out, gone, nil
}

// snapshotFacts is what a lookup needs of a candidate: its tokens, the
// shortest prefix it may seed, and whether it may seed a shorter one than
// its own.
type snapshotFacts struct {
	tokens      []uint32
	minReusable int64
	trimmable   bool
}

// mountSnapshot reads the facts of the snapshot a candidate leads to: a
// .mlxkv's header, or a llama.cpp state file's layout.
func mountSnapshot(link string) (*snapshotFacts, error) {
	f, err := os.Open(link)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var head [16]byte
	if n, _ := io.ReadFull(f, head[:]); llamastate.Sniff(head[:n]) {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		st, err := llamastate.Parse(f, fi.Size(), link)
		if err != nil {
			return nil, err
		}
		_, terr := llamastate.Trim(st, f, int64(len(st.Tokens)))
		return &snapshotFacts{tokens: st.Tokens, trimmable: terr == nil}, nil
	}
	snap, err := mlx.ReadFile(link)
	if err != nil {
		return nil, err
	}
	return &snapshotFacts{tokens: snap.Header.Tokens, minReusable: mlx.MinReusable(snap.Header), trimmable: mlx.Trimmable(snap.Header)}, nil
}

// modelOf returns the identity a lookup of prompts like the cache file
// name's goes by: a .mlxkv snapshot's modelId, configFingerprint and ns;
// a llama.cpp state file's layout key and store.LlamaFingerprint.
func modelOf(name string) (model, fingerprint, ns string, err error) {
	f, err := os.Open(name)
	if err != nil {
		return "", "", "", fmt.Errorf("--like: %w", err)
	}
	defer f.Close()
	var head [16]byte
	if n, _ := io.ReadFull(f, head[:]); llamastate.Sniff(head[:n]) {
		fi, err := f.Stat()
		if err != nil {
			return "", "", "", fmt.Errorf("--like: %w", err)
		}
		st, err := llamastate.Parse(f, fi.Size(), name)
		if err != nil {
			return "", "", "", fmt.Errorf("--like: %w", err)
		}
		return st.Key(), store.LlamaFingerprint, "", nil
	}
	snap, err := mlx.ReadFile(name)
	if err != nil {
		return "", "", "", fmt.Errorf("--like %s: neither a .mlxkv snapshot nor a llama.cpp state file: %w", name, err)
	}
	h := snap.Header
	return h.ModelID, h.ConfigFingerprint, h.NS, nil
}

// matchRequest is POST /v1/match: a store.MatchQuery in, a
// store.MatchResult out, looked up as the peer of the connection.
func (c *controlServer) match(w http.ResponseWriter, r *http.Request) {
	var q store.MatchQuery
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		c.reply(w, nil, fmt.Errorf("match: request body: %v: %w", err, iofs.ErrInvalid))
		return
	}
	cr, ok := r.Context().Value(peerKey{}).(*store.Cred)
	if !ok {
		c.reply(w, nil, errors.New("match: the caller's credentials are unknown"))
		return
	}
	res, err := c.s.Match(q, cr)
	c.reply(w, res, err)
}

// peerKey is the context key of a control connection's peer.
type peerKey struct{}

// peerContext records the credentials of the process at the other end of
// a control connection (SO_PEERCRED, taken when it connected), for
// requests that answer only what the caller may read. Supplementary
// groups are read from /proc/<pid>/status while that process still has
// the uid and gid; otherwise it has none (a narrower answer, never wider).
func peerContext(ctx context.Context, conn net.Conn) context.Context {
	for {
		if sc, ok := conn.(*slotConn); ok {
			conn = sc.Conn
			continue
		}
		break
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cr *store.Cred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cr, cerr = peerCred(fd) }); err != nil || cerr != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, cr)
}
