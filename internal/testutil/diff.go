package testutil

// Mismatch describes where got differs from want (of the same length):
// the index of the first differing byte, how many zero bytes run from
// there in got, and the kind of damage, "zeroed bytes" when got has zeros
// there (punched or unwritten space read back) and "wrong bytes"
// otherwise. ok is true when they are equal.
func Mismatch(got, want []byte) (kind string, at, zeros int, ok bool) {
	for at < len(got) && got[at] == want[at] {
		at++
	}
	if at == len(got) {
		return "", 0, 0, true
	}
	end := at
	for end < len(got) && got[end] == 0 {
		end++
	}
	if end > at {
		return "zeroed bytes", at, end - at, false
	}
	return "wrong bytes", at, 0, false
}
