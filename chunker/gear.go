package chunker

// gear is the gear hash's table: 256 pseudo-random 64-bit values, one per
// byte value, from splitmix64 seeded with a fixed constant. It must never
// change (see the package doc); TestGearFixed pins it.
var gear = func() (g [256]uint64) {
	x := uint64(0x6b7666732d636463) // "kvfs-cdc"
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		g[i] = z ^ z>>31
	}
	return g
}()
