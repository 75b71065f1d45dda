"""The model client a verifiers environment calls instead of OpenAI's, backed by rlx's engine (docs/envs.md,
"Turns and tokens").

`RlxClient` (one per episode) answers `client.chat.completions.create(...)`: the first call's messages are the
episode's prompt ids; a later call must extend the previous one (its messages + the reply + new messages), and
the tokens the template adds between the reply and the next generation are read off the template itself and
appended as a forced `env` turn. The policy's tokens stay as sampled, never decoded and encoded again; a call
that rewrites the conversation is refused by name (`Refused`). `Waves` holds the calls until every running
episode waits on one, then serves them with one `engine.generate`. With tool schemas, `<tool_call>` JSON
blocks in a reply become OpenAI `tool_calls` (rlx.envs.ecosystem.tool_calls). `reply` is the call without
OpenAI's types (what rlx.envs.ecosystem.trl_env calls). A call past a budget is answered as an OpenAI server
answers an overlong prompt (a 400), which verifiers turns into a truncated episode.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from rlx.envs.base import Episode, Turn
from rlx.envs.driver import _policy_turn, turn_seed
from rlx.envs.ecosystem import tool_calls
from rlx.envs.ecosystem.vf_load import clean, render

_SENTINEL = "\u2063rlx-reply\u2063"  # text no message holds


class Refused(RuntimeError):
    """An environment's call that rlx cannot serve as one token sequence (it stops the run)."""


class Overlong(Exception):
    """A call past the episode's budget: the episode ends, truncated."""


@dataclass
class Call:
    """One model call waiting for its wave."""

    ids: list[int]  # [P + T so far] the exact context it samples after
    limit: int  # tokens it may sample
    stops: tuple[str, ...]
    seed: int
    future: asyncio.Future


class Waves:
    """Pending calls of the running episodes; when each running episode waits on one, one engine.generate
    serves them all (rows in arrival order, each with its own seed: a row's tokens do not depend on its wave)."""

    def __init__(self, engine, sampling, generator, running: int):
        self.engine, self.sampling, self.generator, self.running = engine, sampling, generator, running
        self.pending: list[Call] = []
        self.engine_calls = 0

    async def sample(self, call: Call):
        self.pending.append(call)
        self._maybe_flush()
        return await call.future

    def finished(self) -> None:
        """One episode ended: the others may all be waiting now."""
        self.running -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self.pending and len(self.pending) >= self.running:
            calls, self.pending = self.pending, []
            self._serve(calls)

    def _serve(self, calls: list[Call]) -> None:
        stops = tuple(dict.fromkeys((*self.sampling.stop, *(s for c in calls for s in c.stops))))
        sp = self.sampling.but(stop=stops, max_tokens=max(c.limit for c in calls))
        try:
            out = self.engine.generate([c.ids for c in calls], 1, sp, self.generator, seeds=[c.seed for c in calls])
        except Exception as e:  # noqa: BLE001  (each episode's client records it; the engine raises it after the wave)
            if isinstance(e, StopIteration):  # a future refuses it, and the wave's other episodes would wait forever
                e = RuntimeError(f"the engine raised StopIteration: {e!r}")
            for c in calls:
                c.future.set_exception(e)
            return
        self.engine_calls += 1
        for j, c in enumerate(calls):
            c.future.set_result((out, j))


@dataclass
class Record:
    """What one episode's client keeps: the episode's tokens and the conversation its last call saw."""

    seed: int
    episode: Episode = field(default_factory=lambda: Episode(prompt_ids=[]))
    messages: list = field(default_factory=list)  # the last call's messages
    reply: dict | None = None  # the assistant message the last call returned
    prompt_text: str = ""  # the last call's messages through the template (generation prompt included)
    last_eos: bool = False  # the last call's tokens end with eos
    last: tuple = ()  # the last call's (prompt tokens, sampled ids, their log-probs, ended by length)
    calls: int = 0
    failure: BaseException | None = None  # raised by the engine once every episode has ended


def _same(a: dict, b: dict) -> bool:
    """Two chat messages equal in what the template renders of them (role, content, tool calls)."""
    return (a.get("role") == b.get("role") and (a.get("content") or "") == (b.get("content") or "")
            and (a.get("tool_calls") or None) == (b.get("tool_calls") or None))


