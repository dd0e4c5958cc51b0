// Package tests holds kvfs's end-to-end tests: they build the kvfs binary,
// mount real stores with it (as root, directly, as CI does), and drive the
// mounts from separate processes — shell tools, and this test binary run
// again as a client — because a process that serves a FUSE mount and also
// maps or forks into it can deadlock (go-fuse's fs/api.go).
//
// The tests are Linux's (build tag linux on every file): they mount
// through /dev/fuse and fusermount, switch users, and call renameat2,
// fallocate and Linux's xattr calls. On macOS the package is empty, so
// that scripts/test's darwin vet and test compile pass; the macOS checks
// are the table tests of the darwin policy in fs and blockstore, and the
// manual checklist in docs/MACOS.md. A new test file here needs the tag.
//
// KVFS_TEST_MOUNT_ARGS adds arguments to every mount of a run. With
// --simulate-darwin the mounts behave as the macOS build does where Linux
// can (no notifications, 1 s timeouts, macFUSE's page cache, no splice:
// docs/MACOS.md), and scripts/test runs the staleness, read and write
// tests so. What macOS allows to differ (a control-socket change seen
// within a second, no splice, flushes of read handles) is accepted in
// that mode only, through darwinsim_test.go's helpers, never by weakening
// what the tests expect of Linux.
package tests
