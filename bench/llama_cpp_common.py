"""What the llama.cpp harnesses (llama_cpp_engine_throughput.py, llama_cpp_serving_throughput.py)
share: the prompt ids the C++ benchmarks also draw (bench/bench_ids.h implements the same
steps), their FNV-1a hash, process figures, and loading a model with llama.cpp's log kept
quiet except for the lines the reports quote (flash attention, buffer sizes)."""

import ctypes
import resource

import llama_cpp as ll

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def prompt_ids(n, seed, n_vocab):
    """n ids in [0, min(2000, n_vocab)) from splitmix64 seeded with `seed`."""
    limit = min(2000, n_vocab)
    ids, state = [], seed & MASK64
    for _ in range(n):
        state, value = splitmix64(state)
        ids.append(value % limit)
    return ids


def fnv1a_ids(ids, h=FNV_OFFSET):
    """FNV-1a over the ids as 32-bit little-endian values, continuing from h."""
    for token in ids:
        for byte in (token & 0xFFFFFFFF).to_bytes(4, "little"):
            h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class QuietModel:
    """llama.cpp initialised with its log captured into `log_lines` (only the flash-attention and
    buffer-size lines) and the model at `path` loaded with default (memory-mapped) parameters."""

    def __init__(self, path):
        self.log_lines = []

        def log_callback(level, text, user_data):
            line = " ".join(text.decode("utf-8", "replace").split())
            if ("Flash Attention" in line or "buffer size" in line) and line not in self.log_lines:
                self.log_lines.append(line)
        self._log_cb = ll.llama_log_callback(log_callback)  # must stay alive while llama.cpp logs
        ll.llama_log_set(self._log_cb, ctypes.c_void_p(0))
        ll.llama_backend_init()

        self.model = ll.llama_model_load_from_file(path.encode(), ll.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {path}")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
