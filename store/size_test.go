package store_test

import (
	"strings"
	"testing"

	"github.com/kvfs/kvfs/store"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "1B": 1, "64K": 64 << 10, "64k": 64 << 10, "64KiB": 64 << 10,
		"64.0KiB": 64 << 10, "64.0 KiB": 64 << 10, " 1m ": 1 << 20, "1MB": 1 << 20, "1mib": 1 << 20,
		"1.5G": 3 << 29, "2T": 2 << 40, "1P": 1 << 50, "0.5": 0, "1.0009K": 1024, "4096P": 1 << 62,
	} {
		if got, err := store.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "K", "-1", "-1K", "1X", "1IB", "1 K B", "1..2", ".", "1.2.3", "4097P", "99999999999999999999", "1e3", "0x10", "1KiBs"} {
		if n, err := store.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		} else if !strings.Contains(err.Error(), "e.g. 64KiB") {
			t.Errorf("ParseSize(%q): %v does not say what to write", in, err)
		}
	}
}

// FuzzParseSize: any input gives a size in [0, 2^62] or an error, never a
// panic.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"64KiB", "1.5 G", "-1", "9999999999999999999999999T", ".5k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := store.ParseSize(s)
		if err == nil && (n < 0 || n > 1<<62) {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
