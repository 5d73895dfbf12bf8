#!/usr/bin/env python3
"""The official Anthropic Python SDK against a running deltaserve-router.

Run by tests/integration/anthropic_sdk_test.cc (label integration), which starts
- a worker on the tiny golden model ("tiny", context 256) behind a router with two API keys
  and the alias "claude-test" -> tiny (--base-url), and
- deltaserve-scripted-worker (a test double replaying scripted outputs in Qwen3.5's format:
  reasoning, then an XML tool call; then reasoning and an answer) behind a second router
  (--scripted-base-url), for a deterministic tool_use round trip and thinking blocks.

    python3 anthropic_sdk_check.py --base-url http://127.0.0.1:PORT --api-key KEY \
        --limited-key KEY_WITHOUT_TINY --scripted-base-url http://127.0.0.1:PORT2

Every check runs even when an earlier one failed; the exit status is 0 only when all passed.
The scripted checks run in name order (each consumes the worker's outputs in turn).
"""

import argparse
import signal
import sys
import traceback

import anthropic
from anthropic import Anthropic

PROMPT = [{"role": "user", "content": "Hello there"}]
# anthropic 2.x dropped temperature / top_p / top_k from create()'s signature; the API (and the
# router) still take them, so they go in the body.
GREEDY = {"temperature": 0}
SYSTEM = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer briefly."}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# What the scripted worker says (anthropic_sdk_test.cc's ScriptedOutputs).
CALL_THINKING = "The user wants the weather; I will call the tool."
ANSWER_THINKING = "The tool answered."
ANSWER_TEXT = "It is sunny in Paris, 22 C."
# The scripted worker sends 5-byte pieces, one token each; the pieces wholly before the output's
# "</think>" (the prompt opened the block) are its reasoning tokens.
PIECE_BYTES = 5


def thinking_tokens_of(reasoning):
    """The reasoning tokens of a scripted output whose text before "</think>" is `reasoning`."""
    return len(reasoning.encode()) // PIECE_BYTES


# What Claude Code sends on every turn (2.1.x, adaptive-thinking models): system blocks with
# cache_control, tools, metadata.user_id, thinking adaptive, output_config.effort,
# context_management keeping all thinking, stream.
CLAUDE_CODE = dict(
    system=[{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    tools=[WEATHER_TOOL],
    metadata={"user_id": "user_0784b260_account_261d5434_session_b4e5aaaa"},
    output_config={"effort": "medium"},
    extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015",
                                                    "keep": "all"}]}},
)


