// Package testutil holds what the store's tests and the end-to-end tests
// share: the length of stress runs, small filesystems to fill, an index
// made sparse as a full disk leaves it, and a description of where read
// bytes differ from the expected ones. It is for tests only.
package testutil
