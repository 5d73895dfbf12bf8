#!/usr/bin/env python3
"""The official openai and anthropic SDKs through an alias [local, upstream] whose local worker
is down (run by tests/integration/router_upstream_test.cc): every answer comes from the upstream
(another deltaserve-router), non-streamed and streamed, in each SDK's own types; the local model
alone is a typed 503.

  upstream_sdk_check.py --base-url http://127.0.0.1:PORT
"""
import argparse
import signal
import sys

import anthropic
import openai


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    args = ap.parse_args()
    signal.alarm(180)  # never hang CI: the C++ side waits 200 s
    oa = openai.OpenAI(base_url=args.base_url + "/v1", api_key="unused", max_retries=0,
                       timeout=60)
    an = anthropic.Anthropic(base_url=args.base_url, api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Say something."}]

    r = oa.chat.completions.create(model="smart", messages=messages, max_tokens=8, temperature=0)
    assert r.model == "remote", r.model
    assert r.choices[0].message.content, r
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, r.usage
    whole = r.choices[0].message.content

    text, last_usage = "", None
    for chunk in oa.chat.completions.create(model="smart", messages=messages, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
        assert chunk.model == "remote", chunk.model
        if chunk.usage is not None:
            last_usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == whole, (text, whole)
    assert last_usage is not None and last_usage.completion_tokens == r.usage.completion_tokens

    # anthropic 2.x has no temperature argument: it goes in the body.
    greedy = {"temperature": 0}
    m = an.messages.create(model="smart", max_tokens=8, extra_body=greedy, messages=messages)
    assert m.model == "remote", m.model
    assert m.content[0].type == "text" and m.content[0].text == whole, (m.content, whole)
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage

    with an.messages.stream(model="smart", max_tokens=8, extra_body=greedy,
                            messages=messages) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == whole, (streamed, whole)
    assert final.model == "remote" and final.stop_reason in ("end_turn", "max_tokens"), final

    try:
        oa.chat.completions.create(model="tiny", messages=messages, max_tokens=4)
        raise AssertionError("the local model answered although its worker is down")
    except openai.InternalServerError as e:
        assert e.status_code == 503, e
    try:
        an.messages.create(model="tiny", max_tokens=4, messages=messages)
        raise AssertionError("the local model answered although its worker is down")
    except anthropic.APIStatusError as e:
        assert e.status_code == 503, e
    print("upstream SDK checks passed")


if __name__ == "__main__":
    sys.exit(main())
