//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

func init() {
	// fsyncwriters DIR LOG SEED: 6 writers, each in a loop: write
	// DIR/tmp/NAME, fsync, close (the engine's protocol), log "D NAME K"
	// to LOG once the fsync returned, rename to DIR/final/SHA256, log
	// "R NAME". Runs until the mount goes away.
	clients["fsyncwriters"] = func(args []string) error {
		dir, logPath := args[0], args[1]
		seed, _ := strconv.ParseUint(args[2], 10, 64)
		log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
		os.MkdirAll(filepath.Join(dir, "final"), 0o755)
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for i := 0; ; i++ {
					k := r.Uint64()
					name := fmt.Sprintf("%d-%d-%d", seed, w, i)
					b := killContent(k)
					tmp := filepath.Join(dir, "tmp", name)
					f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
					if err != nil {
						return
					}
					_, err = f.Write(b)
					if err == nil {
						err = f.Sync()
					}
					if err != nil {
						f.Close()
						return
					}
					log.WriteString(fmt.Sprintf("D %s %d\n", name, k))
					if f.Close() != nil {
						return
					}
					sum := sha256.Sum256(b)
					if os.Rename(tmp, filepath.Join(dir, "final", hex.EncodeToString(sum[:]))) != nil {
						return
					}
					log.WriteString(fmt.Sprintf("R %s\n", name))
				}
			}()
		}
		wg.Wait()
		return nil
	}
}

// killContent is the content written with seed k: 4 KiB to 1.5 MiB
// (small commits and spools adopted whole), a third sharing a prefix.
func killContent(k uint64) []byte {
	n := 4096 + int(k%64)*int(k%7+1)*3500
	r := rand.New(rand.NewPCG(k, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if k%3 == 0 {
		p := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < min(n, 128<<10); i++ {
			b[i] = byte(p.Uint32())
		}
	}
	return b
}

// TestKillDaemonConcurrentFsync: SIGKILL the daemon while six writers
// commit files with fsync and rename them into place (the engine's
// protocol), at random moments: during journal appends and group
// commits, with checkpoints every 20 ms in half of the rounds, and while
// a restarted daemon replays the journal. After each kill the store is
// checked: the invariant checker is clean, every file whose fsync
// returned is intact (under its tmp name or its final name), and every
// name holds exactly the content written under it (a final name is the
// sha256 of its content).
func TestKillDaemonConcurrentFsync(t *testing.T) {
	m := newMount(t)
	logPath := filepath.Join(t.TempDir(), "fsync.log")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	rounds := 6
	for round := 0; round < rounds; round++ {
		if round > 0 {
			var args []string
			if round%2 == 1 {
				args = append(args, "--checkpoint-interval", "20ms")
			}
			m.start(t, args...)
		}
		c := client("fsyncwriters", m.mnt, logPath, fmt.Sprint(r.Uint64()))
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(300+r.IntN(700)) * time.Millisecond)
		syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
		c.Wait()
		exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		if round%3 == 2 {
			// Kill a daemon again while it replays the journal that the
			// kill left, before or just after it mounts.
			d := exec.Command(kvfsBin, "mount", "--foreground", m.store, m.mnt)
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond)
			d.Process.Signal(syscall.SIGKILL)
			waitKilled(t, d, m.mnt)
			exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		}
		s := m.openStore(t)
		if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
			s.Close()
			t.Fatalf("round %d: %v", round, err)
		}
		n := checkKillLog(t, s, logPath, round)
		t.Logf("round %d: %d files durable", round, n)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	m.start(t)
}

// checkKillLog checks the store against the writers' log and returns the
// number of files whose fsync returned.
func checkKillLog(t *testing.T, s *store.Store, logPath string, round int) int {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	durable := map[string]uint64{}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		fl := strings.Fields(sc.Text())
		if len(fl) == 3 && fl[0] == "D" {
			if k, err := strconv.ParseUint(fl[2], 10, 64); err == nil {
				durable[fl[1]] = k
			}
		}
	}
	read := func(p string) ([]byte, error) { return readStored(s, p) }
	finals := map[string]bool{}
	ents, err := s.List("final")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := read("final/" + e.Name)
		if err != nil {
			t.Fatalf("round %d: final/%s: %v", round, e.Name, err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != e.Name {
			t.Fatalf("round %d: final/%s holds %d bytes of other content", round, e.Name, len(b))
		}
		finals[e.Name] = true
	}
	for name, k := range durable {
		want := killContent(k)
		sum := sha256.Sum256(want)
		if finals[hex.EncodeToString(sum[:])] {
			continue
		}
		got, err := read("tmp/" + name)
		if err != nil {
			t.Fatalf("round %d: tmp/%s, whose fsync returned, is gone: %v", round, name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: tmp/%s, whose fsync returned, holds %d bytes, not its %d", round, name, len(got), len(want))
		}
	}
	return len(durable)
}
