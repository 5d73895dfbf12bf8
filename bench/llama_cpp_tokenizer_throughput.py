#!/usr/bin/env python3
"""llama.cpp side of the tokenizer throughput benchmark (run by bench/tokenizer_bench.sh inside
its venv, where llama-cpp-python is installed).

Loads the GGUF vocabulary with llama_cpp.Llama(vocab_only=True), cuts the corpus into
paragraphs exactly like bench/tokenizer_throughput.cc (a chunk ends right after each "\\n\\n",
scanning on from there) and calls llama_tokenize(add_special=False, parse_special=True) once per
paragraph through the low-level binding, into one preallocated buffer, so Python adds only the
per-call ctypes overhead (about 1.4 us per paragraph, under 2% of the total here). Only the
tokenize calls are timed; the best of --reps repetitions is printed on stdout as
  llama.cpp: bytes=N tokens=M seconds=S mb_s=X          (MB = 10^6 bytes)

If the bundled llama.cpp cannot load the file (e.g. it does not know the "qwen35"
pre-tokenizer), a copy with tokenizer.ggml.pre = "qwen2" is written in --tmp-dir with the
gguf package's gguf-new-metadata, and that is used instead; a line says so on stdout. With the
Qwen3 vocabulary both pre-tokenizers give identical ids on the golden corpus (see
shared/golden/README.md).
"""

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp


def paragraph_chunks(data: bytes):
    chunks, start = [], 0
    while start < len(data):
        pair = data.find(b"\n\n", start)
        end = len(data) if pair < 0 else pair + 2
        chunks.append(data[start:end])
        start = end
    return chunks


def load_vocab(model_path: Path):
    """The Llama object (kept alive by the caller) or None when llama.cpp refuses the file."""
    try:
        return llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    except (ValueError, RuntimeError) as error:
        print(f"llama.cpp could not load {model_path}: {error}", file=sys.stderr)
        return None


def qwen2_copy(model_path: Path, tmp_dir: Path) -> Path:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    out = tmp_dir / (model_path.stem + "-pre-qwen2.gguf")
    tool = shutil.which("gguf-new-metadata") or str(Path(sys.executable).parent /
                                                     "gguf-new-metadata")
    subprocess.run([tool, "--pre-tokenizer", "qwen2", "--force", str(model_path), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    parser = argparse.ArgumentParser(description="llama.cpp tokenizer throughput")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tmp-dir", type=Path, default=Path("build/bench"))
    parser.add_argument("--force-qwen2", action="store_true",
                        help="always tokenize with a tokenizer.ggml.pre=qwen2 copy")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps wants a positive integer")

    llama_cpp.llama_backend_init()
    model_path = args.model
    llm = None if args.force_qwen2 else load_vocab(model_path)
    if llm is None:
        model_path = qwen2_copy(args.model, args.tmp_dir)
        llm = load_vocab(model_path)
        if llm is None:
            return 1
        reason = ("--force-qwen2" if args.force_qwen2 else
                  f"llama-cpp-python {llama_cpp.__version__} did not load the original")
        print(f"note: llama.cpp side uses {model_path}, a copy with tokenizer.ggml.pre set to "
              f"qwen2 ({reason})")
    vocab = llm._model.vocab  # llama_vocab* of the loaded model
    print(f"llama-cpp-python {llama_cpp.__version__}: loaded {model_path}, "
          f"{llama_cpp.llama_vocab_n_tokens(vocab)} tokens", file=sys.stderr)

    data = args.corpus.read_bytes()
    chunks = paragraph_chunks(data)
    print(f"corpus {args.corpus}: {len(data)} bytes, {len(chunks)} paragraphs", file=sys.stderr)
    # Byte-level BPE gives at most one token per byte; +16 leaves room for a BOS we never add.
    capacity = max(len(c) for c in chunks) + 16
    buffer = (llama_cpp.llama_token * capacity)()
    tokenize = llama_cpp.llama_tokenize

    best, tokens = float("inf"), None
    for rep in range(1, args.reps + 1):
        total = 0
        start = time.perf_counter()
        for chunk in chunks:
            n = tokenize(vocab, chunk, len(chunk), buffer, capacity, False, True)
            if n < 0:
                print(f"llama_tokenize failed ({n}) on a {len(chunk)}-byte paragraph",
                      file=sys.stderr)
                return 1
            total += n
        seconds = time.perf_counter() - start
        if tokens is not None and total != tokens:
            print(f"repetition {rep} gave {total} tokens, earlier {tokens}", file=sys.stderr)
            return 1
        tokens = total
        best = min(best, seconds)
        print(f"rep {rep}/{args.reps}: {seconds:.3f} s, {len(data) / 1e6 / seconds:.2f} MB/s",
              file=sys.stderr)
    del llm
    print(f"llama.cpp: bytes={len(data)} tokens={tokens} seconds={best:.6f} "
          f"mb_s={len(data) / 1e6 / best:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
