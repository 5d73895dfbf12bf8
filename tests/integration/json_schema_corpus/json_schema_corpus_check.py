#!/usr/bin/env python3
"""Soundness and completeness of the JSON Schema grammars on a corpus of real schemas (issue 13).

For every schema of tests/data/json_schema_corpus (README.md there says where each comes from):

  refused   `deltaserve-grammar compile` prints {"error": ...}: the keyword it names is counted.
  complete  instances generated from the schema by hypothesis-jsonschema (deterministic, bounded
            time per schema), kept only when `jsonschema` accepts them (the generator has bugs),
            are all accepted and complete, written compact (`,` `:`, raw UTF-8) and the way
            json.dumps writes them (`, ` `: `, ASCII escapes). Where json.dumps writes a number
            with an exponent (1e-05) the instance is also written without one; an exponent
            refused where that passes is counted, not failed (the grammar writes bounded
            numbers without exponent, docs/structured_outputs.md).
  sound     mutants of those instances (a value of the wrong type, a required key dropped, a
            number out of range, a string over maxLength, an enum value changed, an extra key,
            an array emptied or grown, the text truncated) that `jsonschema` rejects are
            rejected: accepted false or complete false.

The grammar takes object keys in the schema's `properties` order, then the required keys the
properties do not list (in `required`'s order), then any others (json_schema_compiler.h);
instances are reordered that way before they are written.

JSON-Schema-Test-Suite (draft 2020-12) is a second, independent check: for each of its schemas
the compiler accepts, each test instance must be accepted and complete exactly when the suite
says it is valid. Its `format` files are checked with format as an assertion (the grammar
enforces the formats it supports); the plain format.json (format as an annotation) is skipped.

Exit status: 0 when nothing failed, 1 on any failure (or no golden vocabulary), 77 (ctest's
skip) when the Python packages are missing. The summary table goes to stdout and to --summary;
failing cases to --failures as JSON lines (schema, document, what the CLI said).

In CI a seeded sample of the corpus is checked (--sample, default 0.15 of each part: with the whole
suite about 55 s of CPU, so under a minute on two cores); set DELTASERVE_CORPUS_FULL=1 (or
--sample 1) for all of it.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import zlib

# hypothesis keeps caches (its Unicode tables) in .hypothesis/ of the working directory unless
# told otherwise: not in the source tree.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "deltaserve-hypothesis"))

NEEDED = "hypothesis==6.108.5 hypothesis-jsonschema==0.23.1 jsonschema==4.26.0"
SKIP = 77


def import_or_skip():
    """Imports the generator and the validator, re-running under $DELTASERVE_CORPUS_PYTHON when
    this interpreter lacks them; exit 77 (skip) when none has them."""
    try:
        import hypothesis  # noqa: F401
        import hypothesis_jsonschema  # noqa: F401
        import jsonschema  # noqa: F401
        return
    except ImportError as e:
        why = str(e)
    alt = os.environ.get("DELTASERVE_CORPUS_PYTHON", "")
    # (A venv's python3 is a link to the same binary, so the marker, not the path, stops a loop.)
    if alt and not os.environ.get("DELTASERVE_CORPUS_REEXEC") and os.access(alt, os.X_OK):
        os.environ["DELTASERVE_CORPUS_REEXEC"] = "1"
        os.execv(alt, [alt] + sys.argv)
    print(f"SKIPPED: {why} (tests/run_all.sh installs {NEEDED} into build/grammar-venv)")
    sys.exit(SKIP)


import_or_skip()

from json_schema_instances import (compact, generate, has_exponent, is_valid,  # noqa: E402
                                   mutants, plain, reorder, spaced, validator_for)

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_PARTS = ["glaive", "kubernetes", "snowplow", "schemastore"]


# ---------------------------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------------------------

class Cli:
    def __init__(self, binary, model):
        self.binary, self.model = binary, model

    def compile(self, schema_path):
        """(error message or None, failure or None)."""
        r = subprocess.run([self.binary, "compile", "--schema", schema_path], capture_output=True,
                           timeout=120)
        if r.returncode != 0:
            return None, f"compile exit {r.returncode}: {r.stderr.decode(errors='replace')[:300]}"
        text = r.stdout.decode(errors="replace").strip()
        if text.startswith("{") and "\n" not in text:
            try:
                doc = json.loads(text)
                if isinstance(doc, dict) and "error" in doc:
                    return str(doc["error"]), None
            except ValueError:
                pass
        return None, None

    def check(self, schema_path, lines):
        """([result dicts], stderr, failure or None) for the documents `lines`."""
        data = "".join(line + "\n" for line in lines).encode()
        try:
            r = subprocess.run([self.binary, "check", "--schema", schema_path, "--model",
                                self.model], input=data, capture_output=True, timeout=600)
        except subprocess.TimeoutExpired:
            return [], "", "check timed out (600 s)"
        err = r.stderr.decode(errors="replace")
        if r.returncode != 0:
            return [], err, f"check exit {r.returncode}: {err[:300]}"
        out = [json.loads(x) for x in r.stdout.decode().splitlines() if x.strip()]
        if len(out) != len(lines):
            return out, err, f"check printed {len(out)} lines for {len(lines)} documents"
        return out, err, None


def refusal_keyword(message):
    m = re.search(r'unsupported JSON Schema keyword "([^"]+)"', message)
    if m:
        return m.group(1)
    if message.startswith("invalid JSON Schema"):
        return "(invalid schema: " + message.split(": ", 1)[-1][:60] + ")"
    return "(other: " + message[:60] + ")"


# ---------------------------------------------------------------------------------------------
# One corpus schema
# ---------------------------------------------------------------------------------------------

def check_schema(task):
    part, ident, schema, cfg = task
    res = {"part": part, "id": ident, "refused": None, "gen": "", "valid": 0, "mutants": 0,
           "skipped_invalid": 0, "failures": [], "exhausted": False, "seconds": 0.0,
           "known": 0}
    start = time.monotonic()
    cli = Cli(cfg["cli"], cfg["model"])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schema, f)
        schema_path = f.name
    try:
        refused, failure = cli.compile(schema_path)
        if failure:
            res["failures"].append({"kind": "cli", "detail": failure})
            return res
        if refused is not None:
            res["refused"] = refused
            return res
        strict = validator_for(schema, formats=True)
        loose = validator_for(schema, formats=False)
        generated, res["gen"] = generate(schema, cfg["instances"], cfg["gen_seconds"])
        rng = random.Random(zlib.crc32(f"{part}/{ident}".encode()))
        docs = []  # (kind, text, expected ok, the instance)
        for inst in generated:
            if is_valid(strict, inst) is not True:
                res["skipped_invalid"] += 1
                continue
            ordered = reorder(inst, schema, loose)
            # Both spellings, and where json.dumps writes an exponent (1e-05) also the number
            # without one: the grammar writes bounded numbers that way (a documented rule), so
            # an exponent refused where the plain spelling passes is a known divergence.
            exp = has_exponent(ordered)
            for text in dict.fromkeys([compact(ordered), spaced(ordered)]):
                docs.append(("valid, exponent" if exp else "valid", text, True, ordered))
            if exp:
                docs.append(("valid, no exponent", plain(ordered), True, ordered))
            res["valid"] += 1
            kept = 0
            for kind, m in mutants(inst, rng, cfg["mutants"]):
                if kept >= cfg["mutants"]:
                    break
                if is_valid(loose, m) is not False:
                    continue
                docs.append((kind, compact(reorder(m, schema, loose)), False, m))
                kept += 1
            text = compact(ordered)
            cut = rng.randrange(0, len(text)) if len(text) > 1 else 0
            prefix = text[:cut]
            try:
                whole = json.loads(prefix)
                truncated_is_invalid = is_valid(loose, whole) is False
            except ValueError:
                truncated_is_invalid = True
            if truncated_is_invalid:
                docs.append(("truncated", prefix, False, None))
        res["mutants"] = sum(1 for d in docs if not d[2])
        if not docs:
            return res
        results, err, failure = cli.check(schema_path, [d[1] for d in docs])
        res["exhausted"] = "state table reached its limit" in err
        if failure:
            res["failures"].append({"kind": "cli", "detail": failure})
            return res
        passed_plain = {id(inst) for (kind, _, _, inst), r in zip(docs, results)
                        if kind == "valid, no exponent" and r.get("accepted") is True and
                        r.get("complete") is True}
        for (kind, text, ok, inst), r in zip(docs, results):
            passed = r.get("accepted") is True and r.get("complete") is True
            if not passed and kind == "valid, exponent" and id(inst) in passed_plain:
                res["known"] += 1
                continue
            if passed != ok:
                res["failures"].append({
                    "kind": "completeness" if ok else "soundness", "mutation": kind,
                    "document": text, "cli": r, "schema": schema})
        return res
    finally:
        os.unlink(schema_path)
        res["seconds"] = round(time.monotonic() - start, 2)


# ---------------------------------------------------------------------------------------------
# JSON-Schema-Test-Suite
# ---------------------------------------------------------------------------------------------

# Where the grammar knowingly differs from the suite: each case by (file, group description,
# test description), with its reason. A listed case is reported, not failed; any other mismatch
# fails, and so does a listed case that no longer fails (it passes, or its schema is now refused):
# a stale entry, to be removed, so that the list stays exactly the known divergences.
NUMBER_SPELLING = ("number spelling: a number is matched as written (1.0 is not the integer 1, "
                   "const -2.0 is not -2)")
LEAP_SECOND = "format date-time/time: no leap second (:60)"
FRACTION = ("format date-time: at most 9 digits of second fraction, so that a model cannot loop on "
            "digits")
QUOTED_LOCAL = "format email: no quoted local part"
ADDRESS_LITERAL = "format email: no address literal after the @"
IPV6_HOST = "format uri: no IPv6 literal as the host"
VOCABULARY = "custom metaschemas ($vocabulary) are not read"

SUITE_DIVERGENCES = {
    ("const.json", "const with 0 does not match other zero-like types", "float zero is valid"):
        NUMBER_SPELLING,
    ("const.json", "const with 1 does not match true", "float one is valid"): NUMBER_SPELLING,
    ("const.json", "const with -2.0 matches integer and float types", "integer -2 is valid"):
        NUMBER_SPELLING,
    ("const.json", "float and integers are equal up to 64-bit representation limits",
     "float is valid"): NUMBER_SPELLING,
    ("enum.json", "enum with 0 does not match false", "float zero is valid"): NUMBER_SPELLING,
    ("enum.json", "enum with [0] does not match [false]", "[0.0] is valid"): NUMBER_SPELLING,
    ("enum.json", "enum with 1 does not match true", "float one is valid"): NUMBER_SPELLING,
    ("enum.json", "enum with [1] does not match [true]", "[1.0] is valid"): NUMBER_SPELLING,
    ("type.json", "integer type matches integers",
     "a float with zero fractional part is an integer"): NUMBER_SPELLING,
    ("optional/format/date-time.json", "validation of date-time strings",
     "a valid date-time with a leap second, UTC"): LEAP_SECOND,
    ("optional/format/date-time.json", "validation of date-time strings",
     "a valid date-time with a leap second, with minus offset"): LEAP_SECOND,
    ("optional/format/date-time.json", "validation of date-time strings",
     "a second fraction of fifteen nines is valid"): FRACTION,
    ("optional/format/time.json", "validation of time strings",
     "a valid time string with leap second, Zulu"): LEAP_SECOND,
    ("optional/format/time.json", "validation of time strings",
     "valid leap second, zero time-offset"): LEAP_SECOND,
    ("optional/format/time.json", "validation of time strings",
     "valid leap second, positive time-offset"): LEAP_SECOND,
    ("optional/format/time.json", "validation of time strings",
     "valid leap second, large positive time-offset"): LEAP_SECOND,
    ("optional/format/time.json", "validation of time strings",
     "valid leap second, negative time-offset"): LEAP_SECOND,
    ("optional/format/time.json", "validation of time strings",
     "valid leap second, large negative time-offset"): LEAP_SECOND,
    ("optional/format/email.json", "validation of e-mail addresses",
     "a quoted string with a space in the local part is valid"): QUOTED_LOCAL,
    ("optional/format/email.json", "validation of e-mail addresses",
     "a quoted string with a double dot in the local part is valid"): QUOTED_LOCAL,
    ("optional/format/email.json", "validation of e-mail addresses",
     "a quoted string with a @ in the local part is valid"): QUOTED_LOCAL,
    ("optional/format/email.json", "validation of e-mail addresses",
     "an IPv4-address-literal after the @ is valid"): ADDRESS_LITERAL,
    ("optional/format/email.json", "validation of e-mail addresses",
     "an IPv6-address-literal after the @ is valid"): ADDRESS_LITERAL,
    ("optional/format/uri.json", "validation of URIs", "a valid URL"): IPV6_HOST,
    ("vocabulary.json", "schema that uses custom metaschema with with no validation vocabulary",
     "no validation: invalid number, but it still validates"): VOCABULARY,
}


def divergence(rel, group, test):
    return SUITE_DIVERGENCES.get((rel, group["description"], test["description"]))


def check_suite_file(task):
    rel, groups, cfg = task
    cli = Cli(cfg["cli"], cfg["model"])
    out = {"file": rel, "groups": 0, "refused": [], "tests": 0, "failures": [], "known": []}
    for gi, group in enumerate(groups):
        schema = group["schema"]
        out["groups"] += 1
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(schema, f)
            path = f.name
        try:
            refused, failure = cli.compile(path)
            if failure:
                out["failures"].append({"group": group["description"], "kind": "cli",
                                        "detail": failure})
                continue
            if refused is not None:
                out["refused"].append(refusal_keyword(refused))
                continue
            try:
                loose = validator_for(schema, formats=False)
            except Exception:  # noqa: BLE001
                loose = None
            docs = []
            for t in group["tests"]:
                data = reorder(t["data"], schema, loose) if loose else t["data"]
                docs.append((t, compact(data)))
            results, _, failure = cli.check(path, [d for _, d in docs])
            if failure:
                out["failures"].append({"group": group["description"], "kind": "cli",
                                        "detail": failure})
                continue
            for (t, text), r in zip(docs, results):
                out["tests"] += 1
                passed = r.get("accepted") is True and r.get("complete") is True
                if passed != t["valid"]:
                    kind = "completeness" if t["valid"] else "soundness"
                    case = {"group": group["description"], "test": t["description"],
                            "kind": kind, "schema": schema, "document": text, "cli": r}
                    reason = divergence(rel, group, t)
                    if reason:
                        out["known"].append({**case, "reason": reason})
                    else:
                        out["failures"].append(case)
        finally:
            os.unlink(path)
    return out


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def load_corpus(root, sample, seed):
    tasks = []
    for part in CORPUS_PARTS:
        with open(os.path.join(root, part + ".jsonl"), encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if sample < 1:
            rows = random.Random(f"{seed}/{part}").sample(rows, max(1, round(len(rows) * sample)))
        tasks += [(part, r["id"], r["schema"]) for r in rows]
    return tasks


def load_suite(root):
    base = os.path.join(root, "test_suite", "draft2020-12")
    files = []
    for dirpath, _, names in os.walk(base):
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(dirpath, name), base)
            if not name.endswith(".json") or rel == "format.json":
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                files.append((rel, json.load(f)))
    return sorted(files)


def table(rows, header):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                     [line(r) for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True, help="the deltaserve-grammar binary")
    ap.add_argument("--model", required=True, help="a GGUF with a tokenizer")
    ap.add_argument("--corpus", default=os.path.join(HERE, "..", "..", "data",
                                                     "json_schema_corpus"))
    ap.add_argument("--sample", type=float, default=None,
                    help="fraction of each corpus part (default 0.15; 1 with "
                         "DELTASERVE_CORPUS_FULL=1)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--instances", type=int, default=8, help="generated instances per schema")
    ap.add_argument("--mutants", type=int, default=4, help="mutants kept per instance")
    ap.add_argument("--gen-seconds", type=float, default=4.0, help="generation CPU seconds per schema")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--summary", default="", help="also write the summary (Markdown) here")
    ap.add_argument("--failures", default="", help="write failing cases (JSON lines) here")
    ap.add_argument("--no-suite", action="store_true", help="skip JSON-Schema-Test-Suite")
    args = ap.parse_args()
    if args.sample is None:
        args.sample = 1.0 if os.environ.get("DELTASERVE_CORPUS_FULL") == "1" else 0.15
    if not os.path.isfile(args.model):  # golden data is never optional (docs/testing.md)
        print(f"FAILED: no model at {args.model} (DELTASERVE_GOLDEN_DIR)")
        return 1
    cfg = {"cli": args.cli, "model": args.model, "instances": args.instances,
           "mutants": args.mutants, "gen_seconds": args.gen_seconds}
    started = time.monotonic()
    tasks = load_corpus(args.corpus, args.sample, args.seed)
    results = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(check_schema, (p, i, s, cfg)) for p, i, s in tasks]
        suite_futures = []
        if not args.no_suite:
            suite_futures = [pool.submit(check_suite_file, (rel, groups, cfg))
                             for rel, groups in load_suite(args.corpus)]
        results = [f.result() for f in futures]
        suite = [f.result() for f in suite_futures]
    elapsed = time.monotonic() - started

    # The corpus: supported vs refused per part, refusals by keyword, instances, failures.
    per_part = collections.OrderedDict((p, collections.Counter()) for p in CORPUS_PARTS)
    by_keyword = collections.Counter()
    failures, known_cases = [], []
    for r in results:
        c = per_part[r["part"]]
        c["schemas"] += 1
        if r["refused"] is not None:
            c["refused"] += 1
            by_keyword[refusal_keyword(r["refused"])] += 1
        elif any(f["kind"] == "cli" for f in r["failures"]):
            c["cli errors"] += 1
        else:
            c["supported"] += 1
            c["no instances"] += r["valid"] == 0
        c["instances"] += r["valid"]
        c["mutants"] += r["mutants"]
        c["generator rejected"] += r["skipped_invalid"]
        c["completeness"] += sum(f["kind"] == "completeness" for f in r["failures"])
        c["soundness"] += sum(f["kind"] == "soundness" for f in r["failures"])
        c["exhausted"] += r["exhausted"]
        c["exponent refused"] += r["known"]
        for f in r["failures"]:
            failures.append({"source": f"{r['part']}/{r['id']}", **f})
    cols = ["schemas", "supported", "refused", "cli errors", "no instances", "instances",
            "mutants", "completeness", "soundness", "exhausted", "exponent refused"]
    total = collections.Counter()
    for c in per_part.values():
        total.update(c)
    rows = [[p] + [c[k] for k in cols] for p, c in per_part.items()] + \
           [["total"] + [total[k] for k in cols]]
    out = [f"## JSON Schema corpus (sample {args.sample:g}, seed {args.seed}, "
           f"{args.instances} instances and up to {args.mutants} mutants each, {elapsed:.0f} s)",
           "", table(rows, ["part"] + cols), "",
           "(exponent refused: documents with a number as json.dumps writes it with an exponent, "
           "1e-05, refused where the same instance without exponent passes: bounded numbers "
           "are written without one, docs/structured_outputs.md.)", "",
           "Refused, by the keyword the error names:", "",
           table(sorted(by_keyword.items(), key=lambda kv: (-kv[1], kv[0])),
                 ["keyword", "schemas"]) if by_keyword else "(none)", ""]
    gen_fail = collections.Counter(r["gen"].split(":")[0] for r in results
                                   if r["refused"] is None and r["valid"] == 0 and r["gen"])
    if gen_fail:
        out += ["Supported schemas without instances (hypothesis-jsonschema could not generate):",
                "", table(sorted(gen_fail.items()), ["why", "schemas"]), ""]

    # The test suite.
    if suite:
        s_rows, s_kw, known = [], collections.Counter(), collections.Counter()
        for s in suite:
            s_kw.update(s["refused"])
            s_rows.append([s["file"], s["groups"], len(s["refused"]), s["tests"],
                           len(s["failures"]), len(s["known"])])
            for f in s["failures"]:
                failures.append({"source": f"test_suite/{s['file']}", **f})
            for f in s["known"]:
                known[f["reason"]] += 1
                known_cases.append({"source": f"test_suite/{s['file']}", **f})
        # Listed divergences that did not occur: stale entries (or files no longer in the suite).
        occurred = {(s["file"], f["group"], f["test"]) for s in suite for f in s["known"]}
        for case in sorted(set(SUITE_DIVERGENCES) - occurred):
            failures.append({"source": f"test_suite/{case[0]}", "kind": "stale divergence",
                             "group": case[1], "test": case[2],
                             "detail": "listed in SUITE_DIVERGENCES but no longer fails (it "
                                       "passes, or its schema is refused): remove the entry"})
        tot = [sum(r[i] for r in s_rows) for i in range(1, 6)]
        out += ["## JSON-Schema-Test-Suite draft 2020-12", "",
                table(s_rows + [["total"] + tot],
                      ["file", "schemas", "refused", "tests run", "mismatches", "known"]), "",
                "Refused, by keyword:", "",
                table(sorted(s_kw.items(), key=lambda kv: (-kv[1], kv[0])),
                      ["keyword", "schemas"]) if s_kw else "(none)", "",
                "Known divergences (reported, not failing):", "",
                table(sorted(known.items()), ["reason", "tests"]) if known else "(none)", ""]
    out.append(f"{len(failures)} failures")
    summary = "\n".join(out)
    print(summary)
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as f:
            f.write(summary + "\n")
    if args.failures:
        with open(args.failures, "w", encoding="utf-8") as f:
            for x in failures + known_cases:
                f.write(json.dumps({"expected": x in known_cases, **x}, ensure_ascii=False) + "\n")
    for x in failures[:40]:
        print("FAIL", json.dumps(x, ensure_ascii=False)[:600])
    ok = not failures and total["supported"] > 0 and total["instances"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
