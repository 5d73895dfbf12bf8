#!/usr/bin/env python3
"""n > 1 choices through the official OpenAI Python SDK against a running deltaserve-router.

Run by tests/integration/openai_sdk_test.cc (OpenAiSdkTest.ChoicesWithTheOfficialClient), which
starts a worker serving "q8" (tiny-dense-q8_0.gguf) with --parallel 4 and its /metrics, and a
router in front of it:

    python3 openai_sdk_choices_check.py --base-url http://127.0.0.1:PORT/v1 \
        --metrics-url http://127.0.0.1:MPORT/metrics [--exact]

The references are independent of forking: the same request sent with n = 1 and seed + i (the
documented rule, docs/chat.md) must give choice i's text; the worker's own counters
(deltaserve_model_prompt_tokens_computed_total, deltaserve_model_forked_sequences_total) show the
prompt was computed once; jsonschema validates the structured choices. --exact (the wrapper
passes it on a CPU with AVX-512 VNNI, where a Q8_0 batch row has the bits of that row alone)
turns on the token-for-token comparisons. Every check runs; exit 0 only when all passed.
"""

import argparse
import json
import signal
import sys
import traceback
import urllib.request

import jsonschema
import openai
from openai import OpenAI

MODEL = "q8"
PROMPT = [{"role": "user", "content": "Tell me a story"}]
TEXT_PROMPT = "Once upon a time"
SEED = 11
N = 4
SCHEMA = {"type": "object",
          "properties": {"ok": {"type": "boolean"},
                         "level": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["ok", "level"], "additionalProperties": False}


def metric(text, name):
    key = f'{name}{{model="{MODEL}"}} '
    for line in text.splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    raise AssertionError(f"{key.strip()} not in the worker's /metrics")


class Checks:
    def __init__(self, args):
        self.client = OpenAI(api_key="sk-none", base_url=args.base_url, max_retries=0,
                             timeout=120.0)
        self.metrics_url = args.metrics_url
        self.exact = args.exact

    def metrics(self):
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            text = r.read().decode()
        return (metric(text, "deltaserve_model_prompt_tokens_computed_total"),
                metric(text, "deltaserve_model_forked_sequences_total"))

    def chat(self, **kwargs):
        return self.client.chat.completions.create(
            model=MODEL, messages=PROMPT, temperature=1.0, max_tokens=12, **kwargs)

    def singles(self, make, n):
        """The n one-choice references, choice i with seed + i."""
        return [make(seed=SEED + i) for i in range(n)]

    # --- chat ---------------------------------------------------------------------------------
    def check_chat_choices_prompt_once_each_equal_its_seed(self):
        before = self.metrics()
        r = self.chat(n=N, seed=SEED)
        after = self.metrics()
        assert [c.index for c in r.choices] == list(range(N)), r.choices
        computed = after[0] - before[0]
        uncached = r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens
        assert computed == uncached, (computed, r.usage)  # once, not N times
        assert after[1] - before[1] == N - 1, (before, after)
        refs = self.singles(self.chat, N)
        assert r.usage.prompt_tokens == refs[0].usage.prompt_tokens, (r.usage, refs[0].usage)
        assert r.usage.completion_tokens == sum(x.usage.completion_tokens for x in refs), r.usage
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        texts = [c.message.content for c in r.choices]
        assert len(set(texts)) > 1, texts  # independent samples
        if self.exact:
            for c, ref in zip(r.choices, refs):
                assert c.message.content == ref.choices[0].message.content, (c.index, c, ref)
                assert c.finish_reason == ref.choices[0].finish_reason, (c.index, c, ref)

    def check_chat_choices_streamed(self):
        whole = self.chat(n=N, seed=SEED)
        text = {i: "" for i in range(N)}
        finish = {}
        usage = []
        for chunk in self.chat(n=N, seed=SEED, stream=True,
                               stream_options={"include_usage": True}):
            if chunk.usage is not None:
                usage.append(chunk.usage)
            for c in chunk.choices:
                assert 0 <= c.index < N, c
                assert c.index not in finish, f"a chunk of choice {c.index} after its finish"
                text[c.index] += c.delta.content or ""
                if c.finish_reason is not None:
                    finish[c.index] = c.finish_reason
        assert sorted(finish) == list(range(N)), finish
        assert len(usage) == 1, usage  # one usage chunk for all choices
        assert usage[0].prompt_tokens == whole.usage.prompt_tokens, (usage, whole.usage)
        assert usage[0].completion_tokens == whole.usage.completion_tokens, (usage, whole.usage)
        if self.exact:
            for c in whole.choices:
                assert text[c.index] == c.message.content, (c.index, text[c.index], c)
                assert finish[c.index] == c.finish_reason, (c.index, finish, c)

    # --- completions --------------------------------------------------------------------------
    def check_completions_choices(self):
        def make(**kw):
            return self.client.completions.create(
                model=MODEL, prompt=TEXT_PROMPT, temperature=1.0, max_tokens=10, **kw)
        r = make(n=3, seed=SEED)
        assert [c.index for c in r.choices] == [0, 1, 2], r.choices
        streamed = {0: "", 1: "", 2: ""}
        for chunk in make(n=3, seed=SEED, stream=True):
            for c in chunk.choices:
                streamed[c.index] += c.text
        refs = self.singles(make, 3)
        assert r.usage.completion_tokens == sum(x.usage.completion_tokens for x in refs), r.usage
        if self.exact:
            for c, ref in zip(r.choices, refs):
                assert c.text == ref.choices[0].text == streamed[c.index], (c, ref, streamed)

    # --- structured outputs -------------------------------------------------------------------
    def check_json_schema_every_choice_is_an_instance(self):
        fmt = {"type": "json_schema",
               "json_schema": {"name": "level", "schema": SCHEMA, "strict": True}}
        r = self.client.chat.completions.create(
            model=MODEL, messages=PROMPT, temperature=1.0, max_tokens=200, n=3, seed=SEED,
            response_format=fmt)
        assert len(r.choices) == 3, r.choices
        for c in r.choices:
            assert c.finish_reason == "stop", c
            jsonschema.validate(json.loads(c.message.content), SCHEMA,
                                cls=jsonschema.Draft202012Validator)
        if self.exact:
            for c in r.choices:
                ref = self.client.chat.completions.create(
                    model=MODEL, messages=PROMPT, temperature=1.0, max_tokens=200,
                    seed=SEED + c.index, response_format=fmt)
                assert c.message.content == ref.choices[0].message.content, (c, ref)

    # --- errors -------------------------------------------------------------------------------
    def check_bad_n_is_a_400_naming_n(self):
        for n in (0, 5, 17):  # 5: above the worker's --parallel 4
            try:
                self.chat(n=n)
            except openai.BadRequestError as e:
                assert e.status_code == 400, e
                assert e.body is not None and e.body.get("param") == "n", e.body
                continue
            raise AssertionError(f"n={n} was accepted")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--metrics-url", required=True)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    signal.alarm(600)
    print(f"openai {openai.__version__}, Python {sys.version.split()[0]}, {args.base_url}, "
          f"exact={args.exact}")
    checks = Checks(args)
    names = sorted(n for n in dir(checks) if n.startswith("check_") and args.only in n)
    failed = []
    for name in names:
        try:
            getattr(checks, name)()
            print(f"PASS {name}")
        except Exception:  # noqa: BLE001 -- every failure is reported, then the next check runs
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{len(names) - len(failed)} of {len(names)} checks passed")
    return 1 if failed or not names else 0


if __name__ == "__main__":
    sys.exit(main())
