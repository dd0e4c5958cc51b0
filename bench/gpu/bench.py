"""bench/gpu: restoring a KV cache into GPU memory from a kvfs mount and
from a plain file, against recomputing it (prefill). Run through
bench/gpu/run (which builds or finds the binaries, mounts kvfs and calls
this once per model size); `bench.py table RESULTS.jsonl` prints the table.

Every measurement is one JSON line appended to --results.
"""

import argparse
import json
import os
import shutil
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


class Daemon:
    """The kvfs daemon of the kvfs cases, mounted again for each case with
    its own --cpu-profile (CASE.prof under profile_dir), so that every case
    has a profile of its own. An unmount takes the mount's page cache with
    it: a warm case reads the file once (untimed) after its mount."""

    def __init__(self, kvfs, store, mnt, profile_dir, trace=False):
        self.kvfs, self.store, self.mnt, self.dir, self.trace = kvfs, store, mnt, profile_dir, trace
        self.p = None
        self.pid = None
        self.log = None
        self.case = None
        os.makedirs(profile_dir, exist_ok=True)

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(ln.split()[1] == self.mnt and ln.split()[2].startswith("fuse") for ln in f)

    def start(self, case):
        self.stop()
        self.case = case
        self.log = os.path.join(self.dir, case + ".log")
        cmd = [self.kvfs, "mount", "--foreground", "--cpu-profile", os.path.join(self.dir, case + ".prof")]
        if self.trace:
            cmd += ["--debug-fuse", "--log-level", "debug"]
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.log, "wb") as lf:
            self.p = subprocess.Popen(cmd + [self.store, self.mnt], stderr=lf, stdout=lf)
        for _ in range(300):
            if self.mounted():
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        if not self.mounted():
            raise RuntimeError("kvfs did not mount: " + open(self.log, errors="replace").read()[-2000:])
        self.pid = self.p.pid

    def stop(self):
        if self.p is None:
            return
        r = subprocess.run([self.kvfs, "unmount", self.mnt], capture_output=True, text=True)
        if r.returncode != 0:
            self.p.terminate()
        try:
            self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p = self.pid = None
        if not self.trace and self.log and os.path.getsize(self.log) == 0:
            os.unlink(self.log)


DAEMON = None
DRY = False  # --dry: no torch, no GPU: host buffers, no verification


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


def run_method(torch, restorers, method, path, prefix=None):
    if torch is not None:
        torch.cuda.synchronize()
    if method.startswith("pread"):
        return restorers(int(method[5:])).restore(path, tokens=prefix)
    if method == "mmapreg":
        return kvrestore.restore_mmap_registered(path)
    if DRY:
        return dry_mmap(path)
    return kvrestore.restore_mmap(path, threads=int(method[4:] or 1))


def dry_mmap(path):
    """--dry's mmap method: copy each tensor out of a mapping into bytes."""
    import mmap
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        snap = kvrestore.read_header(f.fileno())
        mm = mmap.mmap(f.fileno(), snap.size, prot=mmap.PROT_READ)
    out = [bytes(mm[s.file_off:s.file_off + s.nbytes]) for s in snap.slots]
    mm.close()
    return out, {"seconds": time.perf_counter() - t0, "bytes": snap.tensor_bytes}


