"""Restore an engine `.mlxkv` KV snapshot (whole layout, formats 3 and 4)
from a path into GPU tensors, fast.

    from kvrestore import Restorer
    r = Restorer(threads=16, chunk_bytes=8 << 20)     # pinned pool, made once
    tensors, st = r.restore("/mnt/kvfs/snap.mlxkv")   # one torch tensor a slot
    r.close()

How: the prefix and JSON header are parsed (../../shared/FORMAT.md §1-2),
every tensor gets its GPU tensor, and the tensor bytes are cut into chunks
(never across tensors: the gaps between them are holes). `threads` workers
take chunks in file order; each owns two pinned host buffers and one CUDA
stream: it `preadv`s a chunk into one buffer while the copy of its previous
chunk out of the other runs (`copy_(non_blocking=True)`, a cudaMemcpyAsync
on its stream), so disk or FUSE reads and host-to-device copies overlap and
many reads are in flight at once. `preadv` releases the GIL; one Python
thread would be bound by its own memory copy.

`restore_mmap` is the simpler baseline: mmap the file and copy each tensor
from the mapping (pageable memory; the driver stages it).
`restore_mmap_registered` registers the mapping with CUDA (read-only
cudaHostRegister of the page cache's own pages) and copies from it with no
staging copy; the registration is paid on every call (needs cupy).

Verification is optional: `verify(slot_index, tensor)` is called for every
tensor after everything is resident, and must raise (or return False) on a
mismatch.

Only the standard library is needed to parse (`read_header`); the restore
needs torch. A `BytesBackend` (host bytearrays, no torch) runs the same
pipeline for tests on machines without a GPU.
"""

import json
import mmap
import os
import struct
import sys
import threading
import time

MAGIC = b"MLXBUNKV2\n"
PREFIX_LEN = 26

# mlx dtype id -> (name, item size); FORMAT.md §2.4
DTYPES = {
    0: ("bool", 1), 1: ("uint8", 1), 2: ("uint16", 2), 3: ("uint32", 4), 4: ("uint64", 8),
    5: ("int8", 1), 6: ("int16", 2), 7: ("int32", 4), 8: ("int64", 8), 9: ("float16", 2),
    10: ("float32", 4), 11: ("float64", 8), 12: ("bfloat16", 2), 13: ("complex64", 8),
}


class Slot:
    __slots__ = ("index", "file_off", "nbytes", "shape", "dtype")

    def __init__(self, index, file_off, nbytes, shape, dtype):
        self.index, self.file_off, self.nbytes, self.shape, self.dtype = index, file_off, nbytes, shape, dtype

    def __repr__(self):
        return "Slot(%d, off=%d, bytes=%d, shape=%s, dtype=%s)" % (
            self.index, self.file_off, self.nbytes, self.shape, DTYPES[self.dtype][0])


class Snapshot:
    """A parsed whole-layout snapshot: header dict, dataStart, slots in
    reading order (caches' tensors, then attachments')."""

    def __init__(self, header, data_start, slots, size):
        self.header, self.data_start, self.slots, self.size = header, data_start, slots, size

    @property
    def tokens(self):
        return len(self.header["tokens"])

    @property
    def tensor_bytes(self):
        return sum(s.nbytes for s in self.slots)


