#!/usr/bin/env python3
"""Time each step of the engine's blocks protocol (FORMAT.md §4) in DIR.

Per file: open(blocks/<sha256>.tmp, O_CREAT|O_TRUNC) · write · fsync ·
close · rename(tmp, blocks/<sha256>). Prints the median of each step and
of the whole, in ms. Run it against a kvfs mount and a plain directory on
the same disk, alternating, and compare the lines of one run.

    python3 bench/durable/steps.py MNT 1048576 100
    python3 bench/durable/steps.py /var/tmp/plain 1048576 100

A plain directory's write step shows what this machine's fresh pages
cost: its first run after the previous files were removed reuses their
page cache pages (0.13 ms per MiB here), the next runs need new ones
(2.4-2.7 ms per MiB in these VMs; docs/BENCHMARKS.md, "Fresh pages").
"""
import hashlib
import os
import statistics
import sys
import time


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: steps.py DIR SIZE COUNT")
    d, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(os.path.join(d, "blocks"), exist_ok=True)
    names = ["open", "write", "fsync", "close", "rename", "total"]
    steps = {k: [] for k in names}
    for _ in range(count):
        b = os.urandom(size)
        h = hashlib.sha256(b).hexdigest()
        tmp = os.path.join(d, "blocks", h + ".tmp")
        t0 = time.perf_counter()
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        t1 = time.perf_counter()
        os.write(fd, b)
        t2 = time.perf_counter()
        os.fsync(fd)
        t3 = time.perf_counter()
        os.close(fd)
        t4 = time.perf_counter()
        os.rename(tmp, os.path.join(d, "blocks", h))
        t5 = time.perf_counter()
        for k, a, z in zip(names, (t0, t1, t2, t3, t4, t0), (t1, t2, t3, t4, t5, t5)):
            steps[k].append((z - a) * 1e3)
    print(d, size, " ".join(f"{k}={statistics.median(steps[k]):.3f}" for k in names))


if __name__ == "__main__":
    main()
