#!/usr/bin/env python3
"""POST /v1/responses through the official OpenAI Python SDK against a running deltaserve-router.

Run by tests/integration/responses_sdk_test.cc (label integration) in two set-ups:

  --mode tiny    a worker on the tiny golden model ("tiny", context 2048) behind the router. The
                 references are the SDK itself (it must parse every object and event) and the
                 chat completions endpoint: the same conversation, greedy, must give the same text
                 and the same prompt token count through both APIs; json_schema output is checked
                 with `jsonschema`.
  --mode tools   deltaserve-scripted-worker (a test double replaying a reasoning + Qwen XML
                 function call, then an answer, twice) behind the router, for a deterministic
                 function-call round trip: the SDK sends the call and its output back.

    python3 responses_check.py --mode tiny --base-url http://127.0.0.1:PORT/v1

Every check runs even when an earlier one failed; exit status 0 only when all passed.
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

HELLO = "Hello there"
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
        "note": {"type": "string", "maxLength": 8},
    },
    "required": ["answer", "confidence", "note"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city", "unit"],
    },
}
# What Codex CLI sends besides its function tools (ignored by DeltaServe, named in a header).
CODEX_EXTRA_TOOLS = [{"type": "web_search"}, {"type": "local_shell"}]
ANSWER = "It is sunny in Paris, 22 C."
# The scripted worker's first output reasons this before its "</think>", in 5-byte pieces of one
# token each: the reasoning tokens are the pieces wholly before it.
CALL_REASONING = "The user wants the weather; I will call the tool.\n"
PIECE_BYTES = 5


def usage_consistent(u):
    assert u.total_tokens == u.input_tokens + u.output_tokens, u
    assert 0 <= u.input_tokens_details.cached_tokens <= u.input_tokens, u
    assert 0 <= u.output_tokens_details.reasoning_tokens <= u.output_tokens, u


def message_texts(response):
    return [c.text for o in response.output if o.type == "message" for c in o.content]


class TinyChecks:
    def __init__(self, args):
        self.base_url = args.base_url
        self.client = OpenAI(api_key="sk-none", base_url=args.base_url, max_retries=0,
                             timeout=120.0)
        self._plain = None

    def plain(self):
        if self._plain is None:
            self._plain = self.client.responses.create(
                model="tiny", input=HELLO, max_output_tokens=12, temperature=0)
        return self._plain

    def chat(self, messages, max_tokens=12):
        return self.client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=max_tokens, temperature=0)

    def check_plain_equals_chat(self):
        r = self.plain()
        assert r.object == "response", r
        assert r.id.startswith("resp_"), r.id
        assert r.model == "tiny", r.model
        assert r.status in ("completed", "incomplete"), r.status
        if r.status == "incomplete":
            assert r.incomplete_details.reason == "max_output_tokens", r.incomplete_details
            assert r.usage.output_tokens == 12, r.usage
        assert r.output_text, r.output  # the tiny model writes text within 12 tokens
        assert [o.type for o in r.output][-1] == "message", r.output
        ref = self.chat([{"role": "user", "content": HELLO}])
        assert r.output_text == (ref.choices[0].message.content or ""), (r.output_text, ref)
        assert r.usage.input_tokens == ref.usage.prompt_tokens, (r.usage, ref.usage)
        assert r.usage.output_tokens == ref.usage.completion_tokens, (r.usage, ref.usage)
        usage_consistent(r.usage)
        assert r.store is False and r.max_output_tokens == 12 and r.temperature == 0, r

    def check_stream_events_accumulate_to_the_plain_answer(self):
        ref = self.plain()
        events = list(self.client.responses.create(
            model="tiny", input=HELLO, max_output_tokens=12, temperature=0, stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events))), events
        assert events[0].type == "response.created", events[0]
        assert events[1].type == "response.in_progress", events[1]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == ref.output_text, (text, ref.output_text)
        last = events[-1]
        want = "response.completed" if ref.status == "completed" else "response.incomplete"
        assert last.type == want, last
        assert last.response.output_text == ref.output_text, last.response
        assert last.response.usage.output_tokens == ref.usage.output_tokens, last.response.usage
        assert last.response.usage.input_tokens == ref.usage.input_tokens, last.response.usage
        done = [e for e in events if e.type == "response.output_text.done"]
        assert len(done) == 1 and done[0].text == ref.output_text, done

    def check_sdk_stream_helper_snapshot(self):
        ref = self.plain()
        snapshot = None
        with self.client.responses.stream(model="tiny", input=HELLO, max_output_tokens=12,
                                          temperature=0) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    snapshot = event.snapshot
                last = event
            if last.type == "response.completed":
                final = stream.get_final_response()
                assert final.output_text == ref.output_text, final
        assert snapshot == ref.output_text, (snapshot, ref.output_text)

    def check_instructions_are_the_system_prompt(self):
        r = self.client.responses.create(model="tiny", instructions="Answer in French.",
                                         input=HELLO, max_output_tokens=12, temperature=0)
        ref = self.chat([{"role": "system", "content": "Answer in French."},
                         {"role": "user", "content": HELLO}])
        assert r.output_text == (ref.choices[0].message.content or ""), (r.output_text, ref)
        assert r.usage.input_tokens == ref.usage.prompt_tokens, (r.usage, ref.usage)
        assert r.instructions == "Answer in French.", r.instructions

    def check_message_items_equal_chat_messages(self):
        items = [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                 {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]},
                 {"role": "user", "content": "How are you?"}]
        r = self.client.responses.create(model="tiny", input=items, max_output_tokens=8,
                                         temperature=0)
        ref = self.chat([{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello!"},
                         {"role": "user", "content": "How are you?"}], max_tokens=8)
        assert r.output_text == (ref.choices[0].message.content or ""), (r.output_text, ref)
        assert r.usage.input_tokens == ref.usage.prompt_tokens, (r.usage, ref.usage)

    def check_json_schema_output_validates(self):
        for stream in (False, True):
            kwargs = dict(model="tiny", input="Answer in JSON.", max_output_tokens=1200,
                          temperature=0,
                          text={"format": {"type": "json_schema", "name": "verdict",
                                           "schema": SCHEMA, "strict": True}})
            if stream:
                with self.client.responses.stream(**kwargs) as s:
                    r = s.get_final_response()
            else:
                r = self.client.responses.create(**kwargs)
            assert r.status == "completed", r
            jsonschema.validate(json.loads(r.output_text), SCHEMA,
                                cls=jsonschema.Draft202012Validator)
            assert r.text.format.type == "json_schema", r.text

    def check_json_schema_the_schema_engine_refuses_is_400(self):
        try:
            self.client.responses.create(
                model="tiny", input="x", max_output_tokens=4,
                text={"format": {"type": "json_schema", "name": "bad",
                                 "schema": {"$ref": "https://example.com/remote.json"}}})
        except openai.BadRequestError as e:
            assert e.status_code == 400
            assert e.body["param"] == "text.format.schema", e.body
            return
        raise AssertionError("a schema the engine cannot enforce was accepted")

    def check_usage_cached_tokens_on_a_repeated_prompt(self):
        prompt = "Repeat after me: the quick brown fox jumps over the lazy dog. " * 3
        first = self.client.responses.create(model="tiny", input=prompt, max_output_tokens=2,
                                             temperature=0)
        second = self.client.responses.create(model="tiny", input=prompt, max_output_tokens=2,
                                              temperature=0)
        usage_consistent(first.usage)
        usage_consistent(second.usage)
        assert second.usage.input_tokens == first.usage.input_tokens, (first.usage, second.usage)
        assert second.usage.input_tokens_details.cached_tokens > 0, second.usage

    def check_codex_like_request_is_served_with_a_warning(self):
        # Codex's request (codex-rs ResponsesApiRequest): reasoning {effort, summary "auto"},
        # store false, include reasoning.encrypted_content, prompt_cache_key; `text.verbosity`
        # only when configured, and then only the default is served.
        body = dict(model="tiny", instructions="You are a coding agent.",
                    input=[{"type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": "list files"}]}],
                    tools=[{"type": "function", "name": "shell", "description": "Run a command",
                            "strict": False,
                            "parameters": {"type": "object",
                                           "properties": {"command": {"type": "array",
                                                                      "items": {"type": "string"}}},
                                           "required": ["command"]}}] + CODEX_EXTRA_TOOLS,
                    tool_choice="auto", parallel_tool_calls=False, store=False,
                    reasoning={"effort": "minimal", "summary": "auto"},
                    include=["reasoning.encrypted_content"], prompt_cache_key="session-1",
                    text={"verbosity": "medium"}, max_output_tokens=6, temperature=0)
        raw = self.client.responses.with_raw_response.create(**body)
        warning = raw.headers.get("x-deltaserve-warning", "")
        assert "web_search" in warning and "local_shell" in warning, raw.headers
        r = raw.parse()
        assert r.status in ("completed", "incomplete"), r
        assert [t.name for t in r.tools] == ["shell"], r.tools
        assert r.text.verbosity == "medium" and r.reasoning.summary == "auto", (r.text, r.reasoning)
        assert r.output[0].type != "reasoning" or r.output[0].summary == [], r.output[0]
        with self.client.responses.with_streaming_response.create(stream=True, **body) as s:
            assert "local_shell" in s.headers.get("x-deltaserve-warning", ""), s.headers
            lines = [line for line in s.iter_lines() if line]
        assert lines[0] == "event: response.created", lines[:2]
        assert lines[-2] in ("event: response.completed", "event: response.incomplete"), lines
        with urllib.request.urlopen(self.base_url.rsplit("/v1", 1)[0] + "/metrics",
                                    timeout=30) as m:
            metrics = m.read().decode()
        for t in ("web_search", "local_shell"):
            line = 'deltaserve_router_responses_ignored_tools_total{type="%s"}' % t
            values = [float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)]
            assert values and values[0] >= 2, (line, values)

    def check_max_output_tokens_makes_it_incomplete(self):
        r = self.client.responses.create(model="tiny", input=HELLO, max_output_tokens=3,
                                         temperature=0,
                                         reasoning={"effort": "none"})
        if r.status == "incomplete":
            assert r.incomplete_details.reason == "max_output_tokens", r
            assert r.usage.output_tokens == 3, r.usage
            assert r.output[-1].status == "incomplete", r.output
        else:
            assert r.usage.output_tokens < 3, r

    def expect_400(self, param, **kwargs):
        try:
            self.client.responses.create(**kwargs)
        except openai.BadRequestError as e:
            assert e.status_code == 400, e
            assert e.body["type"] == "invalid_request_error", e.body
            assert e.body["param"] == param, e.body
            return
        raise AssertionError("accepted: %r" % (kwargs,))

    def check_stateful_and_unsupported_fields_are_400(self):
        self.expect_400("previous_response_id", model="tiny", input="x",
                        previous_response_id="resp_123")
        self.expect_400("input[0].content[0].type", model="tiny", input=[
            {"role": "user", "content": [{"type": "input_image",
                                          "image_url": "https://example.com/a.png"}]}])
        self.expect_400("input[0].call_id", model="tiny", input=[
            {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}])
        # Codex with model_verbosity / model_reasoning_summary configured: only the defaults.
        self.expect_400("text.verbosity", model="tiny", input="x", text={"verbosity": "low"})
        self.expect_400("reasoning.summary", model="tiny", input="x",
                        reasoning={"effort": "low", "summary": "detailed"})
        self.expect_400("reasoning.generate_summary", model="tiny", input="x",
                        reasoning={"generate_summary": "concise"})
        self.expect_400("service_tier", model="tiny", input="x", service_tier="flex")

    def check_context_overflow_is_400_at_input(self):
        # The router's context check names the conversation: `input` here (`messages` in chat).
        try:
            self.client.responses.create(model="tiny", input=HELLO, max_output_tokens=100000)
        except openai.BadRequestError as e:
            assert e.body["param"] == "input", e.body
            assert e.body["code"] == "context_length_exceeded", e.body
            return
        raise AssertionError("a request beyond the context was served")

    def check_large_body_is_read_off_the_io_threads(self):
        # Over 64 KiB the body is parsed on the router's request threads (docs/router.md); this
        # one is also too long for the context, so it ends as that 400.
        try:
            self.client.responses.create(model="tiny", instructions="word " * 20000, input=HELLO,
                                         max_output_tokens=4)
        except openai.BadRequestError as e:
            assert e.body["param"] == "input", e.body
            assert e.body["code"] == "context_length_exceeded", e.body
            return
        raise AssertionError("a 100 KB prompt fit a 2048-token context")

    def check_unknown_model_is_404(self):
        try:
            self.client.responses.create(model="no-such-model", input="x")
        except openai.NotFoundError as e:
            assert e.status_code == 404, e
            return
        raise AssertionError("an unknown model was served")


class ToolChecks:
    """Against the scripted worker: each Generate call answers with the next scripted output
    (a call, the answer, a call, the answer)."""

    def __init__(self, args):
        self.client = OpenAI(api_key="sk-none", base_url=args.base_url, max_retries=0,
                             timeout=60.0)
        self.tools = [WEATHER_TOOL] + CODEX_EXTRA_TOOLS
        self.question = [{"role": "user", "content": "What is the weather in Paris?"}]

    def round_trip(self, stream):
        kwargs = dict(model="m", input=self.question, tools=self.tools,
                      reasoning={"effort": "low"})
        if stream:
            with self.client.responses.stream(**kwargs) as s:
                events = list(s)
                first = s.get_final_response()
            deltas = "".join(e.delta for e in events
                             if e.type == "response.function_call_arguments.delta")
            done = [e for e in events if e.type == "response.function_call_arguments.done"]
            reasoning = "".join(e.delta for e in events
                                if e.type == "response.reasoning_text.delta")
        else:
            first = self.client.responses.create(**kwargs)
        assert first.status == "completed", first
        types = [o.type for o in first.output]
        assert types == ["reasoning", "function_call"], types
        assert "call the tool" in first.output[0].content[0].text, first.output[0]
        assert first.usage.output_tokens_details.reasoning_tokens == \
            len(CALL_REASONING) // PIECE_BYTES, first.usage
        call = first.output[1]
        assert call.name == "get_weather", call
        assert call.call_id, call
        assert json.loads(call.arguments) == {"city": "Paris", "unit": "C"}, call.arguments
        if stream:
            assert deltas == call.arguments, (deltas, call.arguments)
            assert len(done) == 1 and done[0].arguments == call.arguments, done
            assert reasoning == first.output[0].content[0].text, reasoning
        # The client runs the tool and sends the whole turn back with the call's output.
        follow = self.question + [o.model_dump(exclude_none=True) for o in first.output] + [
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 22 C"}]
        kwargs = dict(model="m", input=follow, tools=self.tools)
        if stream:
            with self.client.responses.stream(**kwargs) as s:
                second = s.get_final_response()
        else:
            second = self.client.responses.create(**kwargs)
        assert second.status == "completed", second
        assert second.output_text == ANSWER, second.output_text
        assert [o.type for o in second.output] == ["reasoning", "message"], second.output

    def check_function_call_round_trip(self):
        self.round_trip(stream=False)

    def check_function_call_round_trip_streamed(self):
        self.round_trip(stream=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--mode", choices=["tiny", "tools"], required=True)
    args = parser.parse_args()
    signal.alarm(600)  # a hung router fails the run instead of stalling CI
    checks = TinyChecks(args) if args.mode == "tiny" else ToolChecks(args)
    names = [n for n in dir(checks) if n.startswith("check_")]
    if args.mode == "tools":  # the scripted outputs are consumed in this order
        names = ["check_function_call_round_trip", "check_function_call_round_trip_streamed"]
    failed = 0
    for name in names:
        try:
            getattr(checks, name)()
            print("PASS", name)
        except Exception:  # noqa: BLE001 — every check runs and reports
            failed += 1
            print("FAIL", name)
            traceback.print_exc(file=sys.stdout)
    print("%d of %d checks failed" % (failed, len(names)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
