"""Command line of deltaserve-bench: the workloads, `compare`, and argument checking.

Exit status: 0 when the run finished (requests a server refused or lost are counted in the
results, not failures of the tool), 2 for bad arguments (the problem and the usage on stderr),
3 when a server cannot be reached or refuses the probe request, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path

from .params import parse_fault, parse_levels

WORKLOAD_NAMES = ("context-sweep", "multi-turn", "concurrency-sweep", "structured", "soak")

EPILOG = """examples:
  deltaserve-bench context-sweep --url http://127.0.0.1:8080 --model qwen --out runs/ctx
  deltaserve-bench multi-turn --url http://127.0.0.1:8080 --model qwen --sessions 4 --turns 8 \\
      --resume-every 4 --resume-gap 20 --out runs/mt
  deltaserve-bench concurrency-sweep --url URL --model M --concurrency 1-16 --out runs/conc
  deltaserve-bench soak --url URL --model M --minutes 30 \\
      --fault '10m:kill -9 $(cat worker1.pid)' --fault '20m:systemctl restart redis' --out runs/soak
  deltaserve-bench compare runs/conc-deltaserve runs/conc-llama --out runs/compare
"""


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value
    return parse


def _non_negative(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
        return value
    return parse


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def _url(text):
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080)")
    return text


def _levels(text):
    try:
        parse_levels(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give stream counts as 1,2,4,8 or a doubling range 1-16")
    return text


def _fault(text):
    try:
        parse_fault(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return text


def _json_object(text):
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}")
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltaserve-bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure an OpenAI- or Anthropic-compatible endpoint the way agent teams "
                    "load it; writes DIR/results.jsonl, DIR/summary.md, DIR/run.json and PNGs.",
        epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="WORKLOAD")
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("endpoint and output")
    g.add_argument("--url", type=_url, action="append", required=True,
                   help="server base URL (…/v1 or not); repeat for several replicas")
    g.add_argument("--model", required=True, help="model name sent in each request")
    g.add_argument("--api-key", help="sent as Bearer and x-api-key")
    g.add_argument("--api", choices=("openai", "anthropic"), default="openai",
                   help="chat completions (default) or Anthropic messages")
    g.add_argument("--out", required=True, help="output directory (created)")
    g.add_argument("--label", help="the run's name in summaries and comparisons (default: URL)")
    g.add_argument("--seed", type=int, default=1, help="seed of all generated text (default 1)")
    g.add_argument("--max-tokens", type=_positive(int), default=64,
                   help="tokens generated per request (default 64)")
    g.add_argument("--temperature", type=_non_negative(float), default=0.0)
    g.add_argument("--timeout", type=_positive(float), default=600.0,
                   help="seconds per request (default 600)")
    g.add_argument("--extra-body", type=_json_object,
                   help="JSON object merged into every request body, e.g. '{\"ignore_eos\":true}'")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-plots", action="store_true", help="no PNGs")

    def add(name, help_text):
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text)

    p = add("context-sweep", "TTFT, prefill and decode rate as the prompt doubles, up to the "
            "first refusal (the context ceiling)")
    p.add_argument("--start", type=_positive(int), default=512, help="first prompt length in "
                   "tokens (default 512)")
    p.add_argument("--max-context", type=_positive(int),
                   help="last length to ask (default: double until the server refuses)")
    p.add_argument("--reps", type=_positive(int), default=1, help="requests per length")
    p.add_argument("--bisect", type=_non_negative(int), default=3,
                   help="after a refusal, halve the gap to the last answered length N times")

    for name, text in (("concurrency-sweep", "throughput, TTFT and ITL percentiles at 1 → N "
                        "concurrent streams"),
                       ("structured", "the concurrency sweep with response_format json_schema "
                        "off and on; counts valid JSON")):
        p = add(name, text)
        p.add_argument("--concurrency", type=_levels, default="1-16" if name[0] == "c" else "1,4",
                       help="stream counts: 1,2,4 or a doubling range 1-16")
        p.add_argument("--requests", type=_positive(int),
                       help="requests per level (default 2 × streams, at least 4)")
        p.add_argument("--prompt-tokens", type=_positive(int), default=256)
        p.add_argument("--shared-prefix", type=_fraction, default=0.0,
                       help="fraction of each prompt that is the same for all (default 0)")

    p = add("multi-turn", "concurrent agent sessions: long system prompt, tool calls and "
            "results, resumed sessions; TTFT and cached tokens per turn")
    p.add_argument("--sessions", type=_positive(int), default=4)
    p.add_argument("--turns", type=_positive(int), default=8)
    p.add_argument("--system-tokens", type=_positive(int), default=2000)
    p.add_argument("--user-tokens", type=_positive(int), default=100)
    p.add_argument("--tool-result-tokens", type=_positive(int), default=300)
    p.add_argument("--tool-ratio", type=_fraction, default=0.5,
                   help="probability that a turn is a tool call + result (default 0.5)")
    p.add_argument("--shared-prefix", type=_fraction, default=1.0,
                   help="fraction of the system prompt shared by all sessions (default 1)")
    p.add_argument("--think-time", type=_non_negative(float), default=0.5,
                   help="seconds between turns (default 0.5)")
    p.add_argument("--resume-every", type=_non_negative(int), default=0,
                   help="every N turns the session pauses and resumes (0: never)")
    p.add_argument("--resume-gap", type=_non_negative(float), default=10.0,
                   help="seconds of that pause (default 10)")
    p.add_argument("--conversations", help="replay conversations from this JSON (vLLM's "
                   "multi-turn format, or ShareGPT) instead of generating them")

    p = add("soak", "steady load for --minutes with fault hooks; requests lost, errors by kind, "
            "latency before / during / after each fault")
    p.add_argument("--minutes", type=_positive(float), required=True)
    p.add_argument("--concurrency", type=_positive(int), default=4)
    p.add_argument("--turns", type=_positive(int), default=4, help="turns per conversation")
    p.add_argument("--system-tokens", type=_positive(int), default=1000)
    p.add_argument("--user-tokens", type=_positive(int), default=100)
    p.add_argument("--think-time", type=_non_negative(float), default=0.0)
    p.add_argument("--error-backoff", type=_non_negative(float), default=0.2,
                   help="seconds a stream waits after a lost request (default 0.2)")
    p.add_argument("--fault", type=_fault, action="append",
                   help="AT:COMMAND, run with the shell AT seconds in (or 2.5m); repeatable")
    p.add_argument("--fault-window", type=_positive(float), default=30.0,
                   help="seconds after a fault counted as 'during' (default 30)")

    p = sub.add_parser("compare", help="overlay runs of one workload: a table with ratios to "
                       "the first run and one plot", description="overlay runs of one workload")
    p.add_argument("runs", nargs="+", help="run.json files or run directories")
    p.add_argument("--out", required=True, help="output directory for compare.md and the PNG")
    p.add_argument("--name", help="PNG file name (default compare-WORKLOAD.png)")
    return parser


def _check(parser, args) -> None:
    if args.command is None:
        parser.error("name a workload: context-sweep, multi-turn, concurrency-sweep, structured, "
                     "soak, or compare")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.error(f"--out {args.out}: exists and is not a directory")
    if args.command == "compare":
        return
    if args.command == "context-sweep" and args.max_context is not None \
            and args.max_context < args.start:
        parser.error(f"--max-context {args.max_context} is below --start {args.start}")
    if args.command == "soak":
        for fault in args.fault or []:
            at, _ = parse_fault(fault)
            if at >= args.minutes * 60:
                parser.error(f"--fault {fault!r}: at {at:g} s, after the end of the run "
                             f"(--minutes {args.minutes:g})")
    if args.command == "multi-turn" and args.conversations and \
            not Path(args.conversations).is_file():
        parser.error(f"--conversations {args.conversations}: no such file")


async def _run(args, argv) -> int:
    # Imported here: --help and argument errors need none of the third-party packages.
    from . import plots, summary
    from .multi_turn import multi_turn
    from .run import Run
    from .soak import soak
    from .workloads import concurrency_sweep, context_sweep, structured
    workloads = {"context-sweep": context_sweep, "multi-turn": multi_turn,
                 "concurrency-sweep": concurrency_sweep, "structured": structured, "soak": soak}
    run = Run(args, args.command)
    run.command = "deltaserve-bench " + " ".join(shlex.quote(a) for a in argv)
    try:
        aggregates = await workloads[args.command](run)
    finally:
        await run.close()
    doc = run.finish(aggregates)
    text = summary.write(doc, run.out / "summary.md")
    pngs = [] if args.no_plots else plots.draw([doc], run.out, records=[run.records])
    print(text)
    print(f"wrote {run.out / 'results.jsonl'}, {run.out / 'summary.md'}, {run.out / 'run.json'}"
          + "".join(f", {p}" for p in pngs), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    from . import compare as compare_mod
    from .run import FatalError
    from .textgen import ConversationFileError
    try:
        if args.command == "compare":
            text, pngs = compare_mod.compare(args.runs, Path(args.out), args.name)
            print(text)
            print("wrote " + ", ".join(str(p) for p in [Path(args.out) / "compare.md", *pngs]),
                  file=sys.stderr)
            return 0
        return asyncio.run(_run(args, _redact(argv)))
    except compare_mod.CompareError as e:
        print(f"deltaserve-bench compare: {e}", file=sys.stderr)
        return 2
    except ConversationFileError as e:
        print(f"deltaserve-bench {args.command}: {e}", file=sys.stderr)
        return 2
    except FatalError as e:
        print(f"deltaserve-bench {args.command}: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("deltaserve-bench: interrupted; results.jsonl holds what was measured",
              file=sys.stderr)
        return 130


def _redact(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--api-key" and i + 1 < len(out):
            out[i + 1] = "***"
        elif a.startswith("--api-key="):
            out[i] = "--api-key=***"
    return out