def read_header(path_or_fd):
    """Parse the prefix and JSON header of a whole-layout snapshot."""
    own = isinstance(path_or_fd, (str, bytes, os.PathLike))
    fd = os.open(path_or_fd, os.O_RDONLY) if own else path_or_fd
    try:
        size = os.fstat(fd).st_size
        pre = os.pread(fd, PREFIX_LEN, 0)
        if len(pre) < PREFIX_LEN or pre[:10] != MAGIC:
            raise ValueError("not an .mlxkv snapshot (magic %r)" % pre[:10])
        header_len, data_start = struct.unpack_from("<II", pre, 10)
        js = os.pread(fd, header_len, PREFIX_LEN)
        if len(js) != header_len:
            raise ValueError("short header")
    finally:
        if own:
            os.close(fd)
    h = json.loads(js)
    fv = h.get("formatVersion")
    if fv not in (3, 4):
        raise ValueError("formatVersion %r: only the whole layout (3, 4) is supported" % fv)
    slots = []
    groups = [c["tensors"] for c in h["caches"]] + [a["tensors"] for a in h.get("attachments", [])]
    for group in groups:
        for t in group:
            n = int(t["bytes"])
            _, item = DTYPES[t["dtype"]]
            count = 1
            for d in t["shape"]:
                count *= d
            if count * item != n:
                raise ValueError("slot %d: %d bytes for shape %s" % (len(slots), n, t["shape"]))
            off = data_start + int(t["off"])
            if off + n > size:
                raise ValueError("slot %d runs past the end of the file" % len(slots))
            slots.append(Slot(len(slots), off, n, list(t["shape"]), t["dtype"]))
    return Snapshot(h, data_start, slots, size)


def prefix_plan(snap, tokens):
    """The first `tokens` tokens of every kv tensor ([B, H, T, D], T at
    dim -2, as the engine's kv caches are): new slots of shape [B, H, tokens,
    D] and, for each, the runs (offset in the new tensor, file offset,
    length) that hold them: one a (batch, head), N rows of D each."""
    h = snap.header
    if h.get("attachments"):
        raise ValueError("prefix of a snapshot with attachments")
    out = []
    si = 0
    for c in h["caches"]:
        for t in c["tensors"]:
            s = snap.slots[si]
            si += 1
            if c["kind"] != "kv" or len(s.shape) != 4 or s.shape[2] != c["offset"]:
                raise ValueError("slot %d (%s %s): only kv tensors [B, H, T, D] are cut" % (s.index, c["kind"], s.shape))
            B, H, T, D = s.shape
            if not 0 < tokens <= T:
                raise ValueError("prefix of %d tokens of %d" % (tokens, T))
            row = D * DTYPES[s.dtype][1]
            ns = Slot(s.index, s.file_off, B * H * tokens * row, [B, H, tokens, D], s.dtype)
            runs = [(bh * tokens * row, s.file_off + bh * T * row, tokens * row) for bh in range(B * H)]
            out.append((ns, runs))
    return out


def plan_chunks(slots, chunk_bytes, runs=None):
    """(slot index, offset in slot, file offset, length) in file order, no
    chunk longer than chunk_bytes. runs[i], if given, lists slot i's
    (offset in slot, file offset, length); by default a slot is one run."""
    out = []
    for i, s in enumerate(slots):
        for dst_off, file_off, length in (runs[i] if runs is not None else [(0, s.file_off, s.nbytes)]):
            o = 0
            while o < length:
                n = min(chunk_bytes, length - o)
                out.append((i, dst_off + o, file_off + o, n))
                o += n
    out.sort(key=lambda c: c[2])
    return out


def _pread_full(fd, mv, off):
    got = 0
    n = len(mv)
    while got < n:
        r = os.preadv(fd, [mv[got:]], off + got)
        if r <= 0:
            raise IOError("short read at %d: %d of %d bytes" % (off, got, n))
        got += r
    return got


class TorchBackend:
    """GPU tensors, pinned staging buffers, one stream a worker."""

    def __init__(self, device="cuda"):
        import torch
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def dtype(self, mlx_dtype):
        return getattr(self.torch, DTYPES[mlx_dtype][0])

    def alloc_staging(self, n):
        t = self.torch.empty(n, dtype=self.torch.uint8, pin_memory=self.cuda)
        import ctypes
        mv = memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")
        return t, mv

    def alloc_dst(self, slot):
        t = self.torch.empty(slot.shape, dtype=self.dtype(slot.dtype), device=self.device)
        return t, t.view(-1).view(self.torch.uint8)

    def new_stream(self):
        return self.torch.cuda.Stream(self.device) if self.cuda else None

    def copy(self, stream, dst_bytes, off, staging, n, event):
        """Queue dst_bytes[off:off+n] = staging[:n]; return a waitable."""
        if not self.cuda:
            dst_bytes[off:off + n].copy_(staging[:n])
            return None
        torch = self.torch
        with torch.cuda.stream(stream):
            dst_bytes[off:off + n].copy_(staging[:n], non_blocking=True)
            if event is None:
                event = torch.cuda.Event()
            event.record(stream)
        return event

    def wait(self, event):
        if event is not None:
            event.synchronize()

    def synchronize(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)


