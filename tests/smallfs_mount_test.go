//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

// newSmallFSMount mounts a fresh store on a small filesystem of its own
// (testutil.SmallFS: kind tmpfs or ext4, size bytes), for the full-disk
// tests. The daemon logs beside the test, not on the disk that fills; the
// log (and the disk's usage) is shown if the test fails. At cleanup the
// store is unmounted and checked, as newMount's are. It returns the mount,
// the small filesystem's directory and the daemon's log file (for a
// remount's --log-file).
func newSmallFSMount(t *testing.T, kind string, size int64, initArgs ...string) (m *mount, disk, logFile string) {
	t.Helper()
	requireRoot(t)
	disk = testutil.SmallFS(t, kind, size)
	m = &mount{store: filepath.Join(disk, "store"), mnt: filepath.Join(t.TempDir(), "mnt")}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, append(append([]string{"init"}, initArgs...), m.store)...)
	logFile = filepath.Join(t.TempDir(), "kvfs.log")
	m.start(t, "--log-file", logFile)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(logFile)
			t.Logf("daemon log:\n%s", log)
			t.Log(sh(t, "ls -ls "+m.store+"; df "+disk))
		}
		if isMounted(m.mnt) {
			if out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput(); err != nil {
				t.Errorf("unmount: %v\n%s", err, out)
				exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
			}
		}
		m.check(t)
	})
	return m, disk, logFile
}
