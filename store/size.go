package store

import (
	"fmt"
	"math/big"
	"strings"
)

// ParseSize reads a byte count as people write it and as kvfs prints it:
// a number, possibly with a fraction ("1.5"), then an optional unit, in
// any case and with or without a space: B, K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB, P/PB/PiB. Units are powers of 1024 (a cache budget is a
// disk's worth, and "64K" chunks mean 65,536 bytes), so "64.0 KiB", the
// form kvfs's own output takes, reads back. A fraction of a byte is
// dropped. Negative numbers, unknown units and sizes past 2^62 are
// errors naming the input.
func ParseSize(v string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("size %q: %s; want a number with an optional unit K, M, G, T (KiB, MiB, ...; powers of 1024), e.g. 64KiB or 1.5G", v, why)
	}
	s := strings.TrimSpace(v)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	if num == "" || strings.Count(num, ".") > 1 || num == "." {
		return bad("no number")
	}
	var shift uint
	switch unit {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	case "p", "pb", "pib":
		shift = 50
	default:
		return bad(fmt.Sprintf("unknown unit %q", s[i:]))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return bad("not a number")
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if n.Cmp(new(big.Int).Lsh(big.NewInt(1), 62)) > 0 {
		return bad("too large")
	}
	return n.Int64(), nil
}
