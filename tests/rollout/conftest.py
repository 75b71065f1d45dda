"""Engines under test: the same tiny LoRA policy served by every registered engine.

The model has head_dim 32 (vLLM's CPU attention needs >= 32) and a sharpened random init, so its
distributions are far from uniform (greedy has clear winners) and eos comes up now and then.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from rlx.rollout.config import RolloutConfig
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve

# test name -> (registered engine, rollout overrides): vLLM both ways LoRA can reach it, and a vLLM server
VARIANTS = {"hf": ("hf", {}), "vllm": ("vllm", {"vllm": {"sync": "merged"}}),
            "vllm-adapter": ("vllm", {"vllm": {"sync": "adapter"}}),
            # one local vLLM server, adapter-only sync, pinned to this process's last core (placement)
            "vllm-server": ("vllm_server", {"server": {"placement": [f"cpu:{max(os.sched_getaffinity(0))}"]}})}
ENGINES = list(VARIANTS)


def engine_params(names=ENGINES) -> list:
    """`names` as parametrize values, the vLLM engines marked integration (they build an engine or start a server)."""
    return [pytest.param(n, marks=pytest.mark.integration) if n.startswith("vllm") else n for n in names]


def tiny_policy(path, seed: int = 0):
    """A 2-layer Qwen2 (hidden 64, 2 heads -> head_dim 32) saved to `path`, wrapped with LoRA whose B is non-zero."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.models import attach_lora
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, initializer_range=0.2)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] *= 2.0  # make eos a real option
    model.save_pretrained(path)
    tok.save_pretrained(path)
    lora = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    policy = attach_lora(model.eval(), lora)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    return policy.eval(), tok


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