def _restore_case(torch, restorers, method, path, source, model, tokens, temp, verify, daemon, reps, prefix=None):
    cold = temp.startswith("cold")
    extra_st = {}
    extra = {}
    case = None
    pid = None
    if daemon is not None:
        # A mount of its own, and so a CPU profile of its own, for this case.
        case = "%s-%d-%s-%s-%s" % (model, tokens, source, method, temp)
        daemon.start(case)
        pid = daemon.pid
        extra["profile"] = case + ".prof"
        prep = None
        if not cold:
            prep = "read once after the mount (fills its page cache)"
        elif source == "kvfs-view" and temp != "cold-first":
            prep = "first open (the view's hashes), then caches dropped"
        if prep:
            c0 = proc_cpu(pid)
            t0 = time.perf_counter()
            ts, _ = run_method(torch, restorers, method, path, prefix)
            del ts
            c1 = proc_cpu(pid)
            extra.update(prep=prep, prep_seconds=time.perf_counter() - t0, prep_daemon_cpu=c1[0] - c0[0])
    dropped = drop_caches() if cold else None
    times = []
    log0 = os.path.getsize(daemon.log) if daemon is not None and daemon.trace else None
    for i in range(1 if cold else reps):
        c0, f0 = proc_cpu(pid), faults()
        ts, st = run_method(torch, restorers, method, path, prefix)
        c1, f1 = proc_cpu(pid), faults()
        if method == "mmapreg":
            extra_st = {k: st[k] for k in ("map_seconds", "register_seconds", "copy_seconds", "unregister_seconds")}
        times.append(st["seconds"])
        if i == 0:
            t0 = time.perf_counter()
            ok = all(verify(s, t) for s, t in enumerate(ts)) if verify else None
            extra.update(verified=ok, verify_seconds=time.perf_counter() - t0, bytes=st["bytes"],
                         minflt=f1[0] - f0[0], majflt=f1[1] - f0[1])
            if c0:
                extra.update(daemon_cpu=c1[0] - c0[0], daemon_rchar=(c1[1] - c0[1]) if c1[1] is not None else None)
            if ok is False:
                print("VERIFY FAILED", method, path, file=sys.stderr)
        elif c0:
            extra["daemon_cpu_reps"] = extra.get("daemon_cpu_reps", 0) + c1[0] - c0[0]
        del ts
    sec = statistics.median(times)
    if log0 is not None:
        extra["fuse"] = fuse_reads(daemon.log, log0)
    extra.update(extra_st)
    if daemon is not None:
        extra["daemon_cpu_mount"] = proc_cpu(pid)[0]  # the mount's whole life: what its profile covers
        daemon.stop()  # writes the case's profile
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
    global DAEMON
    if DRY:
        torch = None
        emit(kind="gpu", name="none (--dry: host buffers, no verification)", cpus=os.cpu_count(), args=vars(a))
    else:
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
    daemon = None
    if a.mount:
        daemon = DAEMON = Daemon(a.kvfs, a.store, a.mount, a.profile_dir, trace=a.fuse_trace)
    mnt_path = os.path.join(a.mount, name) if a.mount else None
    for p in [plain]:
        if os.path.exists(p):
            os.unlink(p)
    # Both copies at once, or one after the other (each written, restored
    # and removed before the next) when the disk cannot hold both.
    need = L * 2 * a.kv_heads * a.head_dim * T * 2
    free = shutil.disk_usage(a.plain_dir).free
    seq = a.sequential or (a.mount and free < 2 * need + (2 << 30))
    emit(kind="disk", path=a.plain_dir, free=free, snapshot_bytes=need, sequential=bool(seq))
    if a.mount and free < need + (1 << 30):
        emit(kind="warn", msg="the disk cannot hold one copy: %d free, %d needed" % (free, need))
        return
    sources = [("plain", plain)] + ([("kvfs", mnt_path)] if a.mount else [])
    groups = [[s] for s in sources] if seq else [sources]
    verify = None if DRY else make_verifier(torch, a.seed)
    pools = {}

    def restorer(n):
        if n not in pools:
            be = kvrestore.BytesBackend() if DRY else None
            pools[n] = kvrestore.Restorer(threads=n, chunk_bytes=a.chunk_mb << 20, backend=be)
            emit(kind="pool", threads=n, chunk_bytes=a.chunk_mb << 20, pin_seconds=pools[n].pool_seconds)
        return pools[n]

    warmed = False
    for group in groups:
        names = [src for src, _ in group]
        if "kvfs" in names:
            daemon.start("%s-%d-kvfs-write" % (a.model, T))  # the write's profile
        paths = [p for _, p in group]
        r = subprocess.run([a.mkkv, "-layers", str(L), "-heads", str(a.kv_heads), "-headdim", str(a.head_dim), "-tokens", str(T),
                            "-seed", str(a.seed), "-model", "bench/gpu-" + a.model] + paths[::-1],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("mkkv: " + r.stderr)
        wcpu = proc_cpu(daemon.pid)[0] if "kvfs" in names else None
        emit(kind="write", model=a.model, tokens=T, sources=names, mkkv=json.loads(r.stdout), daemon_cpu=wcpu)
        if "kvfs" in names:
            daemon.stop()
        if "plain" in names:
            if a.kvfs:
                r = subprocess.run([a.kvfs, "inspect", plain], capture_output=True, text=True)
                emit(kind="inspect", rc=r.returncode, out=r.stdout.splitlines()[:12], err=r.stderr[-500:])
            dd_cold(plain)
        if not warmed:
            # Warm the GPU allocator and the code paths once (not recorded).
            if "kvfs" in names and "plain" not in names:
                daemon.start("%s-%d-warmup" % (a.model, T))
            ts, _ = restorer(a.threads).restore(paths[0])
            del ts
            if "kvfs" in names and "plain" not in names:
                daemon.stop()
            warmed = True
        for method in filter(None, a.methods.split(",")):
            for source, p in group:
                for temp in ("cold", "warm"):
                    restore_case(torch, restorer, method, p, source, a.model, T, temp, verify,
                                 daemon if source == "kvfs" else None, a.reps)
        if a.prefix and a.prefix < T:
            pv = None if DRY else make_verifier(torch, a.seed, full_tokens=T)
            if "kvfs" in names:
                view = os.path.join(a.mount, ".kvfs", "prefix", name + "@%d" % a.prefix)
                # cold-first: the first open of the view after the mount,
                # where the daemon hashes the N tokens' bytes
                for temp in ("cold-first", "cold", "warm"):
                    restore_case(torch, restorer, "pread%d" % a.threads, view, "kvfs-view", a.model, a.prefix,
                                 temp, pv, daemon, a.reps)
            if "plain" in names:
                for temp in ("cold", "warm"):
                    restore_case(torch, restorer, "pread%d" % a.threads, plain, "plain-rows", a.model, a.prefix,
                                 temp, pv, None, a.reps, prefix=a.prefix)
        for spec in filter(None, a.sweep.split(",")):
            spec, _, us = spec.partition("@")  # THREADSxMB[@switch interval in us]
            n, mb = (int(x) for x in spec.split("x"))
            r = kvrestore.Restorer(threads=n, chunk_bytes=mb << 20, switch_interval=(int(us) / 1e6) if us else None,
                                   backend=kvrestore.BytesBackend() if DRY else None)
            for source, p in group:
                if source == "kvfs":
                    daemon.start("%s-%d-kvfs-sweep-%dx%d" % (a.model, T, n, mb))
                ts, _ = r.restore(p)  # warm the cache and the pool
                del ts
                times = []
                for _ in range(a.reps):
                    ts, st = r.restore(p)
                    times.append(st["seconds"])
                    del ts
                if source == "kvfs":
                    daemon.stop()
                sec = statistics.median(times)
                emit(kind="sweep", model=a.model, tokens=T, source=source, threads=n, chunk_mb=mb, switch_us=int(us or 5000), seconds=sec,
                     all=times, gbps=st["bytes"] / sec / 1e9)
            r.close()
        if not a.keep:
            if "kvfs" in names:
                daemon.start("%s-%d-kvfs-remove" % (a.model, T))
            for p in paths:
                os.unlink(p)
            if "kvfs" in names:
                daemon.stop()
    for r in pools.values():
        r.close()


# -------------------------------------------------------------------- table

def cmd_table(a):
    rows = [json.loads(ln) for path in a.results for ln in open(path) if ln.strip()]
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


# Where a daemon's CPU goes: the cumulative time of these functions.
PROFILE_PARTS = [
    ("splice pack->pipe", "github.com/hanwen/go-fuse/v2/splice.(*Pair).LoadFromAt"),
    ("splice pipe->/dev/fuse", "github.com/hanwen/go-fuse/v2/splice.(*Pair).WriteToFlags"),
    ("chunk lookup (index)", "github.com/kvfs/kvfs/store.(*File).Segments"),
    ("reading requests", "github.com/hanwen/go-fuse/v2/fuse.(*fuseFD).readRequest"),
    ("sha256", "crypto/internal/fips140/sha256.blockSHANI"),
    ("spool writes", "github.com/kvfs/kvfs/fs.(*spool).writeData"),
    ("view resolve (first lookup)", "github.com/kvfs/kvfs/fs.(*prefixFile).resolve"),
    ("view reads (pread, copy)", "github.com/kvfs/kvfs/fs.(*prefixReader).Read"),
    ("writev to /dev/fuse", "github.com/hanwen/go-fuse/v2/fuse.(*fuseFD).writevFD"),
    ("unlink", "github.com/kvfs/kvfs/store.(*Store).RemoveAt"),
    ("GC", "runtime.gcBgMarkWorker"),
]


def pprof_seconds(v):
    for unit, m in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        if v.endswith(unit):
            try:
                return float(v[:-len(unit)]) * m
            except ValueError:
                continue
    return None


def cmd_profiles(a):
    """`go tool pprof -top` of every CASE.prof in a directory: the whole
    listing (profiles-top.txt) and the top functions of each (profiles.md)."""
    go = a.go or shutil.which("go")
    if not go:
        print("bench.py profiles: no go to run pprof with", file=sys.stderr)
        return
    rows = {}
    if a.results:
        for ln in open(a.results):
            r = json.loads(ln)
            if r.get("profile"):
                rows[r["profile"]] = r
    full, md, parts = [], [], []
    md.append("| case | restore s | daemon CPU s (timed / prep / mount) | profile: samples | top functions (flat %) |")
    md.append("|---|---|---|---|---|")
    for name in sorted(os.listdir(a.dir)):
        if not name.endswith(".prof"):
            continue
        path = os.path.join(a.dir, name)
        r = subprocess.run([go, "tool", "pprof", "-top", "-nodecount=%d" % a.nodes, path], capture_output=True, text=True)
        full.append("==== %s\n%s%s" % (name, r.stdout, r.stderr))
        total, top = "", []
        body = False
        for ln in r.stdout.splitlines():
            if "Total samples" in ln:
                total = ln.split("Total samples =")[1].strip()
            elif ln.strip().startswith("flat"):
                body = True
            elif body and len(top) < a.top:
                f = ln.split()
                if len(f) >= 6:
                    fn = " ".join(f[5:])
                    fn = fn.replace("github.com/hanwen/go-fuse/v2/", "go-fuse/").replace("github.com/kvfs/kvfs/", "")
                    if f[1] not in ("0%", "0.00%"):
                        top.append("%s %s" % (fn.replace("internal/runtime/syscall/linux.", ""), f[1]))
        cum = {}
        rc = subprocess.run([go, "tool", "pprof", "-top", "-cum", "-nodecount=2000", path], capture_output=True, text=True)
        for ln in rc.stdout.splitlines():
            f = ln.split(None, 5)
            if len(f) == 6 and f[4].endswith("%"):
                sec = pprof_seconds(f[3])
                if sec is not None:
                    cum[f[5].replace(" (inline)", "")] = sec
        parts.append((name[:-5], total, [cum.get(fn) for _, fn in PROFILE_PARTS]))
        c = rows.get(name, {})
        cpu = " / ".join("%.2f" % c[k] if c.get(k) is not None else "-" for k in ("daemon_cpu", "prep_daemon_cpu", "daemon_cpu_mount"))
        rs = ("%.3f" % c["seconds"]) if c.get("seconds") is not None else ""
        md.append("| %s | %s | %s | %s | %s |" % (name[:-5], rs, cpu if c else "", total or "none", "; ".join(top)))
    md.append("")
    md.append("| case | profile samples | " + " | ".join(lbl for lbl, _ in PROFILE_PARTS) + " |")
    md.append("|---|---|" + "---|" * len(PROFILE_PARTS))
    for name, total, secs in parts:
        md.append("| %s | %s | %s |" % (name, total.split(" ")[0] if total else "none",
                                         " | ".join(("%.2f" % x) if x else "" for x in secs)))
    md.append("")
    md.append("(cumulative seconds of the daemon's CPU in each part, from `go tool pprof -top -cum`; "
              "a case's profile covers its mount's whole life: for a warm case, the untimed read after the mount)")
    with open(os.path.join(a.out, "profiles-top.txt"), "w") as f:
        f.write("\n".join(full))
    with open(os.path.join(a.out, "profiles.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


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
    s.add_argument("--mount", default="", help="mount kvfs here (a mount a case) from --store")
    s.add_argument("--store", default="")
    s.add_argument("--profile-dir", default="", help="the daemon's CPU profile a case: CASE.prof (and CASE.log)")
    s.add_argument("--fuse-trace", action="store_true", help="--debug-fuse daemons: count READs per kvfs case")
    s.add_argument("--sequential", action="store_true", help="one copy on disk at a time (the default when both do not fit)")
    s.add_argument("--dry", action="store_true", help="no torch or GPU: host buffers, no verification (to test the plumbing)")
    s.add_argument("--mkkv", required=True)
    s.add_argument("--kvfs", default="")
    s.add_argument("--keep", action="store_true")
    s.add_argument("--sweep", default="", help="warm pread sweep: THREADSxCHUNK_MB,...")
    s.add_argument("--results", required=True)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+", help="results.jsonl files of one machine (one table)")
    t.add_argument("--out", default="")
    pp = sub.add_parser("profiles")
    pp.add_argument("dir")
    pp.add_argument("--results", default="", help="results.jsonl: the cases' times and daemon CPU")
    pp.add_argument("--out", default=".")
    pp.add_argument("--go", default="")
    pp.add_argument("--nodes", type=int, default=25)
    pp.add_argument("--top", type=int, default=6)
    a = ap.parse_args()
    if a.cmd == "profiles":
        cmd_profiles(a)
        return
    if a.cmd == "size":
        RESULTS = a.results
        global DRY
        DRY = a.dry
        try:
            cmd_size(a)
        finally:
            if DAEMON is not None:
                DAEMON.stop()
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
