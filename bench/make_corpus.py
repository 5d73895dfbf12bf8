#!/usr/bin/env python3
"""Builds the tokenizer benchmark corpus: ~1.5 MB of UTF-8 text mixing English prose, Python
source code and CJK (Chinese, Japanese, Korean), from files already on the machine (no network).

Sources, all read in a fixed order so the same machine always gives the same bytes:
  * code:    Python standard library modules (CODE_MODULES below), verbatim;
  * English: docstrings of the other standard library modules (ast.get_docstring);
  * CJK:     translated messages (msgstr) of the gettext catalogs shipped by Debian's
             essential packages -- coreutils, dpkg, bash, tar, grep, sed, findutils,
             diffutils -- under /usr/share/locale/{zh_CN,zh_TW,ja,ko}/LC_MESSAGES/*.mo.
             Where those are missing (images that strip /usr/share/locale), CPython's
             Lib/test/cjkencodings/*-utf8.txt (Debian: libpython3.X-testsuite) is used, and
             if the unique CJK text is still short of its share, new paragraphs are built
             from its sentences (seeded shuffle), never from random code points.
Needs only python3 (Debian 12: python3; CJK from the essential packages above).

Paragraphs (units) of the kinds are interleaved, each unit followed by a blank line, so every
kind is spread over the whole file. The corpus is cut into paragraphs at "\\n\\n" by the
benchmark programs. The composition (bytes per kind, sources) and the sha256 of the result are
printed; the bytes differ between machines whose Python or Debian packages differ.

  python3 bench/make_corpus.py [--output build/bench/tokenizer-corpus.txt] [--size 1500000]
"""

import argparse
import ast
import hashlib
import os
import random
import re
import struct
import sys
import sysconfig
from pathlib import Path

# Standard library files used verbatim as source code, in this order (missing ones are
# skipped, so Python 3.11 and 3.13 both work).
CODE_MODULES = [
    "argparse.py", "textwrap.py", "difflib.py", "heapq.py", "bisect.py", "functools.py",
    "dataclasses.py", "enum.py", "shutil.py", "tokenize.py", "ipaddress.py", "fractions.py",
    "statistics.py", "calendar.py", "configparser.py", "csv.py", "string.py", "json/decoder.py",
    "json/encoder.py", "json/__init__.py", "gettext.py", "fnmatch.py", "glob.py", "shlex.py",
    "base64.py", "uuid.py", "selectors.py", "sched.py", "graphlib.py", "contextlib.py",
    "copy.py", "pprint.py", "reprlib.py", "weakref.py", "operator.py", "random.py", "queue.py",
    "threading.py", "subprocess.py", "tempfile.py", "typing.py", "inspect.py", "ast.py",
]

# gettext domains (Debian package in brackets): coreutils, dpkg, bash, tar, grep, sed,
# findutils, diffutils -- all essential/required in Debian 12, so present on a fresh system
# unless /usr/share/locale is stripped.
MO_DOMAINS = ["coreutils", "dpkg", "bash", "tar", "grep", "sed", "findutils", "diffutils"]
LOCALE_DIR = Path("/usr/share/locale")

# Share of the corpus per kind, and the gettext locales each CJK kind is read from.
SHARES = {"code": 0.35, "english": 0.35, "chinese": 0.14, "japanese": 0.10, "korean": 0.06}
CJK_LOCALES = {
    "chinese": ["zh_CN", "zh_TW"],
    "japanese": ["ja"],
    "korean": ["ko"],
}
# CPython test data per kind (fallback), file name prefixes of Lib/test/cjkencodings/*-utf8.txt.
CJK_TESTDATA = {
    "chinese": ["gb2312", "gbk", "gb18030", "big5", "hz"],
    "japanese": ["shift_jis", "euc_jisx0213"],
    "korean": ["euc_kr", "cp949"],
}
CODE_BLOCK_BYTES = 3000  # code is cut into units of about this size at blank lines
SEED = 20260901

CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]")


def stdlib_dir():
    return Path(sysconfig.get_paths()["stdlib"])


