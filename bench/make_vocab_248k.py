#!/usr/bin/env python3
"""A SYNTHETIC 248K-token vocabulary-only GGUF for the grammar benchmark (issue 13).

Issue 13 asks for mask times on the 248K Qwen3.5 vocabulary; no GGUF with that tokenizer is in
the tree and none can be downloaded here. This script grows the 151,936-token Qwen3 vocabulary of
../shared/golden/qwen3-vocab-qwen35pre.gguf into one of Qwen3.5's size and id layout:

  ids 0..151642        Qwen3's byte-level BPE tokens, unchanged (merges unchanged, same order)
  ids 151643..248043   96,401 NEW normal tokens, each the concatenation of two existing tokens
                       a+b, with the merge "a b" appended after Qwen3's merges (lowest priority)
  ids 248044..248069   Qwen3's 26 added tokens, moved by +96,401 as in Qwen3.5
                       (<|endoftext|> 248044, <|im_end|> 248046, <tool_call> 248058, ...)
  ids 248070..248319   [PADn], to Qwen3.5's 248,320 embedding rows

So the tokenizer stays a valid BPE: a pair is kept only if the text a+b is one pre-token of the
Qwen3.5 pre-tokenizer regex, is NFC, is not already a token, and the BPE so far splits it into
exactly [a, b]; the appended merge then turns that text into the new token (checked after writing
with `deltaserve-gguf tokenize`, see bench/README.md). The pairs are drawn with a fixed seed and
a mix meant to resemble real vocabulary growth (Qwen3.5 added mostly multilingual words): pieces
drawn with a bias towards low ids (early merges = frequent pieces), both halves from the same
script; leading-space Latin words, word-internal pieces, other alphabets (Cyrillic, Arabic,
Devanagari, ...), CJK, and a few punctuation/code runs. The token STRINGS are synthetic (not
Qwen3.5's), so only sizes and shapes are representative: 248,320 ids, a deeper, larger token trie.

  build/bench-venv/bin/python bench/make_vocab_248k.py \
      [--base ../shared/golden/qwen3-vocab-qwen35pre.gguf] [--out build/bench/vocab-248k-synthetic.gguf]

Needs gguf==0.19.0 and regex==2024.11.6 (PyPI); downloads nothing. The GGUF is not committed.
"""

import argparse
import random
import sys
import unicodedata

import gguf
import regex

# Qwen3.5's pre-tokenizer (../shared/docs/MODEL_SPEC.md 5.1).
PRE_TOKENIZER = regex.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN3_FIRST_ADDED = 151643   # <|endoftext|> in Qwen3
QWEN35_FIRST_ADDED = 248044  # <|endoftext|> in Qwen3.5
N_NEW = QWEN35_FIRST_ADDED - QWEN3_FIRST_ADDED  # 96,401
N_ROWS = 248320              # Qwen3.5's embedding rows (tokenizer uses up to 248,076)
MAX_BYTES = 32               # longest new token

# Kinds of new token and their share; "start" = a leading space then letters, "cont" = letters.
KINDS = [
    ("latin start+cont", 0.34),
    ("latin cont+cont", 0.14),
    ("other start+cont", 0.17),
    ("other cont+cont", 0.12),
    ("cjk cont+cont", 0.17),
    ("punct", 0.06),
]


