#!/usr/bin/env python3
"""Structured outputs through the official OpenAI Python SDK against a running deltaserve-router.

Run by tests/integration/structured_outputs_test.cc (label integration), which starts a worker
on the tiny random-weight golden model and a router serving it twice: as "tiny" (the model
file's Qwen3 template: tool calls as JSON in <tool_call>) and as "tiny-xml" (the Qwen3.5
template from ../shared/fixtures: Qwen XML calls, and a generation prompt that opens <think>
when thinking is on). Then:

    python3 structured_outputs_check.py --base-url http://127.0.0.1:PORT/v1

The model's weights are random, so whatever it writes is what the grammar allowed: every check
asserts on the outputs with an independent reference, the `jsonschema` package (Draft 2020-12)
and Python's json module, never on the engine's own view. Schemas have bounded instances (enums,
booleans, bounded integers, strings with maxLength), so with max_tokens well above their longest
text every output must be complete: 100% must parse and validate. Requests run 4 at a time, so
several constrained sequences share the worker's batches.

Every check runs even when an earlier one failed; exit status 0 only when all passed.
"""

import argparse
import concurrent.futures
import enum
import json
import re
import signal
import sys
import traceback
from typing import Literal, Optional

import jsonschema
import openai
import pydantic
from openai import OpenAI

N = 12  # outputs per schema and configuration (seeds 0..N-1, temperature 1.0)
MAX_TOKENS = 1200  # far above the longest instance (whitespace runs are bounded too)

PROMPT = [{"role": "user", "content": "Answer in JSON."}]

SCHEMAS = {
    "flat": {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
            "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
            "ok": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 8},
        },
        "required": ["answer", "confidence", "ok", "note"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": -20, "maximum": 99},
                    "y": {"type": "integer", "minimum": 0, "maximum": 9},
                },
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                     "minItems": 1, "maxItems": 3},
            "mode": {"const": "fast"},
            "maybe": {"type": ["boolean", "null"]},
            "label": {"type": "string", "minLength": 1, "maxLength": 4},
        },
        "required": ["point", "tags", "mode"],
        "additionalProperties": False,
    },
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "detailed": {"type": "boolean"},
            },
            "required": ["city", "days"],
        },
    },
}
PING = {"type": "function", "function": {"name": "ping", "parameters": {
    "type": "object", "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 3}},
    "required": ["level"]}}}
TOOLS = [WEATHER, PING]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

# Thinking configurations: the model name, chat_template_kwargs and a reasoning budget (the
# random model rarely writes </think> itself; the worker closes the block after the budget).
THINKING = {
    "tiny": dict(model="tiny", extra_body={}),
    "xml-nothink": dict(model="tiny-xml",
                        extra_body={"chat_template_kwargs": {"enable_thinking": False}}),
    "xml-think": dict(model="tiny-xml",
                      extra_body={"chat_template_kwargs": {"enable_thinking": True},
                                  "thinking_budget": 6}),
}


def validate(instance, schema):
    jsonschema.validate(instance, schema, cls=jsonschema.Draft202012Validator)


