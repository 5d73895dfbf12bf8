#!/usr/bin/env python3
"""Independent reference for the snapshot key chain of common/snapshot_key.h (hashlib only).

Prints the expected values hard-coded in tests/common/snapshot_key_test.cc
(SnapshotKeyTest.KnownAnswers*): the root of a fixed domain, key(p) for a fixed token list at a
few positions, and the ModelFingerprint of a small GGUF assembled here byte by byte from the
GGUF spec (not with common/gguf_writer). Run: python3 tests/common/snapshot_key_reference.py
"""
import hashlib
import struct

BLOCK = 64  # kSnapshotBlockTokens


def u64(v):
    return struct.pack("<Q", v)


def h(data):
    return hashlib.sha256(data).digest()[:16]


def root_key(fingerprint, k_type, v_type, state_type, page_tokens):
    data = u64(len(b"deltaserve-snapshot-v1")) + b"deltaserve-snapshot-v1" + fingerprint
    for s in (k_type, v_type, state_type):
        data += u64(len(s)) + s
    data += u64(page_tokens)
    return h(data)


def tokens_le(tokens):
    return struct.pack("<%di" % len(tokens), *tokens)


def key_at(root, tokens, p):
    block = root
    full = p // BLOCK
    for i in range(full):
        block = h(b"B" + block + tokens_le(tokens[i * BLOCK:(i + 1) * BLOCK]))
    if p % BLOCK == 0:
        return block
    return h(b"T" + block + tokens_le(tokens[full * BLOCK:p]) + u64(p))


def gguf_header():
    """GGUF v3: one string and one u32 key, one F32 tensor 't' of 2 elements; bytes up to the
    (32-aligned) data offset, as GgufFile::header_bytes() returns them."""
    def gstr(s):
        return u64(len(s)) + s
    out = b"GGUF" + struct.pack("<I", 3) + u64(1) + u64(2)
    out += gstr(b"general.architecture") + struct.pack("<I", 8) + gstr(b"qwen35")
    out += gstr(b"test.value") + struct.pack("<I", 4) + struct.pack("<I", 7)
    out += gstr(b"t") + struct.pack("<I", 1) + u64(2) + struct.pack("<I", 0) + u64(0)
    out += b"\0" * (-len(out) % 32)
    return out


def main():
    fingerprint = bytes(range(32))
    root = root_key(fingerprint, b"q8_0", b"f16", b"f32", 256)
    tokens = [(i * 7919 + 13) % 151936 for i in range(150)]
    print("root", root.hex())
    for p in (1, 62, 63, 64, 65, 128, 130, 150):
        print("key", p, key_at(root, tokens, p).hex())
    header = gguf_header()
    print("gguf_header_bytes", len(header))
    print("fingerprint", hashlib.sha256(header).hexdigest())


if __name__ == "__main__":
    main()
