// Package safetensors reads the layout of a safetensors file: an 8-byte
// little-endian header length N, N bytes of JSON (per tensor its dtype,
// shape and data_offsets, relative to the end of the header, and an
// optional "__metadata__" object of strings), then the tensors' bytes.
//
// mlx-lm saves a prompt cache this way (models/cache.py,
// save_prompt_cache): one tensor per layer for the keys and one for the
// values ("0.0", "0.1", "1.0", ...; a quantized cache's three parts each),
// shaped [B, H, T, D], with the cache classes and offsets in the
// metadata. Each (batch, head) row of such a tensor is T×D elements that
// grow at their end when the prompt grows, as a .mlxkv snapshot's rows
// do, so the store cuts them the same way; oMLX's per-block files are
// safetensors too. Tensors are found by their data_offsets, never by
// their order in the header or the file.
//
// Parse checks what a reader must be able to trust: the header fits the
// file and the caps, every dtype is known, every tensor's bytes are its
// shape's, tensors lie inside the data and do not overlap. Anything else
// is an error, and the store then cuts the file by its content.
package safetensors
