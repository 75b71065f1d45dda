"""Tool calls in the policy's text: the Hermes/Qwen convention, read into OpenAI-style tool calls.

A reply calls tools by writing, anywhere after its prose, one block per call:

    <tool_call>
    {"name": "calculate", "arguments": {"expression": "3*4"}}
    </tool_call>

(the chat template supplied by `model.chat_template` tells the model so, and lists the tools' schemas;
examples/envs/chatml_tools.jinja is one). A block's body is read with `json.loads` only, never evaluated.
The reply's content is its text before the first block. A reply calls tools only when every block it
holds is a JSON object with a string `name` and an object of `arguments` (absent: none); otherwise
it is plain text, as an OpenAI server answers with no tool call when its parser fails. The last block may
lack its closing tag (a reply that ends at eos right after the JSON).

The calls come back as OpenAI chat-completion tool calls (what verifiers' ToolEnv reads, and what a TRL
environment's methods are called from): `{"id", "type": "function", "function": {"name", "arguments"}}`
with `arguments` a JSON string; ids are `call_<model call>_<index>`, the same in every run.
"""

from __future__ import annotations

import json
import re

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.S)


def _call(body: str) -> tuple[str, dict] | None:
    """(name, arguments) of one block's JSON, None when it is not a well-formed call."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string, as the OpenAI API carries them
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return (obj["name"], args) if isinstance(args, dict) else None


def parse(text: str) -> tuple[str, list[tuple[str, dict]]]:
    """(content, [(tool name, arguments)]) of a reply; ([text], []) when it calls no tool or a block is malformed."""
    if OPEN not in text:
        return text, []
    calls = [_call(m.group(1).strip()) for m in _BLOCK.finditer(text)]
    if not calls or any(c is None for c in calls):
        return text, []
    return text[: text.index(OPEN)].rstrip(), calls


def openai_calls(calls: list[tuple[str, dict]], call_index: int) -> list[dict]:
    """The calls as OpenAI chat-completion tool calls (arguments as a JSON string)."""
    return [{"id": f"call_{call_index}_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]


def arguments(tool_call: dict) -> dict:
    """An OpenAI tool call's arguments as a mapping (they travel as a JSON string; a mapping is kept)."""
    args = tool_call["function"].get("arguments") or {}
    return json.loads(args) if isinstance(args, str) else dict(args)
