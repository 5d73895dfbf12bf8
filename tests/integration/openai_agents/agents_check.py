"""An openai-agents (PyPI `openai-agents`) agent loop against deltaserve-router.

Run by tests/integration/openai_agents_test.cc, which starts deltaserve-scripted-worker (a TEST
DOUBLE replaying outputs.json, one output per Generate call, with one of the chat templates of
../shared/fixtures) and the real router in front of it. The agent has one function tool.
Non-streamed (Runner.run), streamed (Runner.run_streamed), then forced (tool_choice "required",
which the SDK resets after the call): turn 1 the scripted output is a tool call in the
template's format, the SDK calls the Python tool and sends the call back as an assistant message
with content null beside tool_calls, then the tool's result; turn 2 the scripted output is the
final answer. Checks that the tool ran with the scripted arguments and the final output text.
Prints PASS / FAIL lines; exit 0 only when all pass.
Each HTTP request has a 60 s timeout and each agent run 120 s (the scripted worker answers at
once): a run that hangs fails, naming what it waited for.
"""

import argparse
import asyncio
import sys
import traceback

from openai import AsyncOpenAI
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool,
                    set_tracing_disabled)

FINAL = "It is sunny in Paris, 22 C."
REQUEST_SECONDS = 60  # one chat completion through the router (the SDK's default: 600)
RUN_SECONDS = 120     # one agent run: two completions and the tool call
calls = []


@function_tool
def get_weather(city: str, unit: str) -> str:
    """Return the current weather of a city."""
    calls.append((city, unit))
    return f"Sunny, 22 {unit} in {city}"


def make_agent(base_url, tool_choice=None):
    client = AsyncOpenAI(base_url=base_url, api_key="sk-unused", max_retries=0,
                         timeout=REQUEST_SECONDS)
    model = OpenAIChatCompletionsModel(model="m", openai_client=client)
    return Agent(name="weather", instructions="You answer weather questions with the tool.",
                 tools=[get_weather], model=model,
                 model_settings=ModelSettings(temperature=0, tool_choice=tool_choice))


async def non_streamed(base_url):
    agent = make_agent(base_url)
    result = await Runner.run(agent, "What is the weather in Paris, in C?")
    assert calls == [("Paris", "C")], calls
    assert result.final_output == FINAL, repr(result.final_output)


async def streamed(base_url):
    agent = make_agent(base_url)  # a client per event loop: asyncio.run closes the previous one
    result = Runner.run_streamed(agent, "And again, streamed?")
    kinds = []
    async for event in result.stream_events():
        if event.type == "run_item_stream_event":
            kinds.append(event.item.type)
    assert calls == [("Paris", "C")], calls
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds, kinds
    assert kinds.index("tool_call_item") < kinds.index("tool_call_output_item"), kinds
    assert result.final_output == FINAL, repr(result.final_output)


async def forced(base_url):
    agent = make_agent(base_url, tool_choice="required")
    result = await Runner.run(agent, "Once more, with the tool required.")
    assert calls == [("Paris", "C")], calls
    assert result.final_output == FINAL, repr(result.final_output)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    args = parser.parse_args()
    set_tracing_disabled(True)
    failed = 0
    for check in (non_streamed, streamed, forced):
        calls.clear()
        try:
            asyncio.run(asyncio.wait_for(check(args.base_url), RUN_SECONDS))
            print(f"PASS {check.__name__}")
        except asyncio.TimeoutError:
            failed += 1
            print(f"FAIL {check.__name__}: the agent run (the router's chat completions and the "
                  f"tool call) did not finish within {RUN_SECONDS} s")
        except Exception:  # noqa: BLE001 - report every failure with its traceback
            failed += 1
            print(f"FAIL {check.__name__}\n{traceback.format_exc()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
