#!/usr/bin/env python3
"""An agent-style conversation against OpenAI-compatible servers, one turn at a time, timing each
turn's time to first token (TTFT). Used by bench/snapshot_bench.sh; standard library only.

A system prompt of about --system-tokens tokens (a coding agent's instructions and tool list),
then --turns user turns of about --user-tokens tokens each (task notes, file listings, log lines),
all deterministic text drawn from --seed. Each request is a streamed chat completion
(`stream: true`, `stream_options: {include_usage: true}`, temperature 0, --max-tokens) carrying
the whole history; the reply is appended to the history verbatim as the assistant message. With
several --url, turn i goes to url[i % n] (e.g. two routers, one per worker).

One JSON line per turn on stdout (--out appends them to a file as well):
  {"scenario", "turn", "url_index", "prompt_tokens", "completion_tokens", "cached_tokens",
   "ttft_s", "first_chunk_s", "total_s", "reply", "finish_reason", "history_chars"}
ttft_s: from sending the request to the first chunk with non-empty delta content (the first
token the client can show); first_chunk_s: to the first chunk of any kind after the role-only
one (a reply of control tokens has no content). cached_tokens is
usage.prompt_tokens_details.cached_tokens, null when the server does not report it.

  python3 bench/agent_conversation.py --url http://127.0.0.1:8080 --scenario cold --turns 10
"""

import argparse
import http.client
import json
import random
import resource
import sys
import time
import urllib.parse

# Words of an agent's working notes: mostly whole tokens in the Qwen vocabulary.
WORDS = (
    "the a an of to in for on with from by at as is are was be this that it we you they "
    "file function test module class method return value error warning line call build "
    "parser token cache request response worker router model snapshot state layer batch "
    "check update write read open close start stop run fix add remove rename move copy "
    "config option flag path directory output input buffer stream thread lock queue "
    "index offset length size count number string list map set key table row column "
    "first next last previous new old same other every each all some none only also "
    "because when after before while until then so but and or not if else "
    "failing passing expected actual result report summary change diff patch commit "
    "branch merge review comment issue bug crash timeout memory disk network server "
    "client user agent tool shell command exit status code message log trace debug"
).split()
EXTENSIONS = ("py", "cc", "h", "md", "json", "yaml", "sh", "txt")
TOOLS = ("read_file", "write_file", "run_shell", "search_code", "list_directory", "apply_patch",
         "run_tests", "git_diff", "git_log", "open_url", "ask_user", "edit_lines")


def sentence(rng, n_words):
    words = [rng.choice(WORDS) for _ in range(n_words)]
    words[0] = words[0].capitalize()
    return " ".join(words) + "."


def identifier(rng):
    return "_".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))


def path(rng):
    parts = [identifier(rng) for _ in range(rng.randint(1, 3))]
    return "/".join(parts) + "." + rng.choice(EXTENSIONS)


# Tokens per word of this text with the Qwen3 vocabulary (numbers are one token per digit,
# identifiers split at underscores), measured on seed 1; the exact counts come back in
# usage.prompt_tokens.
TOKENS_PER_WORD = {"system": 1.67, "user": 1.5}


def text_of_tokens(rng, tokens, kind):
    """About `tokens` tokens of agent-like text: prose, file listings, log lines."""
    target_words = max(8, int(tokens / TOKENS_PER_WORD[kind]))
    out, words = [], 0
    while words < target_words:
        pick = rng.random()
        if kind == "system" and pick < 0.35:
            name = rng.choice(TOOLS)
            line = (f"- {name}({identifier(rng)}: string, {identifier(rng)}: integer): "
                    + sentence(rng, rng.randint(6, 14)))
        elif pick < 0.55:
            line = sentence(rng, rng.randint(8, 20))
        elif pick < 0.75:
            line = f"{path(rng)}:{rng.randint(1, 999)}: " + sentence(rng, rng.randint(4, 10))
        elif pick < 0.9:
            line = (f"[{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}] "
                    f"{rng.choice(('INFO', 'WARN', 'ERROR', 'DEBUG'))} {identifier(rng)}: "
                    + sentence(rng, rng.randint(4, 12)))
        else:
            line = f"$ {rng.choice(('make', 'pytest', 'git', 'ls', 'grep', 'cat'))} {path(rng)}"
        out.append(line)
        words += len(line.split())
    return "\n".join(out)


def conversation(seed, system_tokens, user_tokens, turns):
    """The system prompt and the user turns, the same for every server and scenario."""
    rng = random.Random(seed)
    system = ("You are a coding agent working in a large repository. Use the tools below, one "
              "call at a time, and answer briefly.\n\n# Tools\n"
              + text_of_tokens(rng, system_tokens, "system"))
    users = []
    for t in range(turns):
        users.append(f"Turn {t + 1}. Here is the output of the last step; decide the next "
                     f"one.\n" + text_of_tokens(random.Random(seed * 1000 + t + 1), user_tokens,
                                                "user"))
    return system, users


class Server:
    """One keep-alive HTTP connection to an OpenAI-compatible server."""

    def __init__(self, url, timeout):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.timeout = timeout
        self.conn = None

    def post_stream(self, path, body):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        data = json.dumps(body).encode()
        try:
            self.conn.request("POST", self.prefix + path, body=data,
                              headers={"Content-Type": "application/json",
                                       "Accept": "text/event-stream"})
            resp = self.conn.getresponse()
        except (http.client.HTTPException, OSError):
            # A server that closed the idle connection: one retry on a new one.
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self.conn.request("POST", self.prefix + path, body=data,
                              headers={"Content-Type": "application/json",
                                       "Accept": "text/event-stream"})
            resp = self.conn.getresponse()
        return resp


