package journal

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/testutil"
)

// killChildEnv names the journal directory a re-executed test binary
// appends to until it is killed (TestMain runs it).
const killChildEnv = "KVFS_JOURNAL_KILL_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		if err := killChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var killOptions = Options{SegmentSize: 256 << 10, BufferSize: 32 << 10}

// killPayload is a record that proves its own integrity: a nonce, then
// bytes generated from it.
func killPayload(nonce uint64) []byte {
	r := rand.New(rand.NewPCG(nonce, nonce>>7))
	b := make([]byte, 8+int(nonce%20000))
	binary.LittleEndian.PutUint64(b, nonce)
	for i := 8; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// killChild appends from four goroutines, syncing most records, and
// reports "S seq nonce" on stdout once a Sync covering seq returned. Now
// and then it truncates, reporting "T upto" before it starts.
func killChild(dir string) error {
	j, err := Open(dir, killOptions)
	if err != nil {
		return err
	}
	var out sync.Mutex
	report := func(format string, a ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", a...) // unbuffered: the parent must see it before the kill
	}
	errc := make(chan error, 5)
	for range 4 {
		go func() {
			for {
				nonce := rand.Uint64()
				seq, err := j.Append(killPayload(nonce))
				if err != nil {
					errc <- err
					return
				}
				if nonce%4 == 0 {
					continue // left for a later Sync to cover
				}
				if err := j.Sync(seq); err != nil {
					errc <- err
					return
				}
				report("S %d %d", seq, nonce)
			}
		}()
	}
	go func() {
		for {
			time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
			st := j.Stats()
			if st.Durable > 100 {
				upto := st.Durable - 100
				report("T %d", upto)
				if err := j.Truncate(upto); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	return <-errc
}

// TestKill: a child process appends and syncs records and is SIGKILLed at
// random moments (while opening, appending, syncing, switching segments,
// truncating); after each kill, reopening finds every record whose Sync
// returned, intact and in order, and every other record it finds intact.
func TestKill(t *testing.T) {
	dir := t.TempDir()
	iterations := 12
	if testutil.StressFull() {
		iterations = 60
	}
	synced := map[uint64]uint64{} // seq -> nonce, of every Sync that returned
	var truncated uint64
	for it := range iterations {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan []string)
		first := make(chan struct{}) // closed at the child's first line
		go func() {
			var got []string
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if got = append(got, sc.Text()); len(got) == 1 {
					close(first)
				}
			}
			lines <- got
		}()
		// Even iterations kill at a random moment from the start (while
		// the child opens, often); odd ones once it has synced a record,
		// so that on a loaded machine, where a child takes long to
		// start, kills still come while it appends, syncs and switches
		// segments.
		if it%2 == 1 {
			select {
			case <-first:
			case <-time.After(10 * time.Second):
			}
		}
		time.Sleep(time.Duration(20+rand.IntN(400)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		got := <-lines
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("iteration %d: the child ended before the kill: %v\n%s", it, err, stderr.String())
		}
		for _, l := range got {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "S":
				seq, _ := strconv.ParseUint(f[1], 10, 64)
				nonce, _ := strconv.ParseUint(f[2], 10, 64)
				synced[seq] = nonce
			case len(f) == 2 && f[0] == "T":
				upto, _ := strconv.ParseUint(f[1], 10, 64)
				truncated = max(truncated, upto)
			default:
				t.Fatalf("child said %q", l)
			}
		}

		j, err := Open(dir, killOptions)
		if err != nil {
			t.Fatalf("iteration %d: reopen after kill: %v", it, err)
		}
		found := map[uint64]bool{}
		var prev uint64
		err = j.Replay(0, func(seq uint64, p []byte) error {
			if prev != 0 && seq != prev+1 {
				return fmt.Errorf("seq %d after %d", seq, prev)
			}
			prev = seq
			if len(p) < 8 || string(p) != string(killPayload(binary.LittleEndian.Uint64(p))) {
				return fmt.Errorf("record %d is not what was appended", seq)
			}
			if n, ok := synced[seq]; ok && n != binary.LittleEndian.Uint64(p) {
				return fmt.Errorf("record %d holds nonce %d, the synced one had %d", seq, binary.LittleEndian.Uint64(p), n)
			}
			found[seq] = true
			return nil
		})
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		lost := 0
		for seq := range synced {
			if seq > truncated && !found[seq] {
				lost++
			}
		}
		if lost > 0 {
			t.Fatalf("iteration %d: %d synced records lost", it, lost)
		}
		st := j.Stats()
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("iteration %d: %d lines from the child, %d records replayed, next seq %d", it, len(got), len(found), st.Next)
	}
	if len(synced) < 100 {
		t.Fatalf("only %d synced records in all: the kills came too early to test anything", len(synced))
	}
}
