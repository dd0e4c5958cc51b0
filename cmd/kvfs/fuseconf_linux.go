package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// fuseConf is where fusermount3 reads user_allow_other.
const fuseConf = "/etc/fuse.conf"

// checkAllowOther fails a user's mount with allow_other that fusermount3
// would refuse: without user_allow_other in /etc/fuse.conf, only root may
// let other users in. fusermount3 says so on the daemon's standard error
// (the log), and go-fuse reports only its exit status; this says it to
// the user who ran kvfs mount.
func checkAllowOther() error { return checkAllowOtherIn(os.Geteuid(), fuseConf) }

// checkAllowOtherIn is checkAllowOther for the user euid, with conf as
// fusermount3's configuration file.
func checkAllowOtherIn(euid int, conf string) error {
	if euid == 0 {
		return nil
	}
	f, err := os.Open(conf)
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if strings.TrimSpace(line) == "user_allow_other" {
				return nil
			}
		}
	}
	return fmt.Errorf("-o allow_other as a user other than root needs a line user_allow_other in %s (ask root to add it)", conf)
}
