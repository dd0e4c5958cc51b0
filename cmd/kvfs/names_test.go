package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvfs/kvfs/store"
)

func TestDisplayName(t *testing.T) {
	for in, want := range map[string]string{
		"café.mlxkv":  "café.mlxkv",
		"caf\xe9":     `"caf\xe9"`,
		"a b\x00":     "a b\x00", // valid UTF-8 prints as it is
		"\xff\xfe/ok": `"\xff\xfe/ok"`,
	} {
		if got := displayName(in); got != want {
			t.Errorf("displayName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := escapeInvalid("put caf\xe9/é\x80: no"); got != `put caf\xe9/é\x80: no` {
		t.Errorf("escapeInvalid: %q", got)
	}
}

// TestWireInfoNames: entries cross the control socket with their names'
// bytes intact, and in the old form when the names are UTF-8.
func TestWireInfoNames(t *testing.T) {
	for _, name := range []string{"plain", "caf\xe9.mlxkv", strings.Repeat("\xff", 255)} {
		fi := &store.FileInfo{Name: name, Path: "d\x80/" + name, Size: 5}
		b, err := json.Marshal([]*wireInfo{toWire(fi)})
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(b) {
			t.Fatalf("reply is not UTF-8: %q", b)
		}
		var back []*wireInfo
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := back[0].info()
		if got.Name != name || got.Path != fi.Path || got.Size != 5 {
			t.Fatalf("%q came back as %+v", name, got)
		}
		if name == "plain" && strings.Contains(string(b), "NameBytes") {
			t.Errorf("a UTF-8 name travelled as bytes: %s", b)
		}
	}
}
