// Writes a tiny random GGUF model (llama architecture, a byte-level gpt2
// tokenizer) for the tests of llama.cpp's state files: the weights are
// random, the model's KV cache is real. GGUF v3, as llama.cpp reads it
// (ggml/src/gguf.cpp): header, metadata, tensor infos, data aligned to 32.
import { writeFileSync } from "node:fs";

const T = { U32: 4, I32: 5, F32: 6, STRING: 8, ARRAY: 9 };

class Out {
    constructor() { this.parts = []; this.len = 0; }
    push(b) { this.parts.push(b); this.len += b.length; }
    u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.push(b); }
    i32(v) { const b = Buffer.alloc(4); b.writeInt32LE(v); this.push(b); }
    u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.push(b); }
    f32(v) { const b = Buffer.alloc(4); b.writeFloatLE(v); this.push(b); }
    str(s) { const b = Buffer.from(s, "utf8"); this.u64(b.length); this.push(b); }
    buffer() { return Buffer.concat(this.parts); }
}

// GPT-2's byte-level alphabet: byte b is the token whose text is
// bytesToUnicode[b] (printable bytes as themselves, the others shifted
// past U+0100).
function bytesToUnicode() {
    const bs = [];
    for (let i = 33; i <= 126; i++) bs.push(i);
    for (let i = 161; i <= 172; i++) bs.push(i);
    for (let i = 174; i <= 255; i++) bs.push(i);
    const cs = bs.slice();
    let n = 0;
    for (let b = 0; b < 256; b++) {
        if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
    }
    const m = new Array(256);
    bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
    return m;
}

// A small deterministic generator (mulberry32), for the weights and the
// driver's conversations.
export function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

export function writeModel(path, { layers = 4, embd = 256, heads = 4, headsKV = 2, ff = 512, ctx = 4096, seed = 29 } = {}) {
    const tokens = bytesToUnicode();
    tokens.push("<s>", "</s>");
    const types = tokens.map((_, i) => (i < 256 ? 1 : 3));
    const vocab = tokens.length;
    const kv = [
        ["general.architecture", T.STRING, "llama"],
        ["general.name", T.STRING, "kvfs-test-tiny"],
        ["general.alignment", T.U32, 32],
        ["llama.context_length", T.U32, ctx],
        ["llama.embedding_length", T.U32, embd],
        ["llama.block_count", T.U32, layers],
        ["llama.feed_forward_length", T.U32, ff],
        ["llama.attention.head_count", T.U32, heads],
        ["llama.attention.head_count_kv", T.U32, headsKV],
        ["llama.rope.dimension_count", T.U32, embd / heads],
        ["llama.attention.layer_norm_rms_epsilon", T.F32, 1e-5],
        ["llama.rope.freq_base", T.F32, 10000],
        ["llama.vocab_size", T.U32, vocab],
        ["tokenizer.ggml.model", T.STRING, "gpt2"],
        ["tokenizer.ggml.pre", T.STRING, "default"],
        ["tokenizer.ggml.tokens", T.ARRAY, [T.STRING, tokens]],
        ["tokenizer.ggml.token_type", T.ARRAY, [T.I32, types]],
        ["tokenizer.ggml.merges", T.ARRAY, [T.STRING, []]],
        ["tokenizer.ggml.bos_token_id", T.U32, 256],
        ["tokenizer.ggml.eos_token_id", T.U32, 257],
    ];
    const kvDim = (embd / heads) * headsKV;
    const tensors = [
        ["token_embd.weight", [embd, vocab]],
        ["output_norm.weight", [embd]],
        ["output.weight", [embd, vocab]],
    ];
    for (let l = 0; l < layers; l++) {
        tensors.push(
            [`blk.${l}.attn_norm.weight`, [embd]],
            [`blk.${l}.attn_q.weight`, [embd, embd]],
            [`blk.${l}.attn_k.weight`, [embd, kvDim]],
            [`blk.${l}.attn_v.weight`, [embd, kvDim]],
            [`blk.${l}.attn_output.weight`, [embd, embd]],
            [`blk.${l}.ffn_norm.weight`, [embd]],
            [`blk.${l}.ffn_gate.weight`, [embd, ff]],
            [`blk.${l}.ffn_up.weight`, [embd, ff]],
            [`blk.${l}.ffn_down.weight`, [ff, embd]],
        );
    }
    const o = new Out();
    o.push(Buffer.from("GGUF"));
    o.u32(3);
    o.u64(tensors.length);
    o.u64(kv.length);
    const value = (type, v) => {
        switch (type) {
            case T.U32: o.u32(v); break;
            case T.I32: o.i32(v); break;
            case T.F32: o.f32(v); break;
            case T.STRING: o.str(v); break;
            case T.ARRAY:
                o.u32(v[0]);
                o.u64(v[1].length);
                for (const e of v[1]) value(v[0], e);
                break;
        }
    };
    for (const [k, type, v] of kv) {
        o.str(k);
        o.u32(type);
        value(type, v);
    }
    const align = (n) => Math.ceil(n / 32) * 32;
    let off = 0;
    for (const [name, dims] of tensors) {
        o.str(name);
        o.u32(dims.length);
        for (const d of dims) o.u64(d);
        o.u32(0); // GGML_TYPE_F32
        o.u64(off);
        off = align(off + dims.reduce((a, b) => a * b, 1) * 4);
    }
    o.push(Buffer.alloc(align(o.len) - o.len));
    const r = rng(seed);
    let pos = 0;
    for (const [name, dims] of tensors) {
        const n = dims.reduce((a, b) => a * b, 1);
        const b = Buffer.alloc(align(n * 4));
        const norm = name.endsWith("norm.weight");
        for (let i = 0; i < n; i++) b.writeFloatLE(norm ? 1 : (r() - 0.5) * 0.2, i * 4);
        o.push(b);
        pos += b.length;
    }
    writeFileSync(path, o.buffer());
}
