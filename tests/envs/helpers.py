"""Test doubles for rlx.envs: a scripted engine (text in, scripted text out, on the char tokenizer) and
environments that always answer (so that a tiny random policy has multi-turn episodes)."""

from __future__ import annotations

import torch

from rlx.envs.base import Environment, Step
from rlx.rollout.base import RolloutBatch


class ScriptedEngine:
    """engine.generate on token-id contexts: `script(context text, call index) -> completion text` (eos written
    as '|'), each token's log-prob -0.01 * (its index + 1), version `self.version`. Records every call. It
    ignores stop strings (SamplingParams.stop), as an engine that stops late would: the driver cuts."""

    def __init__(self, tok, script, version: int = 3):
        self.tok, self.script, self.version = tok, script, version
        self.calls: list[dict] = []

    def metrics(self):
        return {"engine/x": 1.0}

    def generate(self, prompts, n, sampling, generator, seeds=None):
        assert n == 1 and all(isinstance(p, list) for p in prompts)
        self.calls.append({"prompts": [list(p) for p in prompts], "max_tokens": sampling.max_tokens, "seeds": seeds,
                           "stop": sampling.stop})
        eos = self.tok.eos_token_id
        rows, trunc = [], []
        for p in prompts:
            text = self.script(self.tok.decode(p), len(self.calls) - 1)
            ids = [eos if ch == "|" else self.tok.convert_tokens_to_ids(ch) for ch in text]
            if eos in ids:
                ids = ids[: ids.index(eos) + 1]
            trunc.append(eos not in ids[: sampling.max_tokens])
            rows.append(ids[: sampling.max_tokens])
        N, T = len(rows), max(len(r) for r in rows)
        comp = torch.full((N, T), self.tok.pad_token_id, dtype=torch.long)
        cmask = torch.zeros((N, T), dtype=torch.long)
        for i, r in enumerate(rows):
            comp[i, : len(r)], cmask[i, : len(r)] = torch.tensor(r), 1
        logp = -0.01 * torch.arange(1, T + 1, dtype=torch.float32).expand(N, T) * cmask
        tver = torch.full((N, T), self.version).masked_fill(cmask == 0, -1)
        texts = [self.tok.decode([t for t in r if t != eos]) for r in rows]
        P = max(len(p) for p in prompts)
        pids = torch.tensor([[self.tok.pad_token_id] * (P - len(p)) + p for p in prompts])
        pmask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
        return RolloutBatch(pids, pmask, comp, cmask, logp, torch.tensor(trunc), torch.arange(N), texts, None,
                            version=torch.full((N,), self.version), token_version=tver)


class EchoEnv(Environment):
    """Answers every policy turn with ' ok.' and never ends an episode itself (the turn budget does)."""

    INSTRUCTIONS = ""

    def step(self, action_ids):
        return Step(self.fmt.reply(" ok."), info={"replies": 1})


class RewardEnv(EchoEnv):
    """EchoEnv with a reward of 0.5 per turn."""

    def step(self, action_ids):
        s = super().step(action_ids)
        s.reward = 0.5
        return s


class TokenRewardEnv(EchoEnv):
    """EchoEnv paying 0.25 per token of each policy turn (exact in binary) and ending the episode at the
    policy's second turn: an episode's per-turn rewards sum to 0.25 x its policy tokens."""

    def reset(self, prompt_ids, example=None):
        self.turns = 0
        return super().reset(prompt_ids, example)

    def step(self, action_ids):
        self.turns += 1
        s = super().step(action_ids)
        s.reward, s.done = 0.25 * len(action_ids), self.turns == 2
        return s


def lazy_engines(path, template: str | None = None):
    """A generator for a module fixture: get(name) -> (engine, policy, tok) over one tiny policy (chat template
    `template` when given), each engine built on first use (vLLM skipped where it is not installed)."""
    import pytest

    from tests.rollout.conftest import make_engine
    from tests.tiny import tiny_policy

    policy, tok = tiny_policy(path)
    if template is not None:
        tok.chat_template = template
    built: dict = {}

    def get(name):
        if name not in built:
            if name == "vllm":
                pytest.importorskip("vllm")
            built[name] = (make_engine(name, policy, tok, path), policy, tok)
        return built[name]

    yield get
    for engine, _, _ in built.values():
        engine.close()


def spy_updates(monkeypatch) -> list:
    """(batch, the update's loss mask) of every update, in order."""
    from rlx.algo.policy_update import Update

    seen, prepare = [], Update.prepare

    def spy(self, batch, rewards, dp):
        prep = prepare(self, batch, rewards, dp)
        seen.append((batch, prep.mask.cpu().clone()))
        return prep

    monkeypatch.setattr(Update, "prepare", spy)
    return seen
