#!/usr/bin/env python3
"""Clang's warnings on the sources a partial build did not compile.

tests/run_all.sh builds the sanitizer preset (clang) only for the targets its tests run
(tests-<label>); the benchmarks, the CLIs' main files and the process tests are compiled by g++
alone in the release build. This script runs clang with each such source's own flags from the
build's compile_commands.json, as `-fsyntax-only` (no code generation: about a third of a
compile), so clang's -Wall -Wextra -Werror still sees every source of the project.

Usage: tests/clang_syntax_check.py BUILD_DIR TARGET...   (the targets that were built)
Exit status: 0 when every remaining source passes, 1 otherwise (each failure printed).
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys


def compiled_by(build_dir, targets):
    """The sources whose compile commands ninja would run for `targets`."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "commands", *targets],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    sources = set()
    for line in out.splitlines():
        args = shlex.split(line) if " -c " in line else []
        if "-c" in args and args.index("-c") + 1 < len(args):
            sources.add(os.path.normpath(os.path.join(build_dir, args[args.index("-c") + 1])))
    return sources


def syntax_only(entry):
    args = shlex.split(entry["command"])
    if args and args[0].endswith("ccache"):
        args = args[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-MD", "-MMD") or a.startswith("-fsanitize"):
            continue
        keep.append(a)
    keep.append("-fsyntax-only")
    try:
        r = subprocess.run(keep, cwd=entry["directory"], capture_output=True, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired:
        return entry["file"], "timed out after 600 s"
    return entry["file"], (r.stderr or "failed") if r.returncode != 0 else None


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    build_dir, targets = sys.argv[1], sys.argv[2:]
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    built = compiled_by(build_dir, targets)
    todo, seen = [], set()
    for e in entries:
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        if path in built or path in seen or not path.endswith((".cc", ".cpp")):
            continue
        seen.add(path)
        todo.append(e)
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for file, err in pool.map(syntax_only, todo):
            if err:
                failures.append((file, err))
    for file, err in failures:
        print(f"clang_syntax_check: {file}:\n{err}", file=sys.stderr)
    print(f"clang_syntax_check: {len(todo)} sources not built by {' '.join(targets)}, "
          f"{len(failures)} with errors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
