"""One streamed request to an OpenAI- or Anthropic-compatible endpoint, timed chunk by chunk.

Every workload sends its requests through `Endpoint.send`, which never raises for what a server
does: a refusal, an overload, a dropped connection or a broken stream comes back as a `Result`
with `ok` false and an `error_kind`, so a benchmark counts it instead of crashing. The token
counts are the server's own (`usage`); the client only counts the chunks it received.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import httpx

# error_kind values, in the order the summaries list them.
ERROR_KINDS = ("refused", "rate_limited", "overloaded", "bad_request", "auth", "not_found",
               "server_error", "connect", "timeout", "stream_error", "empty")


@dataclasses.dataclass
class Result:
    """What one request did. Times are seconds; t_start / t_end are on the run's clock."""
    ok: bool = False
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    t_start: float = 0.0
    t_end: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = dataclasses.field(default_factory=list)
    chunks: int = 0  # chunks that carried generated text, reasoning or tool-call pieces
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    tool_calls: list[dict] = dataclasses.field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """The derived rates: decode tok/s after the first token, prefill tok/s of the uncached
        prompt over TTFT."""
        out: dict[str, Any] = {"decode_tok_s": None, "prefill_tok_s": None}
        if self.ok and self.completion_tokens and self.completion_tokens > 1 and self.itl_s:
            span = sum(self.itl_s)
            if span > 0:
                out["decode_tok_s"] = (self.completion_tokens - 1) / span
        if self.ok and self.prompt_tokens and self.ttft_s:
            computed = self.prompt_tokens - (self.cached_tokens or 0)
            out["prefill_tok_s"] = computed / self.ttft_s if computed > 0 else None
        return out


def classify_http_error(status: int, message: str) -> str:
    """Maps an HTTP error to an error_kind: a prompt longer than the context is 'refused'."""
    low = message.lower()
    if status in (400, 413, 422) and any(w in low for w in (
            "context", "too long", "exceed", "maximum", "max_tokens", "too many tokens")):
        return "refused"
    if status == 429:
        return "rate_limited"
    if status in (502, 503, 504):
        return "overloaded"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if 400 <= status < 500:
        return "bad_request"
    return "server_error"


def _error_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:500]
    err = doc.get("error", doc) if isinstance(doc, dict) else doc
    if isinstance(err, dict):
        parts = [str(err.get(k)) for k in ("message", "code", "type", "param") if err.get(k)]
        return "; ".join(parts) or json.dumps(doc)[:500]
    if isinstance(err, str):
        return err
    return json.dumps(doc)[:500]


