// Drives a real llama.cpp (node-llama-cpp 3.21.1's prebuilt build) for
// kvfs's tests of llama.cpp's state files (issue 29):
//
//   node driver.mjs model PATH
//       writes the tiny random model
//   node driver.mjs save MODEL FA DIR...
//       a conversation that grows turn by turn (10 turns, 400 to 3100
//       tokens) and a second one sharing its first 2000 tokens (2 turns),
//       each turn saved with LlamaContextSequence.saveStateToFile
//       (llama_state_seq_save_file) into every DIR as conv-NN.state;
//       FA: flash attention "on" or "off" (then llama.cpp stores V
//       transposed). Prints one JSON line per file, with the
//       milliseconds each save took, with an fsync after it, per DIR.
//   node driver.mjs continue MODEL FA FILE...
//       loads each FILE into a fresh sequence (loadStateFromFile), then
//       evaluates 4 fixed tokens and generates 8 greedily; prints, per
//       file, the greedy tokens and the next-token probabilities of each
//       step, as JSON, for the caller to compare between copies.
import { rng, writeModel } from "./gguf.mjs";
import { getLlama } from "node-llama-cpp";
import { join } from "node:path";
import { openSync, fsyncSync, closeSync } from "node:fs";

function conversations() {
    const r = rng(2029);
    const tok = () => Math.floor(r() * 256);
    const a = Array.from({ length: 3100 }, tok);
    const b = a.slice(0, 2000).concat(Array.from({ length: 600 }, tok));
    const turns = [];
    for (let n = 400; n <= a.length; n += 300) turns.push(a.slice(0, n));
    turns.push(b.slice(0, 2300), b.slice(0, 2600));
    return turns;
}

async function open(model, fa) {
    const llama = await getLlama({ gpu: false, logLevel: "error" });
    const m = await llama.loadModel({ modelPath: model });
    const ctx = await m.createContext({ contextSize: 4096, flashAttention: fa === "on", batchSize: 512, threads: 2 });
    return { llama, m, ctx };
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "model") {
    writeModel(args[0]);
} else if (cmd === "save") {
    const [model, fa, ...dirs] = args;
    const { ctx } = await open(model, fa);
    const seq = ctx.getSequence();
    let prev = [];
    for (const [i, t] of conversations().entries()) {
        const shared = prev.length <= t.length && prev.every((x, k) => x === t[k]);
        if (!shared) await seq.clearHistory();
        await seq.evaluateWithoutGeneratingNewTokens(shared ? t.slice(prev.length) : t);
        prev = t;
        const name = `conv-${String(i).padStart(2, "0")}.state`;
        const out = { name, tokens: t.length, ms: {} };
        for (const d of dirs) {
            const t0 = performance.now();
            const { fileSize } = await seq.saveStateToFile(join(d, name));
            const fd = openSync(join(d, name), "r");
            fsyncSync(fd); // durable, as a plain directory's copy is only after an fsync
            closeSync(fd);
            out.ms[d] = performance.now() - t0;
            out.size = fileSize;
        }
        console.log(JSON.stringify(out));
    }
} else if (cmd === "continue") {
    const [model, fa, ...files] = args;
    const { ctx } = await open(model, fa);
    for (const f of files) {
        const seq = ctx.getSequence();
        await seq.loadStateFromFile(f, { acceptRisk: true });
        const steps = [];
        const it = seq.evaluateWithMetadata([65, 66, 67, 68], { probabilities: true }, { temperature: 0 });
        for await (const o of it) {
            const top = [...o.probabilities.entries()].sort((x, y) => y[1] - x[1]).slice(0, 5);
            steps.push({ token: o.token, top });
            if (steps.length === 8) break;
        }
        console.log(JSON.stringify({ file: f, loaded: seq.contextTokens.length, steps }));
        seq.dispose();
    }
} else {
    console.error("usage: driver.mjs model PATH | save MODEL FA DIR... | continue MODEL FA FILE...");
    process.exit(2);
}
