#!/usr/bin/env python3
"""Rebuilds the JSON Schema corpus in this directory from local git clones of its sources.

It downloads nothing: give it the git directories (bare or not) of the three source repositories
at the commits README.md names. The selection is deterministic (sorted candidates, a seeded
sample), so the same commits give the same files.

    python3 select_corpus.py --jsonschemabench DIR --schemastore DIR --test-suite DIR

Needs `jsonschema` (check_schema drops documents that are not valid schemas).
"""
import argparse
import json
import os
import random
import subprocess

import jsonschema
import jsonschema.validators

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 13

# (corpus file, JSONSchemaBench folder, how many, largest file in bytes)
BENCH_PARTS = [
    ("glaive.jsonl", "data/Glaiveai2K", 300, 16384),
    ("kubernetes.jsonl", "data/Kubernetes", 120, 8192),
    ("snowplow.jsonl", "data/Snowplow", 120, 8192),
]
SCHEMASTORE_COUNT, SCHEMASTORE_MAX_BYTES = 150, 16384

# JSON-Schema-Test-Suite draft 2020-12: every top-level file but refRemote.json (it needs the
# suite's remote server), and the formats the grammar enforces.
SUITE_SKIP = {"refRemote.json"}
SUITE_FORMATS = ["date-time", "date", "time", "uuid", "email", "uri"]


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True).stdout


def git_dir(path):
    dot_git = os.path.join(path, ".git")
    return dot_git if os.path.isdir(dot_git) else path


def ls(repo, folder):
    """(size, path) of the blobs directly under `folder` at HEAD."""
    out = []
    for line in git(repo, "ls-tree", "-l", "HEAD", folder + "/").decode().splitlines():
        meta, path = line.split("\t", 1)
        kind, size = meta.split()[1], meta.split()[3]
        if kind == "blob" and size.isdigit():  # a mirror may list a blob it lacks
            out.append((int(size), path))
    return sorted(out, key=lambda x: x[1])


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def usable(schema):
    """A schema object that jsonschema accepts and that needs no other document."""
    if not isinstance(schema, dict):
        return False
    if any(not r.startswith("#") for r in refs(schema)):
        return False
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except Exception:  # noqa: BLE001 - any failure means "not a usable schema"
        return False
    return True


def pick(repo, folder, count, max_bytes, rng):
    chosen = []
    candidates = [p for size, p in ls(repo, folder) if size <= max_bytes and p.endswith(".json")]
    for path in rng.sample(candidates, len(candidates)):
        try:
            schema = json.loads(git(repo, "show", "HEAD:" + path))
        except ValueError:
            continue
        if usable(schema):
            chosen.append((path, schema))
        if len(chosen) == count:
            break
    return sorted(chosen)


def write_jsonl(name, rows):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        for path, schema in rows:
            ident = os.path.splitext(os.path.basename(path))[0]
            f.write(json.dumps({"id": ident, "source": path, "schema": schema},
                               ensure_ascii=False, sort_keys=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonschemabench", required=True)
    ap.add_argument("--schemastore", required=True)
    ap.add_argument("--test-suite", required=True)
    args = ap.parse_args()
    bench, store, suite = (git_dir(p) for p in (args.jsonschemabench, args.schemastore,
                                                args.test_suite))
    for name, folder, count, max_bytes in BENCH_PARTS:
        write_jsonl(name, pick(bench, folder, count, max_bytes, random.Random(SEED)))
    write_jsonl("schemastore.jsonl", pick(store, "src/schemas/json", SCHEMASTORE_COUNT,
                                          SCHEMASTORE_MAX_BYTES, random.Random(SEED)))
    out = os.path.join(HERE, "test_suite", "draft2020-12")
    os.makedirs(os.path.join(out, "optional", "format"), exist_ok=True)
    for _, path in ls(suite, "tests/draft2020-12"):
        if path.endswith(".json") and os.path.basename(path) not in SUITE_SKIP:
            with open(os.path.join(out, os.path.basename(path)), "wb") as f:
                f.write(git(suite, "show", "HEAD:" + path))
    for fmt in SUITE_FORMATS:
        with open(os.path.join(out, "optional", "format", fmt + ".json"), "wb") as f:
            f.write(git(suite, "show", f"HEAD:tests/draft2020-12/optional/format/{fmt}.json"))
    with open(os.path.join(HERE, "test_suite", "LICENSE"), "wb") as f:
        f.write(git(suite, "show", "HEAD:LICENSE"))
    # The Apache-2.0 text (SchemaStore's copy) and SchemaStore's NOTICE, for the Apache parts.
    with open(os.path.join(HERE, "LICENSE-Apache-2.0.txt"), "wb") as f:
        f.write(git(store, "show", "HEAD:LICENSE"))
    with open(os.path.join(HERE, "NOTICE-SchemaStore.txt"), "wb") as f:
        f.write(git(store, "show", "HEAD:NOTICE"))


if __name__ == "__main__":
    main()