class Checks:
    def __init__(self, args):
        self.client = OpenAI(api_key=args.api_key, base_url=args.base_url, max_retries=0,
                             timeout=120.0)
        self.pool = concurrent.futures.ThreadPoolExecutor(4)

    def many(self, make_request, n=N):
        """make_request(seed) for seeds 0..n-1, 4 at a time; the responses in seed order."""
        return list(self.pool.map(make_request, range(n)))

    def chat(self, seed, config="tiny", max_tokens=MAX_TOKENS, extra=None, **kwargs):
        c = THINKING[config]
        return self.client.chat.completions.create(
            model=c["model"], messages=PROMPT, temperature=1.0, seed=seed,
            max_tokens=max_tokens, extra_body=dict(c["extra_body"], **(extra or {})), **kwargs)

    # --- response_format json_schema ---------------------------------------------------------
    def check_json_schema_every_output_validates(self):
        reasoned = 0
        for config in THINKING:
            for name, schema in SCHEMAS.items():
                for strict in (True, False):
                    fmt = {"type": "json_schema",
                           "json_schema": {"name": name, "schema": schema, "strict": strict}}
                    for seed, r in enumerate(self.many(
                            lambda s: self.chat(s, config, response_format=fmt))):
                        what = f"{config} {name} strict={strict} seed={seed}"
                        choice = r.choices[0]
                        assert choice.finish_reason == "stop", (what, choice)
                        validate(json.loads(choice.message.content), schema)
                        if config == "xml-think":
                            # The JSON lands in content (it parsed above); the reasoning before
                            # it stayed free and went to reasoning_content.
                            reasoned += bool(getattr(choice.message, "reasoning_content", None))
        assert reasoned > 0, "no output under thinking had reasoning_content"

    def check_model_opened_reasoning_then_json(self):
        """Qwen3's template (model "tiny") leaves opening <think> to the model: a logit bias makes
        it open one (id 2024 in the tiny vocabulary, ../shared/golden/README.md), the budget
        closes it, and the document lands in content."""
        schema = SCHEMAS["flat"]
        fmt = {"type": "json_schema", "json_schema": {"name": "flat", "schema": schema}}
        for seed in range(4):
            r = self.client.chat.completions.create(
                model="tiny", messages=PROMPT, temperature=1.0, seed=seed, max_tokens=MAX_TOKENS,
                response_format=fmt, logit_bias={"2024": 100},
                extra_body={"thinking_budget": 4,
                            "chat_template_kwargs": {"enable_thinking": True}})
            choice = r.choices[0]
            assert choice.finish_reason == "stop", (seed, choice)
            validate(json.loads(choice.message.content), schema)
            assert getattr(choice.message, "reasoning_content", None) is not None, (seed, r)

    def check_json_schema_streamed(self):
        schema = SCHEMAS["flat"]
        fmt = {"type": "json_schema", "json_schema": {"name": "flat", "schema": schema}}
        for seed in range(4):
            stream = self.chat(seed, "xml-think", response_format=fmt, stream=True)
            content, finish = "", None
            for chunk in stream:
                for c in chunk.choices:
                    content += c.delta.content or ""
                    finish = c.finish_reason or finish
            assert finish == "stop", (seed, finish, content)
            validate(json.loads(content), schema)

    def check_json_schema_on_completions(self):
        schema = SCHEMAS["nested"]
        for seed in range(4):
            r = self.client.completions.create(
                model="tiny", prompt="JSON:", temperature=1.0, seed=seed, max_tokens=MAX_TOKENS,
                extra_body={"response_format": {"type": "json_schema", "json_schema": {
                    "name": "nested", "schema": schema}}})
            assert r.choices[0].finish_reason == "stop", r
            validate(json.loads(r.choices[0].text), schema)

    def check_sdk_parse_with_a_pydantic_model(self):
        """client.beta.chat.completions.parse sends the strict schema pydantic generates."""
        class Point(pydantic.BaseModel):
            x: int = pydantic.Field(ge=0, le=50)
            y: int = pydantic.Field(ge=0, le=50)

        class Answer(pydantic.BaseModel):
            verdict: Literal["yes", "no"]
            point: Point
            note: Optional[pydantic.constr(max_length=6)]
            done: bool

        for seed in range(6):
            r = self.client.beta.chat.completions.parse(
                model="tiny", messages=PROMPT, temperature=1.0, seed=seed,
                max_tokens=MAX_TOKENS, response_format=Answer)
            choice = r.choices[0]
            assert choice.finish_reason == "stop", choice
            assert isinstance(choice.message.parsed, Answer), choice
            validate(json.loads(choice.message.content), Answer.model_json_schema())

    # --- response_format json_object ---------------------------------------------------------
    def check_json_object_is_one_object_or_length(self):
        fmt = {"type": "json_object"}
        finishes = []
        for config in ("tiny", "xml-think"):
            for seed, r in enumerate(self.many(
                    lambda s: self.chat(s, config, response_format=fmt, max_tokens=300))):
                choice = r.choices[0]
                finishes.append(choice.finish_reason)
                assert choice.finish_reason in ("stop", "length"), (config, seed, choice)
                if choice.finish_reason == "stop":
                    assert isinstance(json.loads(choice.message.content), dict), (seed, choice)
        assert "stop" in finishes, finishes

    # --- forced tool calls -------------------------------------------------------------------
    def check_tool_choice_required(self):
        for config in THINKING:
            for parallel in (True, False):
                for seed, r in enumerate(self.many(lambda s: self.chat(
                        s, config, tools=TOOLS, tool_choice="required",
                        parallel_tool_calls=parallel))):
                    what = f"{config} parallel={parallel} seed={seed}"
                    choice = r.choices[0]
                    assert choice.finish_reason == "tool_calls", (what, choice)
                    calls = choice.message.tool_calls
                    assert calls, (what, choice)
                    if not parallel:
                        assert len(calls) == 1, (what, calls)
                    for call in calls:
                        assert call.type == "function", (what, call)
                        validate(json.loads(call.function.arguments),
                                 PARAMETERS[call.function.name])
                    assert not (choice.message.content or "").strip(), (what, choice)

    def check_tool_choice_named_function(self):
        for config in THINKING:
            for name in PARAMETERS:
                choice_param = {"type": "function", "function": {"name": name}}
                for seed, r in enumerate(self.many(lambda s: self.chat(
                        s, config, tools=TOOLS, tool_choice=choice_param), n=6)):
                    what = f"{config} {name} seed={seed}"
                    choice = r.choices[0]
                    assert choice.finish_reason == "tool_calls", (what, choice)
                    calls = choice.message.tool_calls
                    assert len(calls) == 1 and calls[0].function.name == name, (what, calls)
                    validate(json.loads(calls[0].function.arguments), PARAMETERS[name])

    def check_pydantic_function_tool(self):
        """openai.pydantic_function_tool's strict schema ($defs for an enum class, Optional as
        anyOf with null) forced in both call formats, validated with jsonschema."""
        class Color(str, enum.Enum):
            RED = "red"
            GREEN = "green"

        class Paint(pydantic.BaseModel):
            color: Color
            note: Optional[pydantic.constr(max_length=5)]
            count: Optional[pydantic.conint(ge=0, le=5)]

        tool = openai.pydantic_function_tool(Paint)
        parameters = tool["function"]["parameters"]
        choice = {"type": "function", "function": {"name": tool["function"]["name"]}}
        for config in ("tiny", "xml-nothink"):
            for seed, r in enumerate(self.many(
                    lambda s: self.chat(s, config, tools=[tool], tool_choice=choice), n=6)):
                c = r.choices[0]
                assert c.finish_reason == "tool_calls", (config, seed, c)
                assert len(c.message.tool_calls) == 1, (config, seed, c)
                validate(json.loads(c.message.tool_calls[0].function.arguments), parameters)

    def check_structured_output_with_tools_under_auto(self):
        """response_format with tools and tool_choice "auto" (an agent with an output type):
        each answer is a valid document in content, or instead valid tool_calls."""
        schema = SCHEMAS["flat"]
        fmt = {"type": "json_schema", "json_schema": {"name": "flat", "schema": schema}}
        kinds = set()
        for config in ("tiny", "xml-nothink"):
            for seed, r in enumerate(self.many(lambda s: self.chat(
                    s, config, tools=TOOLS, response_format=fmt,
                    # Both kinds whatever the random logits: odd seeds lean to calls (2014 is
                    # "<tool_call>\n"), even ones to the document (90 is "{").
                    logit_bias={"2014": 5} if s % 2 else {"90": 5}))):
                c = r.choices[0]
                if c.message.tool_calls:
                    assert c.finish_reason == "tool_calls", (config, seed, c)
                    for call in c.message.tool_calls:
                        validate(json.loads(call.function.arguments),
                                 PARAMETERS[call.function.name])
                    kinds.add("calls")
                else:
                    assert c.finish_reason == "stop", (config, seed, c)
                    validate(json.loads(c.message.content), schema)
                    kinds.add("document")
        assert kinds == {"calls", "document"}, kinds

    def check_cut_call_is_a_call_with_partial_arguments(self):
        """A forced call cut by max_tokens comes back as OpenAI returns one: finish_reason
        "length", the call (once its name was written) with the arguments as far as they went,
        and never the <tool_call> markup as content."""
        seen_calls = 0
        for config in ("tiny", "xml-nothink"):
            for max_tokens in (6, 14, 24):
                for seed in range(3):
                    r = self.chat(seed, config, tools=TOOLS, tool_choice="required",
                                  max_tokens=max_tokens)
                    choice = r.choices[0]
                    assert choice.finish_reason == "length", (config, seed, choice)
                    content = choice.message.content or ""
                    for tag in ("<tool_call", "<function", "<parameter", "</"):
                        assert tag not in content, (config, max_tokens, seed, choice)
                    for call in choice.message.tool_calls or []:
                        assert call.function.name in PARAMETERS, (config, seed, call)
                        args = call.function.arguments
                        assert args == "" or args.lstrip().startswith("{"), (config, seed, call)
                        seen_calls += 1
        # Not vacuous: some budgets are past the function's name.
        assert seen_calls > 0, seen_calls

    def check_stop_string_still_applies(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "flat", "schema": SCHEMAS["flat"]}}
        r = self.chat(0, "tiny", response_format=fmt, stop=["\"answer\""])
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        assert "\"answer\"" not in choice.message.content, choice

    # --- vLLM-style guided decoding fields (extra_body) ---------------------------------------
    def check_vllm_guided_regex_and_choice(self):
        """structured_outputs / guided_regex / guided_choice as vLLM's clients send them: every
        output matches the regex in full (Python's re as the reference) or is one of the
        choices, on chat (both templates, thinking on and off) and on completions."""
        pattern = r"[0-9]{3}-[a-z]{2,4}( ok)?"
        for config in THINKING:
            for field in ({"structured_outputs": {"regex": pattern}}, {"guided_regex": pattern}):
                for seed, r in enumerate(self.many(
                        lambda s, config=config, field=field: self.chat(s, config, extra=field))):
                    choice = r.choices[0]
                    assert choice.finish_reason == "stop", (config, field, seed, choice)
                    assert re.fullmatch(pattern, choice.message.content), (config, seed, choice)
        choices = ["red", "green (go)", "a|b", "\u00e9t\u00e9"]
        for config in ("tiny", "xml-nothink"):
            for seed, r in enumerate(self.many(lambda s, config=config: self.chat(
                    s, config, extra={"guided_choice": choices}))):
                choice = r.choices[0]
                assert choice.finish_reason == "stop", (config, seed, choice)
                assert choice.message.content in choices, (config, seed, choice.message.content)
        for seed in range(4):
            r = self.client.completions.create(
                model="tiny", prompt="Code:", temperature=1.0, seed=seed, max_tokens=MAX_TOKENS,
                extra_body={"guided_regex": pattern})
            assert r.choices[0].finish_reason == "stop", r
            assert re.fullmatch(pattern, r.choices[0].text), r

    def check_guided_fields_refused_with_their_param(self):
        for body, param in (({"guided_grammar": "root ::= \"a\""}, "guided_grammar"),
                            ({"guided_regex": "a(?=b)"}, "guided_regex"),
                            ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex")):
            try:
                self.chat(0, extra=body)
            except openai.BadRequestError as e:
                got = e.body if isinstance(e.body, dict) else {}
                assert got.get("param") == param, (body, e.body)
            else:
                raise AssertionError(f"{body} was accepted")

    # --- refusals before any worker ----------------------------------------------------------
    def check_unenforceable_schema_is_400_naming_the_keyword(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {
            "type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}}}
        try:
            self.chat(0, response_format=fmt)
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            assert body.get("param") == "response_format.json_schema.schema", e.body
            assert "$ref" in body.get("message", ""), e.body
        else:
            raise AssertionError("an unenforceable schema was accepted")

    def check_unenforceable_tool_parameters_are_400(self):
        bad = {"type": "function", "function": {"name": "when", "parameters": {
            "type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}
        try:
            self.chat(0, "xml-nothink", tools=[WEATHER, bad], tool_choice="required")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            assert body.get("param") == "tools[1].function.parameters", e.body
            assert "\"format\"" in body.get("message", ""), e.body
        else:
            raise AssertionError("unenforceable parameters were accepted")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="sk-none")
    parser.add_argument("--only", default="", help="run the checks whose name contains this")
    args = parser.parse_args()
    signal.alarm(1200)  # the wrapper waits without a timeout of its own

    print(f"openai {openai.__version__}, jsonschema, Python {sys.version.split()[0]}, "
          f"{args.base_url}")
    checks = Checks(args)
    names = sorted(n for n in dir(checks) if n.startswith("check_") and args.only in n)
    failed = []
    for name in names:
        try:
            getattr(checks, name)()
            print(f"PASS {name}", flush=True)
        except Exception:  # noqa: BLE001 -- every failure is reported, then the next check runs
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    print(f"{len(names) - len(failed)} of {len(names)} checks passed")
    return 1 if failed or not names else 0


if __name__ == "__main__":
    sys.exit(main())
