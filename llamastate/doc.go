// Package llamastate reads the layout of llama.cpp's state files: the
// sequence state that llama_state_seq_save_file writes (magic "ggsq",
// version 3: llama-server's slot save, node-llama-cpp's
// saveStateToFile) and the session file of llama_state_save_file (magic
// "ggsn", version 10: llama-cli's --prompt-cache).
//
// Both hold the prompt's tokens, then the KV cache of the saved cells:
//
//	u32 magic, u32 version, u32 n_token, i32 tokens[n_token]
//	ggsn only: u32 len, the model's architecture name
//	one or more caches (two for a sliding-window model: base, then SWA):
//	  u32 n_stream
//	  per stream: u32 cell_count; when it is not 0:
//	    per cell: i32 pos, u32 n_seq_id, [12 bytes of 2D position and
//	              token, for M-RoPE models], i32 seq_id[n_seq_id]
//	    u32 v_trans, u32 n_layer
//	    per layer, K:  i32 type, u64 row_size, cell_count × row_size bytes
//	    per layer, V, v_trans 0 (flash attention on): as K
//	    per layer, V, v_trans 1: i32 type, u32 el_size, u32 n_embd_v_gqa,
//	              then n_embd_v_gqa runs (one per channel) of
//	              cell_count × el_size bytes
//
// (src/llama-context.cpp state_seq_save_file and state_save_file,
// src/llama-kv-cache.cpp state_write, of the llama.cpp that
// node-llama-cpp 3.21.1 bundles.) Every byte after the token count moves
// when a conversation grows by a token, which is why fixed-size chunks
// from offset 0 dedup nothing between the turns of one conversation. But
// each K block (and each V block, or V channel run) is one row that
// grows at its end: the store cuts each as a row and reuses the chunks
// of the same row of the file with the longest common token prefix, as
// it does for a .mlxkv snapshot's tensor rows.
//
// The files carry no model identity beyond the architecture's name, so a
// file's shape (Key) is its layer count, types and row sizes. Parse reads
// only the preamble and the small per-block headers, checks that the
// blocks cover the file exactly, and refuses anything else (another
// version, a recurrent model's state, a truncated or hostile file): the
// store then cuts the file by its content instead.
package llamastate
