"""Engines under test: the suite's tiny LoRA policy (tests/tiny.py: tiny_policy) served by every registered engine.

The model has head_dim 32 (vLLM's CPU attention needs >= 32) and a sharpened random init, so its
distributions are far from uniform (greedy has clear winners) and eos comes up now and then.
"""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from rlx.rollout.config import RolloutConfig
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve
from tests.tiny import tiny_policy

# test name -> (registered engine, rollout overrides): vLLM both ways LoRA can reach it, and a vLLM server
VARIANTS = {"hf": ("hf", {}), "vllm": ("vllm", {"vllm": {"sync": "merged"}}),
            "vllm-adapter": ("vllm", {"vllm": {"sync": "adapter"}}),
            # one local vLLM server, adapter-only sync, pinned to this process's last core (placement)
            "vllm-server": ("vllm_server", {"server": {"placement": [f"cpu:{max(os.sched_getaffinity(0))}"]}})}
ENGINES = list(VARIANTS)


def engine_params(names=ENGINES, slow=()) -> list:
    """`names` as parametrize values, the vLLM engines marked integration (they build an engine or start a server),
    and those in `slow` marked slow too (run with `-m slow`)."""
    return [pytest.param(n, marks=[pytest.mark.integration] + [pytest.mark.slow] * (n in slow)) if n.startswith("vllm")
            else n for n in names]


def make_engine(name: str, policy, tok, path, dtype: str = "fp32", **rollout):
    """Engine variant `name` (a key of VARIANTS) serving `policy`."""
    from rlx.rollout import build_engine

    engine, overrides = VARIANTS[name]
    cfg = OmegaConf.merge(OmegaConf.structured(RolloutConfig), {"engine": engine, **overrides, **rollout})
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype=dtype)))
    return build_engine(cfg, tok, policy, trainer, base_dir=path, seed=0, max_len=96)


class _Engines(dict):
    """{"path": the policy's directory, engine name: (engine, policy, tok)}; an engine is built the first
    time a test asks for it (a module that uses only hf starts no vLLM server), vLLM skipped if absent."""

    def __init__(self, path, policy, tok):
        super().__init__(path=path)
        self.policy, self.tok = policy, tok

    def __missing__(self, name):
        if name not in VARIANTS:
            raise KeyError(name)
        if name.startswith("vllm"):
            pytest.importorskip("vllm")
        self[name] = (make_engine(name, self.policy, self.tok, self["path"]), self.policy, self.tok)
        return self[name]


@pytest.fixture(scope="module")
def served(request, tmp_path_factory):
    """The engines of VARIANTS over one tiny policy, built on first use and closed once per test module."""
    path = tmp_path_factory.mktemp("tiny_policy")
    policy, tok = tiny_policy(path)
    out = _Engines(path, policy, tok)
    yield out
    for name in ENGINES:
        if dict.__contains__(out, name):
            out[name][0].close()
