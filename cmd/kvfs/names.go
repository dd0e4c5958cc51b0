package main

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvfs/kvfs/store"
)

// Names in a store are bytes, not text. They are printed as they are when
// they are valid UTF-8, and quoted with Go escapes (strconv.Quote)
// otherwise, so that the bytes can be read off the output instead of
// turning into U+FFFD.
func displayName(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}

// escapeInvalid writes each byte of s that is not part of valid UTF-8 as
// \xNN, for messages that travel as JSON strings (which would replace it
// with U+FFFD).
func escapeInvalid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[0])|0x100, 16)[1:])
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// wireInfo is a FileInfo on the control socket. JSON strings are UTF-8,
// so a name or path that is not also travels as bytes (base64), which the
// client prefers; valid names travel as before.
type wireInfo struct {
	*store.FileInfo
	NameBytes []byte `json:",omitempty"`
	PathBytes []byte `json:",omitempty"`
}

func toWire(fi *store.FileInfo) *wireInfo {
	if fi == nil {
		return nil
	}
	w := &wireInfo{FileInfo: fi}
	if !utf8.ValidString(fi.Name) {
		w.NameBytes = []byte(fi.Name)
	}
	if !utf8.ValidString(fi.Path) {
		w.PathBytes = []byte(fi.Path)
	}
	return w
}

// info is the FileInfo with its names as the daemon stored them.
func (w *wireInfo) info() *store.FileInfo {
	if w == nil || w.FileInfo == nil {
		return nil
	}
	fi := w.FileInfo
	if w.NameBytes != nil {
		fi.Name = string(w.NameBytes)
	}
	if w.PathBytes != nil {
		fi.Path = string(w.PathBytes)
	}
	return fi
}