def bytes_to_unicode():
    """GPT-2's byte <-> printable character map used by byte-level BPE token strings."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def token_text(piece):
    """The UTF-8 text of a byte-level token string, or None if its bytes are not whole UTF-8."""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in piece).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None


def script_of(text):
    """The one script of the letters in text ('CJK' for Han and kana), or None if mixed/none."""
    scripts = set()
    for ch in text:
        cat = unicodedata.category(ch)
        if cat.startswith("L"):
            name = unicodedata.name(ch, "")
            word = name.split(" ")[0] if name else "?"
            if word in ("CJK", "HIRAGANA", "KATAKANA", "HALFWIDTH", "FULLWIDTH"):
                word = "CJK"
            scripts.add(word)
        elif not cat.startswith("M"):
            return None
    return scripts.pop() if len(scripts) == 1 else None


def classify(text):
    """(pool name, script) of a piece, or None if it is not a piece new tokens are made of."""
    if not text:
        return None
    if text[0] == " " and len(text) > 1:
        s = script_of(text[1:])
        return ("start", s) if s else None
    s = script_of(text)
    if s:
        return ("cont", s)
    body = text.lstrip(" ").rstrip("\r\n")
    if body and all(not ch.isspace() and not unicodedata.category(ch)[0] in "LMN" for ch in body):
        return ("punct", None)
    return None


def read_base(path):
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]]

    return {
        "tokens": strings("tokenizer.ggml.tokens"),
        "types": ints("tokenizer.ggml.token_type"),
        "merges": strings("tokenizer.ggml.merges"),
        "bos": int(scalar("tokenizer.ggml.bos_token_id")[0]),
        "eos": int(scalar("tokenizer.ggml.eos_token_id")[0]),
        "pad": int(scalar("tokenizer.ggml.padding_token_id")[0]),
        "pre": bytes(scalar("tokenizer.ggml.pre")).decode("utf-8"),
        "template": bytes(scalar("tokenizer.chat_template")).decode("utf-8"),
    }


class Bpe:
    """Byte-level BPE over token strings: the lowest-ranked adjacent pair merges first."""

    def __init__(self, merges):
        self.ranks = {}
        for m in merges:
            self.add(m)

    def add(self, merge):
        left, right = merge.split(" ")
        self.ranks[(left, right)] = len(self.ranks)

    def encode(self, piece):
        parts = list(piece)
        ranks = self.ranks
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="../shared/golden/qwen3-vocab-qwen35pre.gguf")
    ap.add_argument("--out", default="build/bench/vocab-248k-synthetic.gguf")
    ap.add_argument("--seed", type=int, default=248)
    ap.add_argument("--samples", default=None,
                    help="also write N=40 sample new tokens as JSON lines {id, text} here")
    args = ap.parse_args()

    base = read_base(args.base)
    tokens, types = base["tokens"], base["types"]
    assert len(tokens) == 151936 and tokens[QWEN3_FIRST_ADDED] == "<|endoftext|>", "not Qwen3"
    n_bpe = QWEN3_FIRST_ADDED
    added = [(tokens[i], types[i]) for i in range(n_bpe, len(tokens))
             if not tokens[i].startswith("[PAD")]
    pad_type = next(types[i] for i in range(len(tokens)) if tokens[i].startswith("[PAD"))

    bpe = Bpe(base["merges"])
    known = set(tokens[:n_bpe])
    pools = {}  # (kind, script) -> [token strings], in id order (early merges = frequent)
    for piece in tokens[:n_bpe]:
        text = token_text(piece)
        c = classify(text) if text is not None else None
        if c:
            pools.setdefault(c, []).append(piece)
    by_kind = {"start": {}, "cont": {}}
    for (kind, script), pool in pools.items():
        if kind in by_kind:
            by_kind[kind][script] = pool
    # Other scripts, weighted by how many pieces Qwen3 has for them (letters of >= 200 pieces).
    others = [s for s in by_kind["cont"] if s not in ("LATIN", "CJK") and
              len(by_kind["cont"][s]) >= 200 and len(by_kind["start"].get(s, [])) >= 50]
    other_weights = [len(by_kind["cont"][s]) for s in others]

    rng = random.Random(args.seed)

    def draw(pool):
        # Biased towards the front: P(index < 1% of the pool) ~ 0.16, the median at ~6%.
        return pool[int(len(pool) * rng.random() ** 2.5)]

    new_tokens, new_merges, counts = [], [], {k: 0 for k, _ in KINDS}
    kind_names = [k for k, _ in KINDS]
    kind_weights = [w for _, w in KINDS]
    tries = 0
    while len(new_tokens) < N_NEW:
        tries += 1
        kind = rng.choices(kind_names, kind_weights)[0]
        if kind.startswith("latin"):
            script = "LATIN"
        elif kind.startswith("cjk"):
            script = "CJK"
        elif kind.startswith("other"):
            script = rng.choices(others, other_weights)[0]
        if kind == "punct":
            a, b = draw(pools[("punct", None)]), draw(pools[("punct", None)])
        elif "start+cont" in kind:
            a, b = draw(by_kind["start"][script]), draw(by_kind["cont"][script])
        else:
            a, b = draw(by_kind["cont"][script]), draw(by_kind["cont"][script])
        piece = a + b
        if piece in known or len(piece) > MAX_BYTES:
            continue
        text = token_text(piece)
        if text is None or unicodedata.normalize("NFC", text) != text:
            continue
        if PRE_TOKENIZER.findall(text) != [text]:
            continue
        if bpe.encode(piece) != [a, b]:
            continue
        known.add(piece)
        bpe.add(f"{a} {b}")
        new_merges.append(f"{a} {b}")
        new_tokens.append(piece)
        counts[kind] += 1
        # New tokens become pieces too (at the end of their pool: rarely drawn, as late merges).
        c = classify(text)
        if c:
            pools.setdefault(c, []).append(piece)

    out_tokens = tokens[:n_bpe] + new_tokens
    out_types = types[:n_bpe] + [1] * len(new_tokens)
    shift = QWEN35_FIRST_ADDED - QWEN3_FIRST_ADDED
    for piece, t in added:
        out_tokens.append(piece)
        out_types.append(t)
    while len(out_tokens) < N_ROWS:
        out_tokens.append(f"[PAD{len(out_tokens)}]")
        out_types.append(pad_type)
    assert out_tokens[QWEN35_FIRST_ADDED] == "<|endoftext|>"
    assert out_tokens[248046] == "<|im_end|>" and out_tokens[248069] == "</think>"

    w = gguf.GGUFWriter(args.out, arch="qwen35")
    w.add_name("SYNTHETIC qwen35-sized 248K vocabulary (Qwen3 tokenizer + 96,401 generated merges)")
    w.add_description(
        "Vocabulary-only GGUF made by DeltaServe bench/make_vocab_248k.py for benchmarks: NOT "
        "the Qwen3.5 tokenizer. Ids 0..151642 and merges are Qwen3's; ids 151643..248043 are "
        f"synthetic concatenations of two tokens (seed {args.seed}) with their merges appended; "
        "Qwen3's added tokens moved to 248044..248069; [PADn] to 248320.")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(base["pre"])
    w.add_token_list(out_tokens)
    w.add_token_types(out_types)
    w.add_token_merges(base["merges"] + new_merges)
    w.add_bos_token_id(base["bos"] + shift)
    w.add_eos_token_id(base["eos"] + shift)
    w.add_pad_token_id(base["pad"] + shift)
    w.add_add_bos_token(False)
    w.add_chat_template(base["template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()

    lengths = sorted(len(token_text(p).encode("utf-8")) for p in new_tokens)
    print(f"wrote {args.out}: {len(out_tokens)} tokens ({n_bpe} Qwen3 BPE + {len(new_tokens)} new "
          f"+ {len(added)} added at {QWEN35_FIRST_ADDED}.. + pads), "
          f"{len(base['merges']) + len(new_merges)} merges; {tries} pairs tried")
    print("new tokens by kind: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    print(f"new token bytes: median {lengths[len(lengths) // 2]}, max {lengths[-1]}; "
          f"other scripts: {', '.join(others)}")
    if args.samples:
        import json
        pick = random.Random(1).sample(range(len(new_tokens)), 40)
        with open(args.samples, "w", encoding="utf-8") as f:
            for i in sorted(pick):
                f.write(json.dumps({"id": n_bpe + i, "text": token_text(new_tokens[i])},
                                   ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
