package pool

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// crashPoint is for tests only: with $KVFS_TEST_CRASH_AT set to STAGE:N,
// the process SIGKILLs itself the Nth time a publish reaches STAGE, so
// that a test kills a daemon at an exact point of the protocol (doc.go)
// rather than at a random moment. The stages, in order:
//
//	begun     the publish key is written, nothing uploaded yet
//	pack      a pack object is uploaded (others may still be in flight)
//	packs     every pack is uploaded, the manifest not yet
//	manifest  the manifest is uploaded, the name not yet written
//	named     the name is written in etcd, the caller not yet told
//
// Unset (always, outside the tests), it costs one comparison.
func crashPoint(stage string) {
	crashOnce.Do(func() {
		s, n, ok := strings.Cut(os.Getenv("KVFS_TEST_CRASH_AT"), ":")
		if !ok {
			return
		}
		if k, err := strconv.Atoi(n); err == nil && k > 0 {
			crashStage, crashLeft = s, k
		}
	})
	if crashStage == "" || stage != crashStage {
		return
	}
	crashMu.Lock()
	crashLeft--
	last := crashLeft == 0
	crashMu.Unlock()
	if last {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

var (
	crashOnce  sync.Once
	crashMu    sync.Mutex
	crashStage string
	crashLeft  int
)
