#!/usr/bin/env python3
"""The official OpenAI Python SDK against a running deltaserve-router.

Run by tests/integration/openai_sdk_test.cc (label integration), which starts a worker on the
tiny golden model ("tiny", context 256) and a router with two API keys, then calls

    python3 openai_sdk_check.py --base-url http://127.0.0.1:PORT/v1 \
        --api-key KEY --limited-key KEY_WITHOUT_TINY

Every check runs even when an earlier one failed; the exit status is 0 only when all passed.
Plain asserts, no pytest: the only dependency is the `openai` package (a 1.x release; CI
installs it into build/ci-venv, see tests/run_all.sh).
"""

import argparse
import signal
import sys
import traceback

import openai
from openai import OpenAI

PROMPT = [{"role": "user", "content": "Hello there"}]
TEXT_PROMPT = "Once upon a time"


def approx(a, b, tol=1e-4):
    return abs(a - b) <= tol


class Checks:
    def __init__(self, args):
        self.model = args.model
        common = dict(base_url=args.base_url, max_retries=0, timeout=60.0)
        self.client = OpenAI(api_key=args.api_key, **common)
        self.wrong_key_client = OpenAI(api_key="sk-wrong-key", **common)
        self.limited_client = (
            OpenAI(api_key=args.limited_key, **common) if args.limited_key else None)
        self._greedy = None

    def greedy_chat(self):
        """The greedy 12-token answer to PROMPT, shared by several checks."""
        if self._greedy is None:
            self._greedy = self.client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=12, temperature=0)
        return self._greedy

    # --- models -------------------------------------------------------------------------------
    def check_models_list(self):
        models = self.client.models.list()
        ids = [m.id for m in models.data]
        assert self.model in ids, ids
        for m in models.data:
            assert m.object == "model", m
            assert isinstance(m.created, int) and isinstance(m.owned_by, str), m

    # --- chat ---------------------------------------------------------------------------------
    def check_chat_non_streaming(self):
        r = self.greedy_chat()
        assert r.object == "chat.completion", r
        assert r.id.startswith("chatcmpl-"), r.id
        assert r.model == self.model, r.model
        assert len(r.choices) == 1, r.choices
        c = r.choices[0]
        assert c.index == 0
        assert c.message.role == "assistant", c.message
        assert isinstance(c.message.content, str) and c.message.content, c.message
        assert c.finish_reason in ("length", "stop"), c.finish_reason
        u = r.usage
        assert u.prompt_tokens > 5, u
        assert 1 <= u.completion_tokens <= 12, u
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
        if c.finish_reason == "length":
            assert u.completion_tokens == 12, u

    def check_chat_streaming_with_usage(self):
        ref = self.greedy_chat()
        stream = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
        assert len(chunks) >= 3, chunks
        text = ""
        finish = None
        content_chunks = 0
        for ch in chunks[:-1]:
            assert ch.object == "chat.completion.chunk", ch
            assert ch.usage is None, ch  # only the last chunk carries usage
            assert len(ch.choices) == 1, ch
            d = ch.choices[0].delta
            if d.content:
                text += d.content
                content_chunks += 1
            if ch.choices[0].finish_reason is not None:
                finish = ch.choices[0].finish_reason
        assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
        assert len({ch.id for ch in chunks}) == 1, "one id for the whole stream"
        assert text == ref.choices[0].message.content, (text, ref.choices[0].message.content)
        assert content_chunks > 1, content_chunks
        assert finish == ref.choices[0].finish_reason, finish
        last = chunks[-1]
        assert last.choices == [], last
        assert last.usage is not None, last
        assert last.usage.completion_tokens == ref.usage.completion_tokens, last.usage
        assert last.usage.prompt_tokens == ref.usage.prompt_tokens, last.usage
        assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens

    def check_chat_streaming_without_usage(self):
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=4, temperature=0, stream=True))
        assert chunks, chunks
        assert all(ch.usage is None for ch in chunks), chunks
        assert all(len(ch.choices) == 1 for ch in chunks), chunks
        assert chunks[-1].choices[0].finish_reason in ("length", "stop"), chunks[-1]

    def check_chat_content_parts_and_system(self):
        parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
        r = self.client.chat.completions.create(
            model=self.model, max_tokens=12, temperature=0,
            messages=[{"role": "user", "content": parts}])
        # Text parts are joined, so the prompt is the same as PROMPT's.
        ref = self.greedy_chat()
        assert r.usage.prompt_tokens == ref.usage.prompt_tokens, (r.usage, ref.usage)
        assert r.choices[0].message.content == ref.choices[0].message.content
        s = self.client.chat.completions.create(
            model=self.model, max_tokens=2, temperature=0,
            messages=[{"role": "system", "content": "Be brief."}] + PROMPT)
        assert s.usage.prompt_tokens > ref.usage.prompt_tokens, (s.usage, ref.usage)

    # --- completions --------------------------------------------------------------------------
    def check_completions(self):
        r = self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=10, temperature=0)
        assert r.object == "text_completion", r
        assert r.id.startswith("cmpl-"), r.id
        assert r.model == self.model
        c = r.choices[0]
        assert isinstance(c.text, str) and c.text, c
        assert c.finish_reason in ("length", "stop"), c
        assert r.usage.prompt_tokens >= 3 and 1 <= r.usage.completion_tokens <= 10, r.usage
        chunks = list(self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=10, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        assert text == c.text, (text, c.text)
        assert chunks[-1].choices == [] and chunks[-1].usage is not None, chunks[-1]
        assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
        # A prompt given as token ids.
        ids = self.client.completions.create(
            model=self.model, prompt=[1, 2, 3], max_tokens=2, temperature=0)
        assert ids.usage.prompt_tokens == 3, ids.usage

    # --- max_tokens, stop ---------------------------------------------------------------------
    def check_max_tokens_length(self):
        for mt in (1, 3):
            r = self.client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=mt, temperature=0)
            assert r.choices[0].finish_reason == "length", r.choices[0]
            assert r.usage.completion_tokens == mt, r.usage
        r = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_completion_tokens=2, max_tokens=9,
            temperature=0)
        assert r.usage.completion_tokens == 2, "max_completion_tokens wins"

    def check_stop_strings(self):
        text = self.greedy_chat().choices[0].message.content
        # A stop string from the middle of the greedy answer: two printable, non-space
        # characters, so the expected answer is the text before its first occurrence.
        start = None
        for k in range(len(text) // 2, len(text) - 1):
            if all(ch.isprintable() and not ch.isspace() and ch != "\ufffd"
                   for ch in text[k:k + 2]):
                start = k
                break
        assert start is not None, f"no usable stop string in {text!r}"
        stop = text[start:start + 2]
        expected = text[:text.find(stop)]
        for stream in (False, True):
            kwargs = dict(model=self.model, messages=PROMPT, max_tokens=12, temperature=0,
                          stop=[stop, "never-seen-stop"])
            if stream:
                chunks = list(self.client.chat.completions.create(stream=True, **kwargs))
                got = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                finish = [ch.choices[0].finish_reason for ch in chunks
                          if ch.choices and ch.choices[0].finish_reason]
                finish = finish[-1] if finish else None
            else:
                r = self.client.chat.completions.create(**kwargs)
                got, finish = r.choices[0].message.content, r.choices[0].finish_reason
            assert finish == "stop", (stream, finish, stop, text)
            assert got == expected, (stream, got, expected, stop)
        # A single string (not a list) is accepted too.
        r = self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=10, temperature=0, stop="zzzzzz")
        assert r.choices[0].finish_reason in ("length", "stop")

    # --- seed ---------------------------------------------------------------------------------
    def check_seed_reproducibility(self):
        def sample(seed):
            r = self.client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=16, temperature=0.8, seed=seed)
            return r.choices[0].message.content

        a, b = sample(1234), sample(1234)
        assert a == b, (a, b)
        c = self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=16, temperature=0.8, seed=99)
        d = self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=16, temperature=0.8, seed=99)
        assert c.choices[0].text == d.choices[0].text, (c.choices[0].text, d.choices[0].text)
        # The seed is really used: different seeds do not all give one text.
        texts = {sample(s) for s in (1, 2, 3, 4, 5)}
        assert len(texts) >= 2, texts

    # --- logprobs -----------------------------------------------------------------------------
    def check_chat_logprobs(self):
        r = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=8, temperature=0, logprobs=True,
            top_logprobs=3)
        c = r.choices[0]
        lp = c.logprobs.content
        assert len(lp) == r.usage.completion_tokens, (len(lp), r.usage)
        joined = b""
        for e in lp:
            assert isinstance(e.token, str), e
            assert e.logprob <= 0, e
            assert len(e.top_logprobs) == 3, e
            tops = [t.logprob for t in e.top_logprobs]
            assert tops == sorted(tops, reverse=True), tops
            # Greedy decoding picks the most likely token.
            assert approx(e.logprob, tops[0]), (e.logprob, tops)
            assert e.token == e.top_logprobs[0].token, e
            assert e.bytes is not None
            joined += bytes(e.bytes)
        assert joined.decode("utf-8", errors="replace") == c.message.content, (
            joined, c.message.content)
        # Without top_logprobs: the chosen token only.
        r = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=3, temperature=0, logprobs=True)
        assert all(e.top_logprobs == [] for e in r.choices[0].logprobs.content), r
        # No logprobs asked: none returned.
        r = self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=2, temperature=0)
        assert r.choices[0].logprobs is None, r.choices[0].logprobs
        # Streamed: every content chunk carries its tokens' logprobs.
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=PROMPT, max_tokens=8, temperature=0, logprobs=True,
            top_logprobs=2, stream=True))
        streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs
                    for e in ch.choices[0].logprobs.content]
        assert len(streamed) == 8 or chunks[-1].choices[0].finish_reason == "stop", streamed
        assert [e.token for e in streamed] == [e.token for e in lp[:len(streamed)]]

    def check_completions_logprobs(self):
        r = self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, max_tokens=6, temperature=0, logprobs=2)
        c = r.choices[0]
        lp = c.logprobs
        n = r.usage.completion_tokens
        assert len(lp.tokens) == n and len(lp.token_logprobs) == n, lp
        assert len(lp.top_logprobs) == n and len(lp.text_offset) == n, lp
        assert all(x <= 0 for x in lp.token_logprobs), lp.token_logprobs
        assert all(len(t) == 2 for t in lp.top_logprobs), lp.top_logprobs
        for tok, x, tops in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            assert approx(x, max(tops.values())), (tok, x, tops)
        assert lp.text_offset == sorted(lp.text_offset), lp.text_offset

    # --- errors as the SDK's typed exceptions -------------------------------------------------
    def expect_error(self, cls, status, call, param=None, message_part=None):
        try:
            call()
        except cls as e:
            assert e.status_code == status, (e.status_code, e)
            if param is not None:
                assert e.param == param, (e.param, e.body)
            if message_part is not None:
                assert message_part in e.message, e.message
            assert isinstance(e.body, dict) and "message" in e.body and "type" in e.body, e.body
            return
        except openai.APIError as e:
            raise AssertionError(f"expected {cls.__name__}, got {type(e).__name__}: {e}")
        raise AssertionError(f"expected {cls.__name__}, the call succeeded")

    def check_errors_bad_request(self):
        chat = self.client.chat.completions.create
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, temperature=5), param="temperature")
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, n=17), param="n")
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=[]), param="messages")
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=[{"role": "wizard", "content": "hi"}]),
            param="messages[0].role")
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, logprobs=True, top_logprobs=50),
            param="top_logprobs")
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, stop=["a", "b", "c", "d", "e"]), param="stop")
        # Streaming requests fail before the stream starts: a normal HTTP error.
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, top_p=0, stream=True), param="top_p")
        # prompt + max_tokens beyond the context (256): 400 with the numbers.
        self.expect_error(openai.BadRequestError, 400, lambda: chat(
            model=self.model, messages=PROMPT, max_tokens=100000), message_part="256")
        self.expect_error(openai.BadRequestError, 400, lambda: self.client.completions.create(
            model=self.model, prompt=TEXT_PROMPT, best_of=3), param="best_of")

    def check_reasoning_effort_verbosity_and_unserved_fields(self):
        # reasoning_effort works as Responses' reasoning.effort; what a server without storage,
        # audio, predictions or tiers cannot do is a 400 naming the field, never ignored.
        chat = self.client.chat.completions.create
        for effort in ("none", "low", "high"):
            r = chat(model=self.model, messages=PROMPT, max_tokens=4, temperature=0,
                     reasoning_effort=effort, verbosity="medium", store=False,
                     service_tier="auto", prompt_cache_key="k", safety_identifier="user-hash")
            u = r.usage
            assert u.completion_tokens_details is not None, u
            assert 0 <= u.completion_tokens_details.reasoning_tokens <= u.completion_tokens, u
        for param, kwargs in (
                ("verbosity", dict(verbosity="low")),
                ("reasoning_effort", dict(reasoning_effort="high",
                                          extra_body={"chat_template_kwargs":
                                                      {"enable_thinking": False}})),
                ("store", dict(store=True)),
                ("service_tier", dict(service_tier="priority")),
                ("modalities[1]", dict(modalities=["text", "audio"])),
                ("prediction", dict(prediction={"type": "content", "content": "x"})),
                ("web_search_options", dict(web_search_options={}))):
            self.expect_error(openai.BadRequestError, 400, lambda: chat(
                model=self.model, messages=PROMPT, max_tokens=2, **kwargs), param=param)

    def check_errors_not_found(self):
        self.expect_error(openai.NotFoundError, 404, lambda: self.client.chat.completions.create(
            model="no-such-model", messages=PROMPT))
        self.expect_error(openai.NotFoundError, 404, lambda: self.client.chat.completions.create(
            model="no-such-model", messages=PROMPT, stream=True))
        self.expect_error(openai.NotFoundError, 404, lambda: self.client.completions.create(
            model="no-such-model", prompt="x"))

    def check_errors_keys(self):
        self.expect_error(
            openai.AuthenticationError, 401, lambda: self.wrong_key_client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=2))
        self.expect_error(
            openai.AuthenticationError, 401,
            lambda: self.wrong_key_client.completions.create(model=self.model, prompt="x"))
        if self.limited_client is None:
            raise AssertionError("--limited-key not given")
        self.expect_error(
            openai.PermissionDeniedError, 403, lambda: self.limited_client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=2))
        self.expect_error(
            openai.PermissionDeniedError, 403,
            lambda: self.limited_client.chat.completions.create(
                model=self.model, messages=PROMPT, max_tokens=2, stream=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="sk-none")
    parser.add_argument("--limited-key", default="")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--only", default="", help="run the checks whose name contains this")
    args = parser.parse_args()
    # The wrapper waits for this process without its own timeout: bound the whole run.
    signal.alarm(600)

    print(f"openai {openai.__version__}, Python {sys.version.split()[0]}, {args.base_url}")
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
