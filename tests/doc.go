// Package tests holds kvfs's end-to-end tests: they build the kvfs binary,
// mount real stores with it (as root, directly, as CI does), and drive the
// mounts from separate processes — shell tools, and this test binary run
// again as a client — because a process that serves a FUSE mount and also
// maps or forks into it can deadlock (go-fuse's fs/api.go).
package tests