class Endpoint:
    """An HTTP client for one server: base URL (with or without /v1), model, key, API shape."""

    def __init__(self, url: str, model: str, api: str = "openai", api_key: str | None = None,
                 timeout_s: float = 600.0, max_connections: int = 256,
                 extra_body: dict | None = None, clock_zero: float | None = None):
        base = url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.base = base
        self.model = model
        self.api = api
        self.extra_body = extra_body or {}
        self.clock_zero = time.monotonic() if clock_zero is None else clock_zero
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
            headers["x-api-key"] = api_key
        if api == "anthropic":
            headers["anthropic-version"] = "2023-06-01"
        self.client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))

    async def close(self) -> None:
        await self.client.aclose()

    def now(self) -> float:
        return time.monotonic() - self.clock_zero

    def _body(self, messages: list[dict], max_tokens: int, temperature: float,
              tools: list[dict] | None, response_format: dict | None, seed: int | None) -> dict:
        if self.api == "anthropic":
            system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
            body: dict[str, Any] = {
                "model": self.model, "max_tokens": max_tokens, "stream": True,
                "temperature": temperature,
                "messages": [_to_anthropic(m) for m in messages if m["role"] != "system"],
            }
            if system:
                body["system"] = system
            if tools:
                body["tools"] = [{"name": t["function"]["name"],
                                  "description": t["function"].get("description", ""),
                                  "input_schema": t["function"]["parameters"]} for t in tools]
            if response_format and response_format.get("type") == "json_schema":
                body["output_config"] = {"format": {
                    "type": "json_schema", "schema": response_format["json_schema"]["schema"]}}
        else:
            body = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                    "temperature": temperature, "stream": True,
                    "stream_options": {"include_usage": True}}
            if tools:
                body["tools"] = tools
            if response_format:
                body["response_format"] = response_format
        if seed is not None:
            body["seed"] = seed
        body.update(self.extra_body)
        return body

    async def send(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
                   tools: list[dict] | None = None, response_format: dict | None = None,
                   seed: int | None = None) -> Result:
        path = "/v1/messages" if self.api == "anthropic" else "/v1/chat/completions"
        body = self._body(messages, max_tokens, temperature, tools, response_format, seed)
        res = Result(t_start=self.now())
        started = time.monotonic()
        last = None
        try:
            async with self.client.stream("POST", self.base + path, json=body) as resp:
                res.status = resp.status_code
                if resp.status_code != 200:
                    msg = _error_message(await resp.aread())
                    res.error_kind = classify_http_error(resp.status_code, msg)
                    res.error = f"HTTP {resp.status_code}: {msg}"
                    return res
                parse = self._anthropic_event if self.api == "anthropic" else self._openai_event
                done = False
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        event = json.loads(data)
                    except ValueError:
                        res.error_kind, res.error = "stream_error", f"bad SSE data: {data[:200]}"
                        return res
                    kind = parse(event, res)
                    if kind == "error":
                        return res
                    if kind == "token":
                        t = time.monotonic()
                        if last is None:
                            res.ttft_s = t - started
                        else:
                            res.itl_s.append(t - last)
                        last = t
                        res.chunks += 1
                    elif kind == "stop":
                        done = True
                if not done and (self.api == "anthropic" or res.finish_reason is None):
                    end = "message_stop" if self.api == "anthropic" else "[DONE]"
                    res.error_kind, res.error = "stream_error", f"stream ended before {end}"
                    return res
        except httpx.ConnectError as e:
            res.error_kind, res.error = "connect", f"connect: {e}"
            return res
        except httpx.TimeoutException as e:
            res.error_kind, res.error = "timeout", f"timeout: {type(e).__name__}"
            return res
        except (httpx.HTTPError, OSError) as e:
            res.error_kind, res.error = "stream_error", f"{type(e).__name__}: {e}"
            return res
        finally:
            res.t_end = self.now()
            res.e2e_s = time.monotonic() - started
        if res.chunks == 0 and not res.completion_tokens:
            res.error_kind, res.error = "empty", "no token arrived"
            return res
        res.ok = True
        return res

    async def usage_whole(self, messages: list[dict], max_tokens: int) -> tuple[int, int] | None:
        """(prompt_tokens, completion_tokens) of a non-streamed request, for servers that put
        no usage in their streams; None when the server reports none there either."""
        body = self._body(messages, max_tokens, 0.0, None, None, None)
        body["stream"] = False
        body.pop("stream_options", None)
        path = "/v1/messages" if self.api == "anthropic" else "/v1/chat/completions"
        try:
            resp = await self.client.post(self.base + path, json=body)
            usage = resp.json().get("usage") or {}
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if prompt is None or completion is None:
            return None
        return prompt, completion

    @staticmethod
    def _openai_event(event: dict, res: Result) -> str:
        if "error" in event and event["error"]:
            err = event["error"]
            msg = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
            res.error_kind, res.error = "stream_error", f"error event: {msg}"
            return "error"
        usage = event.get("usage")
        if usage:
            res.prompt_tokens = usage.get("prompt_tokens")
            res.completion_tokens = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                res.cached_tokens = details["cached_tokens"]
        kind = "none"
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            calls = delta.get("tool_calls") or []
            if piece or reasoning or calls:
                kind = "token"
            res.text += piece
            for call in calls:
                _merge_tool_call(res.tool_calls, call)
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        return kind

    @staticmethod
    def _anthropic_event(event: dict, res: Result) -> str:
        etype = event.get("type")
        if etype == "error":
            err = event.get("error") or {}
            res.error_kind = "overloaded" if err.get("type") == "overloaded_error" else "stream_error"
            res.error = f"error event: {err.get('message', json.dumps(err))}"
            return "error"
        if etype == "message_start":
            usage = (event.get("message") or {}).get("usage") or {}
            res.prompt_tokens = usage.get("input_tokens")
            if usage.get("cache_read_input_tokens") is not None:
                res.cached_tokens = usage["cache_read_input_tokens"]
                res.prompt_tokens = (res.prompt_tokens or 0) + res.cached_tokens
            return "none"
        if etype == "content_block_delta":
            delta = event.get("delta") or {}
            piece = delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
            if delta.get("type") == "text_delta":
                res.text += piece
            return "token" if piece else "none"
        if etype == "message_delta":
            usage = event.get("usage") or {}
            if usage.get("output_tokens") is not None:
                res.completion_tokens = usage["output_tokens"]
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason:
                res.finish_reason = reason
            return "none"
        if etype == "message_stop":
            return "stop"
        return "none"


def _merge_tool_call(calls: list[dict], piece: dict) -> None:
    index = piece.get("index", len(calls))
    while len(calls) <= index:
        calls.append({"name": "", "arguments": ""})
    fn = piece.get("function") or {}
    calls[index]["name"] += fn.get("name") or ""
    calls[index]["arguments"] += fn.get("arguments") or ""


def _to_anthropic(m: dict) -> dict:
    """An OpenAI chat message as an Anthropic one (tool calls and results as blocks)."""
    if m["role"] == "tool":
        return {"role": "user", "content": [{"type": "tool_result",
                                             "tool_use_id": m["tool_call_id"],
                                             "content": m["content"]}]}
    if m["role"] == "assistant" and m.get("tool_calls"):
        blocks: list[dict] = []
        if m.get("content"):
            blocks.append({"type": "text", "text": m["content"]})
        for call in m["tool_calls"]:
            blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                           "input": json.loads(call["function"]["arguments"])})
        return {"role": "assistant", "content": blocks}
    return {"role": m["role"], "content": m["content"] or ""}