class BytesBackend:
    """The same pipeline into host bytearrays: for tests without torch."""

    def alloc_staging(self, n):
        b = bytearray(n)
        return b, memoryview(b)

    def alloc_dst(self, slot):
        b = bytearray(slot.nbytes)
        return b, memoryview(b)

    def new_stream(self):
        return None

    def copy(self, stream, dst_bytes, off, staging, n, event):
        dst_bytes[off:off + n] = memoryview(staging)[:n]
        return None

    def wait(self, event):
        pass

    def synchronize(self):
        pass


class Restorer:
    """A restore routine with its pinned pool (threads x 2 x chunk_bytes),
    made once and reused, as an engine would."""

    def __init__(self, threads=16, chunk_bytes=8 << 20, backend=None, device="cuda", switch_interval=None):
        self.threads = threads
        self.chunk_bytes = chunk_bytes
        # Python's GIL switch interval (s) while a restore runs; None keeps
        # the interpreter's (5 ms by default). A worker back from preadv
        # waits for the GIL up to this long when another thread holds it.
        self.switch_interval = switch_interval
        self.backend = backend if backend is not None else TorchBackend(device)
        t0 = time.perf_counter()
        self.pool = [[self.backend.alloc_staging(chunk_bytes) for _ in range(2)] for _ in range(threads)]
        self.streams = [self.backend.new_stream() for _ in range(threads)]
        self.events = [[None, None] for _ in range(threads)]
        self.pool_seconds = time.perf_counter() - t0

    def restore(self, path, verify=None, snapshot=None, tokens=None):
        """Read every tensor of the snapshot at path into the backend's
        tensors; with tokens, only the first `tokens` tokens' rows of each
        kv tensor (a prefix read from the full file). Returns (tensors,
        stats)."""
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            snap = snapshot or read_header(fd)
            t_header = time.perf_counter()
            be = self.backend
            if tokens is not None and tokens != snap.tokens:
                plan = prefix_plan(snap, tokens)
                slots = [p[0] for p in plan]
                chunks = plan_chunks(slots, self.chunk_bytes, [p[1] for p in plan])
            else:
                slots = snap.slots
                chunks = plan_chunks(slots, self.chunk_bytes)
            dst = [be.alloc_dst(s) for s in slots]
            lock = threading.Lock()
            nxt = [0]
            errors = []

            def worker(w):
                bufs = self.pool[w]
                evs = self.events[w]
                pending = [False, False]
                k = 0
                try:
                    while True:
                        with lock:
                            j = nxt[0]
                            nxt[0] += 1
                        if j >= len(chunks) or errors:
                            break
                        si, soff, foff, n = chunks[j]
                        b = k & 1
                        if pending[b]:
                            be.wait(evs[b])  # the copy out of this buffer is done
                        staging, mv = bufs[b]
                        _pread_full(fd, mv[:n], foff)
                        evs[b] = be.copy(self.streams[w], dst[si][1], soff, staging, n, evs[b])
                        pending[b] = True
                        k += 1
                    for b in (0, 1):
                        if pending[b]:
                            be.wait(evs[b])
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            ths = [threading.Thread(target=worker, args=(w,)) for w in range(min(self.threads, max(1, len(chunks))))]
            old_si = sys.getswitchinterval()
            if self.switch_interval:
                sys.setswitchinterval(self.switch_interval)
            try:
                for t in ths:
                    t.start()
                for t in ths:
                    t.join()
            finally:
                sys.setswitchinterval(old_si)
            if errors:
                raise errors[0]
            be.synchronize()
        finally:
            os.close(fd)
        t1 = time.perf_counter()
        tensors = [d[0] for d in dst]
        st = {"seconds": t1 - t0, "header_seconds": t_header - t0, "bytes": sum(s.nbytes for s in slots),
              "chunks": len(chunks), "threads": self.threads, "chunk_bytes": self.chunk_bytes}
        if verify is not None:
            for i, t in enumerate(tensors):
                if verify(i, t) is False:
                    raise ValueError("%s: tensor %d differs" % (path, i))
            st["verify_seconds"] = time.perf_counter() - t1
        return tensors, st

    def close(self):
        self.pool = []
        self.streams = []
        self.events = []


