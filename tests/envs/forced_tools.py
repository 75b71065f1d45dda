"""Test doubles for tool-calling episodes on the tiny model, whose char tokenizer knows no '{' or '}':

- `braces()`: rlx's char tokenizer with '{' and '}' added (a context manager: every tokenizer and tiny model
  built inside it has them), so a tiny model can write a `<tool_call>` JSON block at all;
- `ForceToolCall`: a real engine whose replies are replaced by a scripted text where `script(context text)`
  says so (a tool call a random tiny model would never write), with the policy's exact log-probs of the
  scripted tokens (teacher-forced on the engine's policy), so the trainer's log-probs still equal the
  engine's on every token of the loss.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from rlx.rollout.base import RolloutBatch

BRACES = "{}"


@contextlib.contextmanager
def braces():
    import rlx.models.tokenizer as tokenizer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tokenizer, "CHARS", list(dict.fromkeys(tokenizer.CHARS + list(BRACES))))
        yield


def tool_call_text(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class ForceToolCall:
    """`engine` with the rows whose context `script` answers replaced; their log-probs from `policy` (default: the
    hf engine's own)."""

    _OWN = ("engine", "tok", "script", "forced", "scorer")

    def __init__(self, engine, tok, script, policy=None):
        for k, v in zip(self._OWN, (engine, tok, script, [], policy)):
            object.__setattr__(self, k, v)

    def __getattr__(self, name):
        return getattr(self.__dict__["engine"], name)

    def __setattr__(self, name, value):
        setattr(self.engine, name, value)

    def generate(self, prompts, n, sampling, generator, seeds=None) -> RolloutBatch:
        out = self.engine.generate(prompts, n, sampling, generator, seeds=seeds)
        texts = [self.script(self.tok.decode(p)) if isinstance(p, list) and n == 1 else None for p in prompts]
        if all(t is None for t in texts):
            return out
        self.forced.extend(t for t in texts if t is not None)
        return self._replaced(out, texts, sampling.temperature)

    def _replaced(self, out: RolloutBatch, scripted: list, temperature: float) -> RolloutBatch:
        from rlx.models.forward import token_logprobs

        eos, N = self.tok.eos_token_id, len(out)
        rows = [out.completion_ids[j, : int(out.completion_mask[j].sum())].tolist() if s is None
                else self.tok(s, add_special_tokens=False).input_ids + [eos] for j, s in enumerate(scripted)]
        T = max(len(r) for r in rows)
        comp = torch.full((N, T), self.tok.pad_token_id, dtype=torch.long)  # [N, T]
        cmask = torch.zeros((N, T), dtype=torch.long)
        for j, r in enumerate(rows):
            comp[j, : len(r)], cmask[j, : len(r)] = torch.tensor(r), 1
        logp = torch.zeros((N, T))
        policy = self.scorer if self.scorer is not None else self.engine.policy
        with torch.no_grad():
            exact = token_logprobs(policy, torch.cat([out.prompt_ids, comp], 1),
                                   torch.cat([out.prompt_mask, cmask], 1), T, temperature)  # [N, T]
        for j, s in enumerate(scripted):
            L = len(rows[j])
            logp[j, :L] = exact[j, :L] if s is not None else out.logprobs[j, :L]
        version = out.version if out.version is not None else torch.zeros(N, dtype=torch.long)
        tver = version[:, None].expand(N, T).masked_fill(cmask == 0, -1).clone()
        texts = [out.texts[j] if s is None else s for j, s in enumerate(scripted)]
        truncated = torch.tensor([bool(out.truncated[j]) if s is None else False for j, s in enumerate(scripted)])
        return RolloutBatch(out.prompt_ids, out.prompt_mask, comp, cmask, logp, truncated, out.group, texts, None,
                            version=version, token_version=tver)


def tool_policy_engine(path, template: str):
    """A generator for a module fixture: (hf engine, policy, tok) over the tiny policy with '{' and '}' in its
    vocabulary and `template` as its chat template; the engine closes after the module."""
    from tests.rollout.conftest import make_engine
    from tests.tiny import tiny_policy

    with braces():
        policy, tok = tiny_policy(path)
    tok.chat_template = template
    engine = make_engine("hf", policy, tok, path)
    yield engine, policy, tok
    engine.close()
