"""Helpers for the noise tests: a tiny Qwen2 policy, AQN configs, independent norm lookups."""

from __future__ import annotations

import torch
from torch import nn

from rlx.noise import NoiseConfig
from tests import tiny

VOCAB = 32


def tiny_qwen2(seed: int = 0, dtype=torch.float32) -> nn.Module:
    """The suite's tiny Qwen2 (hidden 64, 2 layers, vocab 32) drawn in fp32, then cast to `dtype`; a wide init
    makes sampling non-uniform."""
    return tiny.tiny_qwen2(seed, vocab_size=VOCAB, initializer_range=0.3).to(dtype)


def aqn_config(**overrides) -> NoiseConfig:
    return NoiseConfig(**{"type": "aqn", **overrides})  # checked as preflight's conversion checks it


def norm_weights(model: nn.Module, suffixes=("input_layernorm", "post_attention_layernorm")) -> dict[str, torch.Tensor]:
    """Independent lookup (not rlx's): clean copies of every 1-D weight under modules ending in a suffix."""
    out = {}
    for name, module in model.named_modules():
        if name.split(".")[-1] in suffixes:
            for pname, p in module.named_parameters():
                out[f"{name}.{pname}"] = p.detach().clone()
    return out


def live_weights(model: nn.Module, names) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    return {n: params[n].detach().clone() for n in names}