class RlxClient:
    """The `AsyncOpenAI` stand-in of one episode (only what verifiers' rollout calls)."""

    base_url, api_key = "rlx://engine", "rlx"

    def __init__(self, record: Record, waves: Waves, tok, budget, total: int, name: str):
        self.record, self.waves, self.tok, self.budget, self.total, self.name = record, waves, tok, budget, total, name
        self.chat = _Namespace(completions=_Namespace(create=self.create))
        self.completions = _Namespace(create=self._text_completion)

    async def close(self) -> None:
        return None

    async def _text_completion(self, **kwargs):
        raise self._fail(Refused(f"env.id={self.name}: a text-completion call; rlx serves chat calls only"))

    def _fail(self, e: BaseException) -> BaseException:
        if self.record.failure is None:
            self.record.failure = e
        return e

    async def create(self, *, messages, model=None, tools=None, **sampling_args):
        """OpenAI's chat.completions.create: the reply as a ChatCompletion; a call past a budget as a 400."""
        try:
            reply = await self.reply(messages, tools, sampling_args)
        except Overlong as e:
            raise _overlong_error(str(e)) from None
        return _completion(reply, *self.record.last)

    async def reply(self, messages, tools=None, sampling_args: dict | None = None) -> dict:
        """One model call: the assistant message ({role, content[, tool_calls]}). Raises Overlong past a budget
        (the episode is truncated); any other failure is recorded, and stops the run once the wave is over."""
        try:
            return await self._create(clean(messages), tools, dict(sampling_args or {}))
        except Overlong:
            self.record.episode.truncated = True
            raise
        except BaseException as e:
            raise self._fail(e)

    async def _create(self, messages: list[dict], tools, sampling_args: dict) -> dict:
        rec, ep = self.record, self.record.episode
        prompt_text = render(self.tok, messages, tools)
        if rec.calls == 0:
            ep.prompt_ids = self.tok(prompt_text, add_special_tokens=False).input_ids
            bridge: list[int] = []
        else:
            bridge = self._bridge(messages, tools, prompt_text)
        left = self.total - ep.length - len(bridge)
        if rec.calls >= self.budget.max_turns or left <= 0:
            raise Overlong(f"maximum context length is reached: call {rec.calls + 1} of an episode of at most "
                           f"{self.budget.max_turns} calls and {self.total} completion tokens")
        if bridge:
            ep.turns.append(Turn("env", bridge))
        asked = sampling_args.get("max_completion_tokens") or sampling_args.get("max_tokens") or left
        limit = min(left, self.budget.turn_tokens or left, int(asked))
        stops = sampling_args.get("stop") or ()
        stops = (stops,) if isinstance(stops, str) else tuple(stops)
        future = asyncio.get_running_loop().create_future()
        call = Call(ep.context(), limit, stops, turn_seed(rec.seed, rec.calls), future)
        out, j = await self.waves.sample(call)
        eos = self.tok.eos_token_id
        ids, by_length = _policy_turn(ep, out, j, limit, self.tok, stops, {eos})
        text = ep.turns[-1].text
        for s in stops:  # an OpenAI server's text ends before the stop string (the tokens keep it)
            text = text.split(s, 1)[0] if s in text else text
        ep.truncated = by_length
        content, calls = tool_calls.parse(text) if tools else (text, [])
        reply = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = tool_calls.openai_calls(calls, rec.calls)
        rec.messages, rec.reply, rec.prompt_text = messages, reply, prompt_text
        rec.last = (len(call.ids), ids, ep.turns[-1].logprobs, by_length)
        rec.last_eos, rec.calls = bool(ids) and ids[-1] == eos, rec.calls + 1
        return reply

    def _bridge(self, messages: list[dict], tools, prompt_text: str) -> list[int]:
        """Token ids between the last call's sampled tokens and this call's generation: read off the template."""
        rec = self.record
        prev = [*rec.messages, rec.reply]
        if len(messages) <= len(prev) or not all(_same(a, b) for a, b in zip(messages, prev)):
            raise Refused(f"env.id={self.name}: model call {rec.calls + 1} of an episode is not the previous call's "
                          f"conversation plus the model's reply plus new messages (the environment rewrote the "
                          f"conversation); rlx trains on one token sequence per episode and cannot serve it")
        marked = render(self.tok, [*rec.messages, {"role": "assistant", "content": _SENTINEL}, *messages[len(prev):]],
                        tools)
        head, _, tail = marked.partition(_SENTINEL)
        if head != rec.prompt_text or _SENTINEL in tail:
            raise Refused(f"env.id={self.name}: the chat template renders the conversation before model call "
                          f"{rec.calls + 1} differently from how its earlier turns were sampled (e.g. a template that "
                          f"drops earlier reasoning); the episode would not be one token sequence")
        ids = self.tok(tail, add_special_tokens=False).input_ids
        eos = self.tok.eos_token_id
        return ids[1:] if rec.last_eos and ids and ids[0] == eos else ids  # the sampled eos already closed the reply


class _Namespace:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _overlong_error(message: str):
    """What an OpenAI server answers to a prompt past the model's context: verifiers reads it as a truncated
    episode (prompt_too_long), not an error."""
    import httpx
    from openai import BadRequestError

    response = httpx.Response(400, request=httpx.Request("POST", "http://rlx/chat/completions"), text=message)
    return BadRequestError(message, response=response, body=None)


def _completion(reply: dict, n_prompt: int, ids: list[int], logprobs: list[float], by_length: bool):
    """An OpenAI ChatCompletion of one sampled turn, with its token ids and log-probs (what verifiers'
    trajectory records when a server returns them)."""
    from openai.types.chat import ChatCompletion
    from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
    from openai.types.chat.chat_completion_message import ChatCompletionMessage
    from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall
    from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob
    from openai.types.completion_usage import CompletionUsage

    lp = ChoiceLogprobs(content=[ChatCompletionTokenLogprob(token=str(t), logprob=float(v), bytes=None, top_logprobs=[])
                                 for t, v in zip(ids, logprobs)])
    calls = [ChatCompletionMessageFunctionToolCall.model_validate(c) for c in reply.get("tool_calls", [])] or None
    finish = "length" if by_length else "tool_calls" if calls else "stop"
    choice = Choice(index=0, finish_reason=finish, logprobs=lp,
                    message=ChatCompletionMessage(role="assistant", content=reply["content"], tool_calls=calls))
    choice.token_ids = list(ids)
    out = ChatCompletion(id=f"rlx-{time.monotonic_ns()}", choices=[choice], created=int(time.time()), model="rlx",
                         object="chat.completion",
                         usage=CompletionUsage(prompt_tokens=n_prompt, completion_tokens=len(ids),
                                               total_tokens=n_prompt + len(ids)))
    out.prompt_token_ids = []  # verifiers reads the prompt's ids off its own state; rlx keeps the episode's
    return out
