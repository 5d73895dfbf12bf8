#!/usr/bin/env python3
"""An Anthropic-shaped upstream for router_upstream_test (a test double, stdlib only).

A real HTTP/1.1 server on 127.0.0.1 (kernel-chosen port, printed as "listening on PORT") that
answers POST /v1/messages the way Anthropic's Messages API does, streamed (SSE events) or whole,
and records every request it received: GET /recorded returns them as a JSON list of
{"path", "headers", "body", "time"}; DELETE /recorded forgets them.

What it answers is chosen by the request's "model", so one server plays every upstream of a test:
  claude        an answer: a tool_use block when tools were given and the last user turn holds
                no tool_result, else the text "Hello from the Anthropic upstream." (plus a thinking
                block when thinking was asked for); usage input 11 (+3 cache read), output 7
  fault-500     HTTP 500 with Anthropic's error body
  fault-429     HTTP 429, Retry-After: 30
  flaky-429     the first request with a given X-Request-Id gets 429 with Retry-After: 1, the
                next one the answer of "claude"
  stall         headers and message_start, then nothing (the connection is held open)
  stall-mid     a first text delta, then nothing
With --tls-cert and --tls-key it serves HTTPS instead (for the router's certificate checks).
Every request must carry x-api-key equal to --key; otherwise 401 whose message quotes the key
it was given (as some APIs do), so the test can check that the router never passes it on.
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORDED = []
LOCK = threading.Lock()
SEEN_IDS = set()
EXPECTED_KEY = ""
STALL_SECONDS = 60


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def answer_blocks(body):
    msgs = body.get("messages", [])
    last = msgs[-1] if msgs else {}
    content = last.get("content")
    has_result = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    blocks = []
    if body.get("thinking", {}).get("type") == "enabled":
        blocks.append({"type": "thinking", "thinking": "Thinking upstream.", "signature": "sig"})
    if body.get("tools") and not has_result:
        tool = body["tools"][0]
        blocks.append({"type": "tool_use", "id": "toolu_01", "name": tool["name"],
                       "input": {"city": "Paris"}})
    else:
        blocks.append({"type": "text", "text": "Hello from the Anthropic upstream."})
    return blocks


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send_json(self, status, obj, headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/recorded":
            with LOCK:
                self.send_json(200, RECORDED)
        else:
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                            "message": "no such path"}})

    def do_DELETE(self):
        with LOCK:
            RECORDED.clear()
        self.send_json(200, {})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsable": raw.decode("utf-8", "replace")}
        with LOCK:
            RECORDED.append({"path": self.path, "headers": {k.lower(): v for k, v in
                                                            self.headers.items()},
                             "body": body, "time": time.time()})
        if self.path != "/v1/messages":
            return self.send_json(404, {"type": "error", "error": {
                "type": "not_found_error", "message": "no such path " + self.path}})
        key = self.headers.get("x-api-key", "")
        if key != EXPECTED_KEY:
            return self.send_json(401, {"type": "error", "error": {
                "type": "authentication_error", "message": "invalid x-api-key: " + key}})
        if self.headers.get("anthropic-version") is None:
            return self.send_json(400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "anthropic-version missing"}})
        model = body.get("model")
        if model == "fault-500":
            return self.send_json(500, {"type": "error", "error": {
                "type": "api_error", "message": "upstream exploded"}})
        if model == "fault-429":
            return self.send_json(429, {"type": "error", "error": {
                "type": "rate_limit_error", "message": "slow down"}}, [("Retry-After", "30")])
        if model == "flaky-429":
            rid = self.headers.get("x-request-id", "")
            with LOCK:
                first = rid not in SEEN_IDS
                SEEN_IDS.add(rid)
            if first:
                return self.send_json(429, {"type": "error", "error": {
                    "type": "rate_limit_error", "message": "once"}}, [("Retry-After", "1")])
        blocks = answer_blocks(body)
        stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
        usage = {"input_tokens": 11, "cache_read_input_tokens": 3,
                 "cache_creation_input_tokens": 0, "output_tokens": 7}
        # "whole": answered in one piece even when asked to stream (a server that ignores
        # "stream": true), with Content-Length on a kept-alive connection.
        if not body.get("stream") or model == "whole":
            return self.send_json(200, {"id": "msg_up", "type": "message", "role": "assistant",
                                        "model": model, "content": blocks, "stop_reason": stop,
                                        "stop_sequence": None, "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        w = self.wfile
        start_usage = dict(usage, output_tokens=1)
        w.write(sse("message_start", {"type": "message_start", "message": {
            "id": "msg_up", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}}))
        w.flush()
        if model == "stall":
            time.sleep(STALL_SECONDS)
            return
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                w.write(sse("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {"type": "text",
                                                                       "text": ""}}))
                words = b["text"].split(" ")
                for j, word in enumerate(words):
                    piece = word if j == 0 else " " + word
                    w.write(sse("content_block_delta", {"type": "content_block_delta",
                                                        "index": i, "delta": {
                                                            "type": "text_delta",
                                                            "text": piece}}))
                    w.flush()
                    if model == "stall-mid":
                        time.sleep(STALL_SECONDS)
                        return
            elif b["type"] == "thinking":
                w.write(sse("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {"type": "thinking",
                                                                       "thinking": ""}}))
                w.write(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "thinking_delta",
                                                              "thinking": b["thinking"]}}))
                w.write(sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "signature_delta",
                                                              "signature": "sig"}}))
            else:
                w.write(sse("content_block_start", {"type": "content_block_start", "index": i,
                                                     "content_block": {
                                                         "type": "tool_use", "id": b["id"],
                                                         "name": b["name"], "input": {}}}))
                args = json.dumps(b["input"])
                half = len(args) // 2
                for part in (args[:half], args[half:]):
                    w.write(sse("content_block_delta", {"type": "content_block_delta",
                                                        "index": i, "delta": {
                                                            "type": "input_json_delta",
                                                            "partial_json": part}}))
            w.write(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
            w.write(b": a comment line\n\n")
            w.write(sse("ping", {"type": "ping"}))
            w.flush()
        w.write(sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 7}}))
        w.write(sse("message_stop", {"type": "message_stop"}))
        w.flush()


def main():
    global EXPECTED_KEY, STALL_SECONDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--stall-seconds", type=float, default=60)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    args = ap.parse_args()
    EXPECTED_KEY = args.key
    STALL_SECONDS = args.stall_seconds
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if args.tls_cert:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