def restore_mmap(path, device="cuda", threads=1, verify=None):
    """Baseline: mmap the file, copy each tensor from the mapping (pageable)
    to a new GPU tensor; with threads > 1, tensors are copied in parallel,
    one stream a thread."""
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    import torch
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        snap = read_header(fd)
        mm = mmap.mmap(fd, snap.size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    dev = torch.device(device)
    out = [None] * len(snap.slots)
    streams = [torch.cuda.Stream(dev) for _ in range(threads)] if dev.type == "cuda" and threads > 1 else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frombuffer of a read-only mapping

            def one(i):
                s = snap.slots[i]
                src = torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.file_off)
                t = torch.empty(s.shape, dtype=getattr(torch, DTYPES[s.dtype][0]), device=dev)
                t.view(-1).view(torch.uint8).copy_(src)
                del src
                out[i] = t

            if threads > 1:
                def group(w):
                    if streams is not None:
                        with torch.cuda.stream(streams[w]):
                            for i in range(w, len(snap.slots), threads):
                                one(i)
                            streams[w].synchronize()
                    else:
                        for i in range(w, len(snap.slots), threads):
                            one(i)
                with ThreadPoolExecutor(threads) as ex:
                    list(ex.map(group, range(threads)))
            else:
                for i in range(len(snap.slots)):
                    one(i)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
    finally:
        mm.close()
    t1 = time.perf_counter()
    st = {"seconds": t1 - t0, "bytes": snap.tensor_bytes, "threads": threads}
    if verify is not None:
        for i, t in enumerate(out):
            if verify(i, t) is False:
                raise ValueError("%s: tensor %d differs" % (path, i))
        st["verify_seconds"] = time.perf_counter() - t1
    return out, st


def restore_mmap_registered(path, device="cuda", read_only=True):
    """mmap the file, register the mapping with CUDA (cudaHostRegister,
    read-only: the page cache's own pages, pinned in place) and copy each
    tensor with cudaMemcpyAsync straight from them: no copy into a staging
    buffer. Needs cupy for the two runtime calls. Returns (tensors, stats)
    with the registration's and the copies' times apart."""
    import ctypes

    import cupy
    import torch
    rt = cupy.cuda.runtime
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    try:
        snap = read_header(fd)
        addr = libc.mmap(None, snap.size, mmap.PROT_READ, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0x8000), fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
    finally:
        os.close(fd)
    t_map = time.perf_counter()
    flags = 0x08 if read_only else 0  # cudaHostRegisterReadOnly
    rt.hostRegister(addr, snap.size, flags)
    t_reg = time.perf_counter()
    dev = torch.device(device)
    out = []
    stream = torch.cuda.Stream(dev)
    with torch.cuda.stream(stream):
        for s in snap.slots:
            t = torch.empty(s.shape, dtype=getattr(torch, DTYPES[s.dtype][0]), device=dev)
            rt.memcpyAsync(t.data_ptr(), addr + s.file_off, s.nbytes, 1, stream.cuda_stream)  # HostToDevice
            out.append(t)
    stream.synchronize()
    t_copy = time.perf_counter()
    rt.hostUnregister(addr)
    libc.munmap(addr, snap.size)
    t1 = time.perf_counter()
    return out, {"seconds": t_copy - t0, "map_seconds": t_map - t0, "register_seconds": t_reg - t_map,
                 "copy_seconds": t_copy - t_reg, "unregister_seconds": t1 - t_copy, "bytes": snap.tensor_bytes}