def read_text(path):
    """The file as text with \\n line ends, or None when it is not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError):
        return None


def split_blocks(text, target):
    """Cuts text at blank lines into blocks of roughly `target` bytes, without blank-line runs
    at either end (the corpus adds its own separator)."""
    blocks, current, size = [], [], 0
    for para in re.split(r"\n\s*\n", text):
        para = para.strip("\n")
        if not para.strip():
            continue
        current.append(para)
        size += len(para.encode()) + 2
        if size >= target:
            blocks.append("\n\n".join(current))
            current, size = [], 0
    if current:
        blocks.append("\n\n".join(current))
    return blocks


def code_units():
    root = stdlib_dir()
    units = []
    for rel in CODE_MODULES:
        text = read_text(root / rel)
        if text is None:
            continue
        units.extend((block, str(root / rel)) for block in split_blocks(text, CODE_BLOCK_BYTES))
    return units


def english_units():
    """Docstrings (>= 120 characters, no doctest examples) of the stdlib modules not used as
    code, in path order; tests, idlelib, lib2to3 and site-packages are left out."""
    root = stdlib_dir()
    skip_dirs = {"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages",
                 "__pycache__", "turtledemo"}
    units, seen = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.as_posix() in CODE_MODULES or skip_dirs.intersection(rel.parts[:-1]):
            continue
        text = read_text(path)
        if text is None:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=True)
            if not doc or len(doc) < 120 or ">>>" in doc or doc in seen:
                continue
            seen.add(doc)
            units.append((doc, f"docstrings of {path}"))
    return units


def read_mo(path):
    """msgstr texts of a GNU .mo catalog (plural forms separately), header skipped."""
    data = path.read_bytes()
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if endian is None:
        return []
    _, count, orig_off, trans_off = struct.unpack(endian + "4I", data[4:20])
    charset = "utf-8"
    texts = []
    for i in range(count):
        olen, ooff = struct.unpack(endian + "2I", data[orig_off + 8 * i:orig_off + 8 * i + 8])
        tlen, toff = struct.unpack(endian + "2I", data[trans_off + 8 * i:trans_off + 8 * i + 8])
        msgid = data[ooff:ooff + olen]
        msgstr = data[toff:toff + tlen]
        if not msgid:  # the header: "Content-Type: text/plain; charset=UTF-8" etc.
            m = re.search(rb"charset=([-\w]+)", msgstr)
            if m:
                charset = m.group(1).decode("ascii")
            continue
        try:
            texts.extend(msgstr.decode(charset).split("\0"))
        except (LookupError, UnicodeDecodeError):
            continue
    return texts


def is_cjk_text(text):
    """At least 20% of the non-space characters are CJK (skips untranslated English)."""
    chars = [c for c in text if not c.isspace()]
    return len(chars) >= 8 and len(CJK_RE.findall(text)) >= 0.2 * len(chars)


def cjk_units(kind, budget, locale_dir):
    units, seen, size = [], set(), 0

    def take(text, origin):
        nonlocal size
        text = text.replace("\r\n", "\n").strip("\n")
        text = re.sub(r"\n\s*\n", "\n", text)  # one unit = one paragraph
        if not text.strip() or text in seen or not is_cjk_text(text):
            return
        seen.add(text)
        units.append((text, origin))
        size += len(text.encode()) + 2

    locales = CJK_LOCALES[kind]
    per_locale = budget / len(locales)
    for loc in locales:
        start = size
        for domain in MO_DOMAINS:
            path = locale_dir / loc / "LC_MESSAGES" / f"{domain}.mo"
            if not path.is_file() or size - start >= per_locale * 1.02:
                continue
            for text in read_mo(path):
                if size - start >= per_locale * 1.02:
                    break
                take(text, str(path))
    if size < budget:
        testdir = stdlib_dir() / "test" / "cjkencodings"
        for prefix in CJK_TESTDATA[kind]:
            path = testdir / f"{prefix}-utf8.txt"
            text = read_text(path) if path.is_file() else None
            if text is None:
                continue
            for para in re.split(r"\n\s*\n", text):
                take(para, str(path))
    if not units:
        return units
    if size < budget:
        # Not enough unique text: new paragraphs from the sentences found, in seeded order.
        sentences = sorted({s.strip() for u, _ in units
                            for s in re.findall(r"[^。！？!?\n]+[。！？!?]?", u)
                            if is_cjk_text(s.strip())})
        rng = random.Random(f"{SEED}-{kind}")
        while size < budget and sentences:
            para = "".join(rng.choice(sentences) for _ in range(rng.randint(3, 8)))
            take(para, f"{kind} sentences above, recombined (seed {SEED})")
    return units


def interleave(units_by_kind, budgets):
    """Emits units, always from the kind furthest below its budget, until every kind reaches
    its budget or runs out. Deterministic."""
    emitted = {k: 0 for k in units_by_kind}
    index = {k: 0 for k in units_by_kind}
    by_source = {}  # (kind, source) -> bytes, in first-use order
    out = []
    while True:
        open_kinds = [k for k in units_by_kind
                      if emitted[k] < budgets[k] and index[k] < len(units_by_kind[k])]
        if not open_kinds:
            break
        kind = min(open_kinds, key=lambda k: (emitted[k] / budgets[k], list(SHARES).index(k)))
        unit, source = units_by_kind[kind][index[kind]]
        unit += "\n\n"
        index[kind] += 1
        emitted[kind] += len(unit.encode())
        by_source[(kind, source)] = by_source.get((kind, source), 0) + len(unit.encode())
        out.append(unit)
    return "".join(out), emitted, by_source


def main():
    repo = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=repo / "build/bench/tokenizer-corpus.txt")
    parser.add_argument("--size", type=int, default=1_500_000, help="target size in bytes")
    parser.add_argument("--min-size", type=int, default=1_000_000,
                        help="fail when the result is smaller than this")
    parser.add_argument("--locale-dir", type=Path, default=LOCALE_DIR,
                        help="gettext catalogs (default /usr/share/locale)")
    args = parser.parse_args()
    locale_dir = args.locale_dir

    budgets = {k: share * args.size for k, share in SHARES.items()}
    units = {"code": code_units(), "english": english_units()}
    for kind in CJK_LOCALES:
        units[kind] = cjk_units(kind, budgets[kind], locale_dir)
    text, emitted, by_source = interleave(units, budgets)
    data = text.encode("utf-8")

    print(f"python {sys.version.split()[0]}, stdlib {stdlib_dir()}", file=sys.stderr)
    print("sources (bytes taken):", file=sys.stderr)
    english = sum(n for (k, _), n in by_source.items() if k == "english")
    english_files = sum(1 for (k, _) in by_source if k == "english")
    for (kind, source), nbytes in sorted(by_source.items(),
                                         key=lambda item: list(SHARES).index(item[0][0])):
        if kind != "english":
            print(f"  {kind:9s} {nbytes:9d}  {source}", file=sys.stderr)
    print(f"  {'english':9s} {english:9d}  docstrings of {english_files} modules under "
          f"{stdlib_dir()}", file=sys.stderr)
    missing = [k for k in SHARES if emitted.get(k, 0) < 0.5 * budgets[k]]
    if missing:
        print(f"make_corpus: not enough text for {', '.join(missing)}; on Debian install the "
              "packages named in this script's docstring, or libpython3.X-testsuite for "
              "CPython's cjkencodings", file=sys.stderr)
        return 1
    if len(data) < args.min_size:
        print(f"make_corpus: corpus is {len(data)} bytes, below --min-size {args.min_size}",
              file=sys.stderr)
        return 1

    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(args.output.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, args.output)

    print(f"corpus: {args.output}")
    print("composition (bytes, including paragraph separators):")
    for kind in SHARES:
        print(f"  {kind:9s} {emitted[kind]:9d}  {100.0 * emitted[kind] / len(data):5.1f}%")
    print(f"  {'total':9s} {len(data):9d}  chunks (cut at a blank line)={text.count(chr(10) * 2)}")
    print(f"sha256: {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
