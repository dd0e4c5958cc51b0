#!/usr/bin/env python3
"""An independent reader of safetensors files, for kvfs's tests: it follows
the specification (https://github.com/huggingface/safetensors: an 8-byte
little-endian header length N, N bytes of a JSON object giving each
tensor's dtype, shape and data_offsets relative to the byte after the
header, and optional string metadata under "__metadata__", then the data),
checks each tensor's byte count against its shape and dtype, that the
tensors lie inside the data without overlap and cover it whole, and prints
the tensors by offset as JSON: [name, dtype, shape, begin, end] with begin
and end absolute in the file."""
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
         "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
         "I64": 8, "U64": 8, "F64": 8}

def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    start = 8 + n
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), "metadata must be strings"
    out = []
    for name, t in header.items():
        count = SIZES[t["dtype"]]
        for d in t["shape"]:
            count *= d
        b, e = t["data_offsets"]
        assert e - b == count, f"{name}: {e - b} bytes for {count}"
        out.append([name, t["dtype"], t["shape"], start + b, start + e])
    out.sort(key=lambda x: x[3])
    pos = start
    for t in out:
        assert t[3] == pos, f"{t[0]} starts at {t[3]}, not {pos}"
        pos = t[4]
    assert pos == len(raw), f"data ends at {pos} of {len(raw)}"
    return out

if __name__ == "__main__":
    print(json.dumps(read(sys.argv[1])))