def chatml(messages):
    """The prompt llama-cpp-python's `chatml` chat format renders (an empty message gets no
    end-of-turn, as there)."""
    out = ""
    for m in messages:
        out += f"<|im_start|>{m['role']}\n"
        if m["content"]:
            out += m["content"] + "<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def count_tokens(server, model, text):
    """Tokens of `text` by llama-cpp-python's server (/extras/tokenize/count, special tokens
    parsed); None where the server has no such endpoint."""
    try:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=server.timeout)
        conn.request("POST", server.prefix + "/extras/tokenize/count",
                     body=json.dumps({"input": text, "model": model}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return json.loads(body)["count"] if resp.status == 200 else None
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return None


def chat_turn(server, model, messages, max_tokens):
    """One streamed chat completion; returns the timings, the reply and the usage."""
    body = {"model": model, "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "temperature": 0}
    t0 = time.perf_counter()
    resp = server.post_stream("/v1/chat/completions", body)
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
    ttft = first_chunk = None
    reply, usage, finish = [], None, None
    content_chunks = 0
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        event = json.loads(payload)
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            now = time.perf_counter() - t0
            if first_chunk is None and (content is not None or choice.get("finish_reason")
                                        or delta.get("reasoning_content")):
                first_chunk = now
            if content:
                if ttft is None:
                    ttft = now
                reply.append(content)
                content_chunks += 1
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    resp.read()  # drain, so the keep-alive connection can be reused
    total = time.perf_counter() - t0
    return {"ttft_s": ttft if ttft is not None else first_chunk, "first_chunk_s": first_chunk,
            "total_s": total, "reply": "".join(reply), "usage": usage, "finish_reason": finish,
            "content_chunks": content_chunks}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", action="append", required=True,
                   help="server base URL; repeat to alternate turns between servers")
    p.add_argument("--model", default="bench")
    p.add_argument("--scenario", default="run")
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--system-tokens", type=int, default=4500)
    p.add_argument("--user-tokens", type=int, default=300)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--warmup", action="store_true",
                   help="first send each server a short unrelated request (page in the weights, "
                        "start the threads); not timed, shares no prefix with the conversation")
    p.add_argument("--think-time", type=float, default=0,
                   help="seconds between a reply and the next turn (the agent's tool running)")
    p.add_argument("--out", help="also append the JSON lines to this file")
    p.add_argument("--cpu-out", help="write this process's CPU seconds to this file at the end")
    args = p.parse_args()

    servers = [Server(u, args.timeout) for u in args.url]
    if args.warmup:
        for s in servers:
            chat_turn(s, args.model, [{"role": "user", "content": "Warm-up: say hello."}], 2)
    system, users = conversation(args.seed, args.system_tokens, args.user_tokens, args.turns)
    messages = [{"role": "system", "content": system}]
    out = open(args.out, "a") if args.out else None
    for t, user in enumerate(users):
        messages.append({"role": "user", "content": user})
        i = t % len(servers)
        errors = []
        while True:
            try:
                r = chat_turn(servers[i], args.model, messages, args.max_tokens)
                break
            except RuntimeError as e:
                # A refused request changes nothing on the server; one retry, and the error
                # stays in the row (seen once: the router read a keep-alive request's JSON body
                # cut short, "invalid_json ... unexpected end of input").
                errors.append(str(e)[:300])
                print(f"   {args.scenario} turn {t + 1}: {e}; retrying on a new connection",
                      file=sys.stderr, flush=True)
                if len(errors) > 1:
                    raise
                if servers[i].conn is not None:
                    servers[i].conn.close()
                    servers[i].conn = None
        usage = r["usage"] or {}
        details = usage.get("prompt_tokens_details") or {}
        if not usage:
            # llama-cpp-python streams no usage: the prompt counted by its own tokenizer, the
            # reply as its content chunks (one token each).
            usage = {"prompt_tokens": count_tokens(servers[i], args.model, chatml(messages)),
                     "completion_tokens": r["content_chunks"]}
        row = {"kind": "turn", "scenario": args.scenario, "turn": t + 1, "url_index": i,
               "prompt_tokens": usage.get("prompt_tokens"),
               "completion_tokens": usage.get("completion_tokens"),
               "cached_tokens": details.get("cached_tokens"),
               "ttft_s": r["ttft_s"], "first_chunk_s": r["first_chunk_s"],
               "total_s": r["total_s"], "reply": r["reply"], "finish_reason": r["finish_reason"],
               "history_chars": sum(len(m["content"]) for m in messages),
               "request_bytes": len(json.dumps(
                   {"model": args.model, "messages": messages, "stream": True,
                    "stream_options": {"include_usage": True}, "max_tokens": args.max_tokens,
                    "temperature": 0}).encode()),
               "errors": errors}
        line = json.dumps(row, ensure_ascii=False)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
        ttft = f"{row['ttft_s']:.3f}" if row["ttft_s"] is not None else "?"
        print(f"   {args.scenario} turn {t + 1}: prompt {row['prompt_tokens']} cached "
              f"{row['cached_tokens']} ttft {ttft} s total {row['total_s']:.2f} s",
              file=sys.stderr, flush=True)
        messages.append({"role": "assistant", "content": r["reply"]})
        if args.think_time and t + 1 < len(users):
            time.sleep(args.think_time)
    if args.cpu_out:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(args.cpu_out, "w") as f:
            f.write(f"{ru.ru_utime + ru.ru_stime:.3f}\n")


if __name__ == "__main__":
    main()
