package llamastatetest

import "math/rand/v2"

// Series is issue 29's llama.cpp series: a conversation saved after
// each of ten turns, and a second that shares its first 2000 tokens,
// saved twice. It returns the files in the order saved, and the ideal
// store's bytes: each distinct cell's K and V once, plus each file's
// bytes other than K and V (tokens, cells' metadata, block headers).
func Series(s Spec) (files [][]byte, ideal int64) {
	r := rand.New(rand.NewPCG(29, 1))
	a := make([]uint32, 3100)
	for i := range a {
		a[i] = r.Uint32N(32000)
	}
	b := append([]uint32(nil), a[:2000]...)
	for range 600 {
		b = append(b, r.Uint32N(32000))
	}
	var seqs [][]uint32
	for n := 400; n <= len(a); n += 300 {
		seqs = append(seqs, a[:n])
	}
	seqs = append(seqs, b[:2300], b[:2600])
	perCell := int64(s.Layers) * int64(2*s.KRow)
	if !s.FlashAttn {
		perCell = int64(s.Layers) * int64(s.KRow+s.VEl*s.VChannels)
	}
	ideal = int64(len(a)+600) * perCell * int64(max(s.Caches, 1))
	for _, t := range seqs {
		f := Write(s, t)
		files = append(files, f)
		ideal += int64(len(f)) - int64(len(t))*perCell*int64(max(s.Caches, 1))
	}
	return files, ideal
}
