package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadTokens: every format, and raw files that look like JSON.
func TestReadTokens(t *testing.T) {
	raw := func(ts ...uint32) string {
		var b []byte
		for _, x := range ts {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return string(b)
	}
	for _, c := range []struct {
		name, content, format string
		want                  []uint32
		err                   string
	}{
		{"json", " [1, 2, 3]\n", "auto", []uint32{1, 2, 3}, ""},
		{"raw", raw(7, 8), "auto", []uint32{7, 8}, ""},
		{"raw first token 91", raw(91, 5, 6), "auto", []uint32{91, 5, 6}, ""},
		{"raw white space then [", raw(0x5b20, 1), "auto", []uint32{0x5b20, 1}, ""},
		{"JSON-looking raw, forced", "[1]\n", "u32", []uint32{binary.LittleEndian.Uint32([]byte("[1]\n"))}, ""},
		{"JSON-looking raw, auto", "[1]\n", "auto", []uint32{1}, ""},
		{"raw, forced json", raw(91, 5), "json", nil, "as a JSON array"},
		{"odd length", "abcde", "auto", nil, "not a whole number of u32"},
		{"bad JSON, odd length", "[1, 2", "auto", nil, "nor raw u32"},
		{"negative token", "[-1]", "json", nil, "as a JSON array"},
		{"unknown format", "[1]", "csv", nil, "want json, u32 or auto"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readTokens(p, c.format)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("readTokens = %v, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("readTokens = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