class Checks:
    def __init__(self, args):
        self.model = args.model
        common = dict(base_url=args.base_url, max_retries=0, timeout=60.0)
        self.client = Anthropic(api_key=args.api_key, **common)  # x-api-key
        self.bearer_client = Anthropic(auth_token=args.api_key, **common)  # Authorization
        self.wrong_key_client = Anthropic(api_key="sk-wrong-key", **common)
        self.limited_client = Anthropic(api_key=args.limited_key, **common)
        self.scripted = Anthropic(api_key="unused", base_url=args.scripted_base_url,
                                  max_retries=0, timeout=60.0)
        self._greedy = None

    def greedy(self):
        """The greedy 12-token answer to PROMPT with SYSTEM, shared by several checks."""
        if self._greedy is None:
            self._greedy = self.client.messages.create(
                model=self.model, system=SYSTEM, messages=PROMPT, max_tokens=12, extra_body=GREEDY)
        return self._greedy

    @staticmethod
    def text_of(message):
        return "".join(b.text for b in message.content if b.type == "text")

    # --- plain messages -----------------------------------------------------------------------
    def check_message(self):
        m = self.greedy()
        assert m.type == "message" and m.role == "assistant", m
        assert m.id.startswith("msg_"), m.id
        assert m.model == self.model, m.model
        assert [b.type for b in m.content] == ["text"], m.content
        assert m.content[0].text, m
        assert m.stop_reason in ("max_tokens", "end_turn"), m.stop_reason
        assert m.stop_sequence is None, m
        u = m.usage
        assert 1 <= u.output_tokens <= 12, u
        if m.stop_reason == "max_tokens":
            assert u.output_tokens == 12, u
        assert u.input_tokens + (u.cache_read_input_tokens or 0) > 5, u
        assert u.cache_creation_input_tokens == 0, u

    def check_message_through_alias_and_bearer(self):
        ref = self.greedy()
        m = self.bearer_client.messages.create(
            model="claude-test", system=SYSTEM, messages=PROMPT, max_tokens=12, extra_body=GREEDY)
        assert self.text_of(m) == self.text_of(ref), (m, ref)
        assert m.model == self.model, m.model  # the model that answered

    def check_streaming_helpers_assemble_the_same_text(self):
        ref = self.greedy()
        with self.client.messages.stream(model=self.model, system=SYSTEM, messages=PROMPT,
                                         max_tokens=12, extra_body=GREEDY) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text == self.text_of(ref), (text, ref)
        assert self.text_of(final) == text, final
        assert final.id.startswith("msg_"), final.id
        assert final.stop_reason == ref.stop_reason, (final, ref)
        assert final.usage.output_tokens == ref.usage.output_tokens, (final.usage, ref.usage)
        assert (final.usage.input_tokens + final.usage.cache_read_input_tokens ==
                ref.usage.input_tokens + ref.usage.cache_read_input_tokens), (final.usage, ref.usage)

    def check_stream_event_order(self):
        events = list(self.client.messages.create(
            model=self.model, messages=PROMPT, max_tokens=6, extra_body=GREEDY, stream=True))
        types = [e.type for e in events]
        assert types[0] == "message_start", types
        assert types[-2:] == ["message_delta", "message_stop"], types
        body = types[1:-2]
        assert body[0] == "content_block_start" and body[-1] == "content_block_stop", types
        assert set(body[1:-1]) == {"content_block_delta"}, types
        assert events[0].message.usage.input_tokens > 0, events[0]
        assert events[-2].delta.stop_reason in ("max_tokens", "end_turn"), events[-2]

    def check_stop_sequence(self):
        ref = self.text_of(self.greedy())
        # A stop string from the middle of the greedy answer: the output ends just before its
        # first occurrence (the worker matches it in the generated text).
        stop = ref[3:5]
        if len(stop) < 2 or not stop.strip():
            raise AssertionError(f"greedy answer too short for the check: {ref!r}")
        m = self.client.messages.create(model=self.model, system=SYSTEM, messages=PROMPT,
                                        max_tokens=12, extra_body=GREEDY, stop_sequences=[stop])
        assert m.stop_reason == "stop_sequence", m
        assert m.stop_sequence == stop, m
        assert self.text_of(m) == ref[:ref.find(stop)], (m, ref, stop)

    def check_count_tokens_equals_the_prompt_a_message_reports(self):
        ref = self.greedy()
        counted = self.client.messages.count_tokens(model=self.model, system=SYSTEM,
                                                    messages=PROMPT)
        u = ref.usage
        assert counted.input_tokens == u.input_tokens + u.cache_read_input_tokens, (counted, u)
        other = self.client.messages.count_tokens(
            model=self.model, messages=[{"role": "user", "content": "Hello there, again"}])
        assert other.input_tokens > 0 and other.input_tokens != counted.input_tokens, other

    # --- errors -------------------------------------------------------------------------------
    @staticmethod
    def expect_error(exc_type, status, error_type, call):
        try:
            call()
        except exc_type as e:
            assert e.status_code == status, (e.status_code, e)
            assert e.body["type"] == "error", e.body
            assert e.body["error"]["type"] == error_type, e.body
            assert e.body["error"]["message"], e.body
            return
        raise AssertionError(f"expected {exc_type.__name__}")

    def check_errors(self):
        self.expect_error(anthropic.BadRequestError, 400, "invalid_request_error",
                          lambda: self.client.messages.create(
                              model=self.model, messages=PROMPT, max_tokens=0))
        self.expect_error(anthropic.BadRequestError, 400, "invalid_request_error",
                          lambda: self.client.messages.create(
                              model=self.model, messages=[{"role": "robot", "content": "x"}],
                              max_tokens=2))
        self.expect_error(anthropic.NotFoundError, 404, "not_found_error",
                          lambda: self.client.messages.create(
                              model="no-such-model", messages=PROMPT, max_tokens=2))
        self.expect_error(anthropic.NotFoundError, 404, "not_found_error",
                          lambda: self.client.messages.count_tokens(
                              model="no-such-model", messages=PROMPT))
        self.expect_error(anthropic.AuthenticationError, 401, "authentication_error",
                          lambda: self.wrong_key_client.messages.create(
                              model=self.model, messages=PROMPT, max_tokens=2))
        self.expect_error(anthropic.AuthenticationError, 401, "authentication_error",
                          lambda: self.wrong_key_client.messages.count_tokens(
                              model=self.model, messages=PROMPT))
        self.expect_error(anthropic.PermissionDeniedError, 403, "permission_error",
                          lambda: self.limited_client.messages.create(
                              model=self.model, messages=PROMPT, max_tokens=2, stream=True))

    def check_claude_code_fields_are_honoured_or_400(self):
        # The request shape Claude Code sends is served; what it could send beyond that, and
        # DeltaServe cannot do, is a 400 in Anthropic's shape naming the field.
        m = self.client.messages.create(model=self.model, messages=PROMPT, max_tokens=4,
                                        thinking={"type": "adaptive", "display": "omitted"},
                                        **CLAUDE_CODE)
        assert m.usage.output_tokens_details is not None, m.usage
        assert 0 <= m.usage.output_tokens_details.thinking_tokens <= m.usage.output_tokens, m.usage
        for field, kwargs in (
                ("output_config.effort", dict(output_config={"effort": "xhigh"})),
                ("thinking.display", dict(thinking={"type": "adaptive", "display": "verbose"})),
                ("context_management", dict(extra_body={"context_management": {"edits": [
                    {"type": "clear_tool_uses_20250919"}]}})),
                ("speed", dict(extra_body={"speed": "fast"})),
                ("container", dict(extra_body={"container": "container_1"}))):
            try:
                self.client.messages.create(model=self.model, messages=PROMPT, max_tokens=4,
                                            **kwargs)
            except anthropic.BadRequestError as e:
                assert e.body["error"]["type"] == "invalid_request_error", e.body
                assert field in e.body["error"]["message"], (field, e.body)
                continue
            raise AssertionError(f"{field}: accepted {kwargs}")

    # --- the scripted worker: tool use and thinking, in this order ------------------------------
    def check_scripted_1_tool_use_round_trip(self):
        first = self.scripted.messages.create(
            model="m", messages=WEATHER_QUESTION, tools=[WEATHER_TOOL], max_tokens=200,
            thinking={"type": "enabled", "budget_tokens": 100})
        assert first.stop_reason == "tool_use", first
        assert [b.type for b in first.content] == ["thinking", "tool_use"], first.content
        assert first.content[0].thinking.strip() == CALL_THINKING, first.content[0]
        call = first.content[1]
        assert call.name == "get_weather" and call.input == {"city": "Paris", "unit": "C"}, call
        assert call.id, call
        second = self.scripted.messages.create(
            model="m", tools=[WEATHER_TOOL], max_tokens=200,
            messages=WEATHER_QUESTION + [
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                              "content": "sunny, 22 C"}]}])
        assert second.stop_reason == "end_turn", second
        assert [b.type for b in second.content] == ["thinking", "text"], second.content
        assert second.content[0].thinking.strip() == ANSWER_THINKING, second.content[0]
        assert self.text_of(second) == ANSWER_TEXT, second

    def check_scripted_2_tool_use_round_trip_streamed(self):
        with self.scripted.messages.stream(
                model="m", messages=WEATHER_QUESTION, tools=[WEATHER_TOOL], max_tokens=200,
                tool_choice={"type": "auto"}) as stream:
            deltas = [e for e in stream if e.type == "content_block_delta"]
            first = stream.get_final_message()
        assert any(d.delta.type == "input_json_delta" for d in deltas), deltas
        assert any(d.delta.type == "thinking_delta" for d in deltas), deltas
        assert first.stop_reason == "tool_use", first
        assert [b.type for b in first.content] == ["thinking", "tool_use"], first.content
        call = first.content[1]
        assert call.name == "get_weather" and call.input == {"city": "Paris", "unit": "C"}, call
        with self.scripted.messages.stream(
                model="m", tools=[WEATHER_TOOL], max_tokens=200,
                messages=WEATHER_QUESTION + [
                    {"role": "assistant", "content": first.content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                  "content": [{"type": "text",
                                                               "text": "sunny, 22 C"}]}]}],
        ) as stream:
            text = "".join(stream.text_stream)
            second = stream.get_final_message()
        assert text == ANSWER_TEXT, text
        assert second.stop_reason == "end_turn", second
        assert second.content[0].type == "thinking", second.content
        assert second.content[0].thinking.strip() == ANSWER_THINKING, second.content[0]

    def check_scripted_3_thinking_blocks_streamed(self):
        events = list(self.scripted.messages.create(
            model="m", messages=PROMPT, max_tokens=200, stream=True,
            thinking={"type": "enabled", "budget_tokens": 50}))
        starts = [e.content_block.type for e in events if e.type == "content_block_start"]
        assert starts == ["thinking", "text"], starts
        thinking = "".join(e.delta.thinking for e in events
                           if e.type == "content_block_delta" and e.delta.type == "thinking_delta")
        assert thinking.strip() == ANSWER_THINKING, thinking
        # Anthropic sends the thinking tokens on the last message_delta only.
        deltas = [e for e in events if e.type == "message_delta"]
        assert deltas[-1].usage.output_tokens_details.thinking_tokens == \
            thinking_tokens_of(ANSWER_THINKING + "\n"), deltas[-1].usage
        start = [e for e in events if e.type == "message_start"][0]
        assert start.message.usage.output_tokens_details is None, start.message.usage

    def check_scripted_4_claude_code_request_with_omitted_thinking(self):
        # Claude Code's shape with thinking.display "omitted": the thinking block is there with
        # no text, and no thinking_delta is streamed; the reasoning is in its signature.
        with self.scripted.messages.stream(
                model="m", messages=PROMPT, max_tokens=200,
                thinking={"type": "adaptive", "display": "omitted"}, **CLAUDE_CODE) as stream:
            events = list(stream)
            final = stream.get_final_message()
        kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
        assert "thinking_delta" not in kinds and "signature_delta" in kinds, kinds
        assert [b.type for b in final.content] == ["thinking", "text"], final.content
        assert final.content[0].thinking == "" and final.content[0].signature, final.content[0]
        assert self.text_of(final) == ANSWER_TEXT, final
        assert final.usage.output_tokens_details.thinking_tokens == \
            thinking_tokens_of(ANSWER_THINKING + "\n"), final.usage

    def check_scripted_5_omitted_thinking_comes_back_with_its_signature(self):
        # The same answer with its thinking shown and omitted; sent back inside a tool loop (where
        # the template renders the assistant's reasoning), the omitted block counts exactly as
        # the shown one, and a block without our signature counts less.
        shown = self.scripted.messages.create(model="m", messages=PROMPT, max_tokens=200,
                                              thinking={"type": "adaptive"})
        omitted = self.scripted.messages.create(
            model="m", messages=PROMPT, max_tokens=200,
            thinking={"type": "adaptive", "display": "omitted"})
        assert omitted.usage.output_tokens_details.thinking_tokens == \
            shown.usage.output_tokens_details.thinking_tokens > 0, (omitted.usage, shown.usage)
        assert shown.content[0].thinking and omitted.content[0].thinking == "", omitted.content

        def count(thinking_block):
            return self.scripted.messages.count_tokens(model="m", tools=[WEATHER_TOOL], messages=[
                WEATHER_QUESTION[0],
                {"role": "assistant", "content": [
                    thinking_block,
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": "sunny"}]}]).input_tokens

        with_signature = count({"type": "thinking", "thinking": "",
                                "signature": omitted.content[0].signature})
        with_text = count({"type": "thinking", "thinking": shown.content[0].thinking,
                           "signature": ""})
        without = count({"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgC"})
        assert with_signature == with_text > without, (with_signature, with_text, without)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--limited-key", required=True)
    parser.add_argument("--scripted-base-url", required=True)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--only", default="", help="run the checks whose name contains this")
    args = parser.parse_args()
    # The wrapper waits for this process without its own timeout: bound the whole run.
    signal.alarm(600)

    print(f"anthropic {anthropic.__version__}, Python {sys.version.split()[0]}, {args.base_url}")
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
