//go:build !linux

package main

// checkAllowOther has nothing to check outside Linux: macFUSE and the
// BSDs decide allow_other for users themselves, with their own message.
func checkAllowOther() error { return nil }
