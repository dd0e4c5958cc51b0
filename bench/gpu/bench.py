"""bench/gpu: restoring a KV cache into GPU memory from a kvfs mount and
from a plain file, against recomputing it (prefill). Run through
bench/gpu/run (which builds or finds the binaries, mounts kvfs and calls
this once per model size); `bench.py table RESULTS.jsonl` prints the table.

Every measurement is one JSON line appended to --results.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvrestore  # noqa: E402

MODELS = {
    # name: transformers LlamaConfig fields of the model, and its KV geometry
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=128256),
}

RESULTS = None
FUSE_LOG = None  # the daemon's --debug-fuse log, to count READ requests


def fuse_reads(log, start):
    """READ requests in the daemon's debug log after byte offset start:
    count, bytes, and a histogram of their sizes."""
    import re
    time.sleep(0.2)
    n, total, hist = 0, 0, {}
    with open(log, "rb") as f:
        f.seek(start)
        for ln in f:
            if b": READ " not in ln or b"rx " not in ln:
                continue
            m = re.search(rb"\[(\d+) \+(\d+)\)", ln)
            if not m:
                continue
            size = int(m.group(2))
            n += 1
            total += size
            hist[size] = hist.get(size, 0) + 1
    top = sorted(hist.items(), key=lambda kv: -kv[1])[:6]
    return {"reads": n, "bytes": total, "sizes": {str(k): v for k, v in top}}


def emit(**kw):
    kw["t"] = round(time.time(), 3)
    line = json.dumps(kw)
    print(line, flush=True)
    if RESULTS:
        with open(RESULTS, "a") as f:
            f.write(line + "\n")


def drop_caches():
    """sync; echo 3 > /proc/sys/vm/drop_caches. False if refused."""
    subprocess.run(["sync"], check=True)
    if os.environ.get("KVFS_BENCH_NO_DROP"):  # tests on shared machines
        return False
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        emit(kind="warn", msg="drop_caches: %s" % e)
        return False


def proc_cpu(pid):
    """utime+stime seconds, and rchar, of a process."""
    if not pid:
        return None
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / tick
    rchar = None
    try:
        with open("/proc/%d/io" % pid) as f:
            for ln in f:
                if ln.startswith("rchar:"):
                    rchar = int(ln.split()[1])
    except OSError:
        pass
    return cpu, rchar


def faults():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_majflt


# ---------------------------------------------------------------- GPU parts

def h2d_bandwidth(torch, nbytes=2 << 30, reps=5):
    dev = torch.device("cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    out = {}
    for kind in ("pinned", "pageable"):
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "pinned"))
        src.fill_(1)
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        out[kind] = nbytes / statistics.median(times) / 1e9
        emit(kind="h2d", mem=kind, bytes=nbytes, gbps=out[kind], seconds=statistics.median(times))
        del src
    del dst
    torch.cuda.empty_cache()
    return out


def prefill(torch, model, layers, token_counts, reps):
    from transformers import LlamaConfig, LlamaModel
    cfg = dict(MODELS[model])
    full_layers = cfg["num_hidden_layers"]
    cfg["num_hidden_layers"] = layers
    cfg["max_position_embeddings"] = max(131072, max(token_counts))
    config = LlamaConfig(attn_implementation="sdpa", **cfg)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        m = LlamaModel(config)
    torch.set_default_dtype(torch.float32)
    m.eval()
    emit(kind="model", model=model, layers=layers, params=sum(p.numel() for p in m.parameters()),
         dtype=str(next(m.parameters()).dtype), build_seconds=time.perf_counter() - t0)
    g = torch.Generator(device="cuda").manual_seed(0)
    for T in token_counts:
        ids = torch.randint(0, cfg["vocab_size"], (1, T), device="cuda", generator=g)
        times = []
        with torch.inference_mode():
            for i in range(reps + 1):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                out = m(input_ids=ids, use_cache=True)
                b.record()
                b.synchronize()
                if i > 0:  # the first is the warm-up
                    times.append(a.elapsed_time(b) / 1e3)
                kv = out.past_key_values
                del out
        try:
            k0 = kv.layers[0].keys
        except AttributeError:
            k0 = kv[0][0]
        med = statistics.median(times)
        emit(kind="prefill", model=model, tokens=T, layers=layers, full_layers=full_layers,
             seconds=med, all=times, scaled_seconds=med * full_layers / layers,
             scaled=(layers != full_layers), kv_shape=list(k0.shape), kv_dtype=str(k0.dtype),
             peak_gib=torch.cuda.max_memory_allocated() / 2**30)
        del kv, k0, ids
        torch.cuda.empty_cache()
    del m
    torch.cuda.empty_cache()


def make_verifier(torch, seed, full_tokens=None):
    """Checks tensor s against mkkv's Fill(s, i, seed); with full_tokens, a
    tensor of the first N tokens of a snapshot of full_tokens tokens."""
    M = 0xFFFFFFFF

    def expected(s, n, dev):
        c = (s * 0x9E3779B9 + seed * 0x85EBCA6B) & M
        x = torch.arange(n, dtype=torch.int64, device=dev) ^ c
        x ^= x >> 16
        x = (x * 0x7FEB352D) & M
        x ^= x >> 15
        x = (x * 0x846CA68B) & M
        x ^= x >> 16
        return x

    def verify(s, t):
        got = t.reshape(-1).view(torch.int32).to(torch.int64) & M
        if full_tokens is None or t.shape[2] == full_tokens:
            exp = expected(s, got.numel(), t.device)
        else:
            B, H, N, D = t.shape
            w = D * t.element_size() // 4
            exp = expected(s, B * H * full_tokens * w, t.device).view(B * H, full_tokens, w)[:, :N, :].reshape(-1)
        return bool(torch.equal(got, exp))

    return verify


# ------------------------------------------------------------------ restore

def restore_case(*args, **kw):
    """One restore measurement; a failure is recorded and the run goes on."""
    try:
        _restore_case(*args, **kw)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        emit(kind="error", case=[str(x) for x in args[2:8]], error=repr(e))


def _restore_case(torch, restorers, method, path, source, model, tokens, temp, verify, daemon_pid, reps, prefix=None):
    cold = temp.startswith("cold")
    dropped = drop_caches() if cold else None
    times, extra = [], {}
    extra_st = {}
    log0 = os.path.getsize(FUSE_LOG) if FUSE_LOG and source.startswith("kvfs") else None
    for i in range(1 if cold else reps):
        c0, f0 = proc_cpu(daemon_pid), faults()
        torch.cuda.synchronize()
        if method.startswith("pread"):
            ts, st = restorers(int(method[5:])).restore(path, tokens=prefix)
        elif method == "mmapreg":
            ts, st = kvrestore.restore_mmap_registered(path)
            extra_st = {k: st[k] for k in ("map_seconds", "register_seconds", "copy_seconds", "unregister_seconds")}
        else:
            ts, st = kvrestore.restore_mmap(path, threads=int(method[4:] or 1))
        c1, f1 = proc_cpu(daemon_pid), faults()
        times.append(st["seconds"])
        if i == 0:
            t0 = time.perf_counter()
            ok = all(verify(s, t) for s, t in enumerate(ts))
            extra = dict(verified=ok, verify_seconds=time.perf_counter() - t0, bytes=st["bytes"],
                         minflt=f1[0] - f0[0], majflt=f1[1] - f0[1])
            if c0:
                extra.update(daemon_cpu=c1[0] - c0[0], daemon_rchar=(c1[1] - c0[1]) if c1[1] is not None else None)
            if not ok:
                print("VERIFY FAILED", method, path, file=sys.stderr)
        del ts
    sec = statistics.median(times)
    if log0 is not None:
        extra["fuse"] = fuse_reads(FUSE_LOG, log0)
    extra.update(extra_st)
    emit(kind="restore", model=model, tokens=tokens, source=source, method=method, temp=temp,
         prefix=prefix, dropped=dropped, seconds=sec, all=times, gbps=extra["bytes"] / sec / 1e9, **extra)


def dd_cold(path):
    dropped = drop_caches()
    t0 = time.perf_counter()
    r = subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=16M"], capture_output=True, text=True)
    sec = time.perf_counter() - t0
    size = os.path.getsize(path)
    emit(kind="dd", dropped=dropped, path=path, bytes=size, seconds=sec, gbps=size / sec / 1e9, dd=r.stderr.strip().splitlines()[-1:])


def cmd_size(a):
    import torch
    torch.cuda.init()
    emit(kind="gpu", name=torch.cuda.get_device_name(), torch=torch.__version__,
         cpus=os.cpu_count(), args=vars(a))
    if a.h2d:
        h2d_bandwidth(torch)
    if a.prefill_tokens and a.prefill_tokens != "none":
        prefill(torch, a.model, a.prefill_layers or MODELS[a.model]["num_hidden_layers"],
                [int(x) for x in a.prefill_tokens.split(",")], a.reps)
    if not a.tokens:
        return
    L = MODELS[a.model]["num_hidden_layers"]
    T = a.tokens
    name = "%s-%d.mlxkv" % (a.model, T)
    plain = os.path.join(a.plain_dir, name)
    paths = [plain] + ([os.path.join(a.mount, name)] if a.mount else [])
    for p in paths:
        if os.path.exists(p):
            os.unlink(p)
    r = subprocess.run([a.mkkv, "-layers", str(L), "-heads", str(a.kv_heads), "-headdim", str(a.head_dim), "-tokens", str(T),
                        "-seed", str(a.seed), "-model", "bench/gpu-" + a.model] + paths[::-1],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("mkkv: " + r.stderr)
    emit(kind="write", model=a.model, tokens=T, mkkv=json.loads(r.stdout))
    if a.kvfs:
        r = subprocess.run([a.kvfs, "inspect", plain], capture_output=True, text=True)
        emit(kind="inspect", rc=r.returncode, out=r.stdout.splitlines()[:12], err=r.stderr[-500:])
    dd_cold(plain)
    verify = make_verifier(torch, a.seed)
    pools = {}

    def restorer(n):
        if n not in pools:
            pools[n] = kvrestore.Restorer(threads=n, chunk_bytes=a.chunk_mb << 20)
            emit(kind="pool", threads=n, chunk_bytes=a.chunk_mb << 20, pin_seconds=pools[n].pool_seconds)
        return pools[n]

    # Warm the GPU allocator and the code paths once (not recorded).
    ts, _ = restorer(a.threads).restore(plain)
    del ts
    sources = [("plain", plain)] + ([("kvfs", paths[1])] if a.mount else [])
    for method in filter(None, a.methods.split(",")):
        for source, p in sources:
            for temp in ("cold", "warm"):
                restore_case(torch, restorer, method, p, source, a.model, T, temp, verify,
                             a.daemon_pid if source == "kvfs" else None, a.reps)
    if a.prefix and a.prefix < T:
        pv = make_verifier(torch, a.seed, full_tokens=T)
        if a.mount:
            view = os.path.join(a.mount, ".kvfs", "prefix", name + "@%d" % a.prefix)
            # first open of the view: the daemon hashes the N tokens' bytes (cold)
            for temp in ("cold-first", "cold", "warm"):
                restore_case(torch, restorer, "pread%d" % a.threads, view, "kvfs-view", a.model, a.prefix,
                             temp, pv, a.daemon_pid, a.reps)
        for temp in ("cold", "warm"):
            restore_case(torch, restorer, "pread%d" % a.threads, plain, "plain-rows", a.model, a.prefix,
                         temp, pv, None, a.reps, prefix=a.prefix)
    for spec in filter(None, a.sweep.split(",")):
        spec, _, us = spec.partition("@")  # THREADSxMB[@switch interval in us]
        n, mb = (int(x) for x in spec.split("x"))
        r = kvrestore.Restorer(threads=n, chunk_bytes=mb << 20, switch_interval=(int(us) / 1e6) if us else None)
        for source, p in sources:
            ts, _ = r.restore(p)  # warm the cache and the pool
            del ts
            times = []
            for _ in range(a.reps):
                ts, st = r.restore(p)
                times.append(st["seconds"])
                del ts
            sec = statistics.median(times)
            emit(kind="sweep", model=a.model, tokens=T, source=source, threads=n, chunk_mb=mb, switch_us=int(us or 5000), seconds=sec,
                 all=times, gbps=st["bytes"] / sec / 1e9)
        r.close()
    for r in pools.values():
        r.close()
    if not a.keep:
        for p in paths:
            os.unlink(p)


# -------------------------------------------------------------------- table

def cmd_table(a):
    rows = [json.loads(ln) for ln in open(a.results) if ln.strip()]
    h2d = {r["mem"]: r["gbps"] for r in rows if r["kind"] == "h2d"}
    pin = h2d.get("pinned")
    dd = [r for r in rows if r["kind"] == "dd"]
    out = []
    p = out.append
    p("host-to-device: pinned %.1f GB/s, pageable %.1f GB/s" % (pin or 0, h2d.get("pageable", 0)))
    for r in dd:
        p("dd cold read of %s: %.2f GB in %.2f s = %.2f GB/s" % (os.path.basename(r["path"]), r["bytes"] / 1e9, r["seconds"], r["gbps"]))
    p("")
    p("| model | tokens | prefill s | note |")
    p("|---|---|---|---|")
    for r in rows:
        if r["kind"] == "prefill":
            note = "measured" if not r["scaled"] else "measured on %d of %d layers (%.3f s), scaled linearly" % (r["layers"], r["full_layers"], r["seconds"])
            p("| %s | %d | %.3f | %s |" % (r["model"], r["tokens"], r["scaled_seconds"], note))
    pre = {(r["model"], r["tokens"]): r["scaled_seconds"] for r in rows if r["kind"] == "prefill"}
    rs = [r for r in rows if r["kind"] == "restore"]
    by = {(r["model"], r["tokens"], r["source"], r["method"], r["temp"]): r for r in rs}
    p("")
    p("| model | tokens | GB | method | source | temp | restore s | GB/s | vs pinned H2D | prefill/restore | kvfs/plain | verified | daemon CPU s | faults min/maj |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        base = {"kvfs": "plain", "kvfs-view": "plain-rows"}.get(r["source"])
        ratio = ""
        if base:
            b = by.get((r["model"], r["tokens"], base, r["method"], r["temp"]))
            if b:
                ratio = "%.2f" % (r["seconds"] / b["seconds"])
        pf = pre.get((r["model"], r["tokens"]))
        p("| %s | %d | %.2f | %s | %s | %s | %.3f | %.1f | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["tokens"], r["bytes"] / 1e9, r["method"], r["source"], r["temp"], r["seconds"], r["gbps"],
            ("%.2f" % (r["gbps"] / pin)) if pin else "", ("%.1f" % (pf / r["seconds"])) if pf else "",
            ratio, r.get("verified"), ("%.2f" % r["daemon_cpu"]) if r.get("daemon_cpu") is not None else "",
            "%d/%d" % (r["minflt"], r["majflt"])))
    sw = [r for r in rows if r["kind"] == "sweep"]
    if sw:
        p("")
        p("| warm sweep | source | threads | chunk MiB | GIL switch µs | restore s | GB/s | vs pinned H2D |")
        p("|---|---|---|---|---|---|---|---|")
        for r in sw:
            p("| %s %d | %s | %d | %d | %d | %.3f | %.1f | %s |" % (r["model"], r["tokens"], r["source"], r["threads"], r["chunk_mb"], r.get("switch_us", 5000),
                                                       r["seconds"], r["gbps"], ("%.2f" % (r["gbps"] / pin)) if pin else ""))
    fr = [r for r in rs if r.get("fuse")]
    if fr:
        p("")
        p("| FUSE READs | source | method | temp | requests | MB | sizes (bytes: count) |")
        p("|---|---|---|---|---|---|---|")
        for r in fr:
            f = r["fuse"]
            p("| %s %d | %s | %s | %s | %d | %.0f | %s |" % (r["model"], r["tokens"], r["source"], r["method"], r["temp"], f["reads"],
                                                        f["bytes"] / 1e6, ", ".join("%s: %s" % kv for kv in f["sizes"].items())))
    rg = [r for r in rs if r.get("register_seconds") is not None]
    if rg:
        p("")
        p("| mmap + cudaHostRegister | source | temp | total s | mmap s | register s | copy s | copy GB/s |")
        p("|---|---|---|---|---|---|---|---|")
        for r in rg:
            p("| %s %d | %s | %s | %.3f | %.3f | %.3f | %.3f | %.1f |" % (r["model"], r["tokens"], r["source"], r["temp"], r["seconds"],
                                                                   r["map_seconds"], r["register_seconds"], r["copy_seconds"], r["bytes"] / r["copy_seconds"] / 1e9))
    txt = "\n".join(out)
    print(txt)
    if a.out:
        with open(a.out, "w") as f:
            f.write(txt + "\n")


def main():
    global RESULTS
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("size")
    s.add_argument("--model", choices=sorted(MODELS), default="8b")
    s.add_argument("--prefill-tokens", default="8192,32768", help="comma list; empty: no prefill")
    s.add_argument("--prefill-layers", type=int, default=0, help="layers to build (0: all); times are scaled to all")
    s.add_argument("--tokens", type=int, default=32768, help="snapshot tokens; 0: no restore")
    s.add_argument("--prefix", type=int, default=8192)
    s.add_argument("--threads", type=int, default=16)
    s.add_argument("--chunk-mb", type=int, default=8)
    s.add_argument("--methods", default="pread16,mmap1")
    s.add_argument("--reps", type=int, default=3)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--kv-heads", type=int, default=8)
    s.add_argument("--head-dim", type=int, default=128)
    s.add_argument("--h2d", action="store_true")
    s.add_argument("--plain-dir", required=True)
    s.add_argument("--mount", default="")
    s.add_argument("--daemon-pid", type=int, default=0)
    s.add_argument("--mkkv", required=True)
    s.add_argument("--kvfs", default="")
    s.add_argument("--keep", action="store_true")
    s.add_argument("--sweep", default="", help="warm pread sweep: THREADSxCHUNK_MB,...")
    s.add_argument("--fuse-log", default="", help="the daemon's --debug-fuse log: count READs per kvfs case")
    s.add_argument("--results", required=True)
    t = sub.add_parser("table")
    t.add_argument("results")
    t.add_argument("--out", default="")
    a = ap.parse_args()
    if a.cmd == "size":
        RESULTS = a.results
        global FUSE_LOG
        FUSE_LOG = a.fuse_log or None
        cmd_size(a)
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
