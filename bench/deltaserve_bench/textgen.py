"""Seeded synthetic text, tools and conversations, and sizing prompts in the server's tokens.

The benchmark needs prompts of a given length in the *server's* tokens without a tokenizer of
its own: `TokenScale` measures, with two one-token requests, how many tokens the server counts
for N words of this filler text plus the fixed cost of the chat template, and sizes prompts from
that. The lengths recorded are always the server's `usage`, never this estimate.
"""

from __future__ import annotations

import json
import random

WORDS = (
    "the of and to in is was for on are with as his they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each she "
    "which do their time if will way about many then them write would like so these her long "
    "make thing see him two has look more day could go come did number sound no most people my "
    "over know water than call first who may down side been now find any new work part take get "
    "place made live where after back little only round man year came show every good me give "
    "our under name very through just form sentence great think say help low line differ turn "
    "cause much mean before move right boy old too same tell does set three want air well also "
    "play small end put home read hand port large spell add even land here must big high such "
    "follow act why ask men change went light kind off need house picture try us again animal "
    "point mother world near build self earth father head stand own page should country found "
    "answer school grow study still learn plant cover food sun four between state keep eye never "
    "last let thought city tree cross farm hard start might story saw far sea draw left late run "
    "while press close night real life few north open seem together next white children begin "
    "got walk example ease paper group always music those both mark often letter until mile "
    "river car feet care second book carry took science eat room friend began idea fish mountain "
    "stop once base hear horse cut sure watch color face wood main enough plain girl usual young "
    "ready above ever red list though feel talk bird soon body dog family direct pose leave song "
    "measure door product black short numeral class wind question happen complete ship area half "
    "rock order fire south problem piece told knew pass since top whole king space heard best "
    "hour better true during hundred five remember step early hold west ground interest reach "
    "fast verb sing listen six table travel less morning ten simple several vowel toward war lay "
    "against pattern slow center love person money serve appear road map rain rule govern pull "
    "cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan "
    "figure star box noun field rest correct able pound done beauty drive stood contain front "
    "teach week final gave green oh quick develop ocean warm free minute strong special mind "
    "behind clear tail produce fact street inch multiply nothing course stay wheel full force "
    "blue object decide surface deep moon island foot system busy test record boat common gold "
).split()


def words(rng: random.Random, n: int) -> str:
    """n filler words in sentences of 6-14 words."""
    out: list[str] = []
    while len(out) < n:
        k = min(rng.randint(6, 14), n - len(out))
        sentence = [rng.choice(WORDS) for _ in range(k)]
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out.extend(sentence)
    return " ".join(out)


class TokenScale:
    """prompt_tokens ≈ fixed + per_word × words, measured on the server."""

    def __init__(self, fixed: float = 8.0, per_word: float = 1.3):
        self.fixed = fixed
        self.per_word = per_word

    def words_for(self, tokens: int) -> int:
        return max(1, int((tokens - self.fixed) / self.per_word))

    def estimate(self, messages: list[dict], tools: list[dict] | None = None) -> int:
        """Prompt tokens of a conversation, for servers that report none: the words of every
        message, tool call and tool definition at the measured rate, the fixed cost once and a
        few tokens of role markup per further message."""
        words = 0
        for m in messages:
            words += len((m.get("content") or "").split())
            for call in m.get("tool_calls") or []:
                words += len(json.dumps(call["function"]).split())
        if tools:
            words += len(json.dumps(tools).split())
        return int(round(self.fixed + self.per_word * words + 5 * (len(messages) - 1)))

    @classmethod
    def fit(cls, small: tuple[int, int], large: tuple[int, int]) -> "TokenScale":
        """From two (words, prompt_tokens) probes."""
        (w1, t1), (w2, t2) = small, large
        per_word = (t2 - t1) / (w2 - w1) if w2 != w1 else 1.3
        if per_word <= 0:
            per_word = 1.3
        return cls(fixed=t1 - per_word * w1, per_word=per_word)


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "start_line": {"type": "integer"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_shell", "description": "Run a shell command and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the repository for a pattern.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"]}}},
]

# The structured workload's schema: a small bounded object, what an agent asks a model to fill.
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "done": {"type": "boolean"},
    },
    "required": ["title", "priority", "tags", "done"],
    "additionalProperties": False,
}

RESPONSE_FORMAT = {"type": "json_schema",
                   "json_schema": {"name": "task", "strict": True, "schema": SCHEMA}}


def tool_call(rng: random.Random, session: int, turn: int) -> dict:
    """An assistant tool call the client writes into the history (the model's own reply stays
    in the content), so every server sees the same conversation shape."""
    tool = rng.choice(TOOLS)["function"]["name"]
    args = {"read_file": {"path": f"src/module_{rng.randint(1, 40)}.py", "start_line": 1},
            "run_shell": {"command": f"pytest -q tests/test_{rng.randint(1, 40)}.py"},
            "search_code": {"pattern": rng.choice(WORDS)}}[tool]
    return {"id": f"call_{session}_{turn}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args)}}


class ConversationFileError(ValueError):
    """A --conversations file that cannot be replayed; the message names the file."""


def load_conversations(path: str) -> list[list[dict]]:
    """Conversations to replay: vLLM's multi-turn JSON (a list of {"messages": [{role, content}]}
    or ShareGPT's {"conversations": [{from, value}]}), as a JSON array or JSON lines. Returns,
    per conversation, its messages with roles system / user / assistant."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConversationFileError(f"{path}: {e}") from e
    try:
        doc = json.loads(text)
        items = doc if isinstance(doc, list) else doc.get("conversations", doc.get("data", []))
    except ValueError:
        try:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise ConversationFileError(f"{path}: neither JSON nor JSON lines: {e}") from e
    if not isinstance(items, list):
        raise ConversationFileError(f"{path}: expected a list of conversations")
    roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}
    out: list[list[dict]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ConversationFileError(f"{path}: a conversation is not an object: {str(item)[:80]}")
        raw = item.get("messages") or item.get("conversations")
        if not isinstance(raw, list):
            raise ConversationFileError(f"{path}: a conversation has neither 'messages' nor 'conversations'")
        msgs = []
        for m in raw:
            role = roles.get(str(m.get("role", m.get("from", ""))).lower())
            content = m.get("content", m.get("value"))
            if role is None or not isinstance(content, str):
                raise ConversationFileError(f"{path}: a message without a known role or text content: "
                                 f"{json.dumps(m)[:80]}")
            msgs.append({"role": role, "content": content})
        if any(m["role"] == "user" for m in msgs):
            out.append(msgs)
    if not out:
        raise ConversationFileError(f"{path}: no conversation with a user turn")
    return out
