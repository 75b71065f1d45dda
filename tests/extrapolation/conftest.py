"""Tiny PEFT-wrapped Qwen2 policies and a deterministic stand-in training step."""

import pytest
import torch
from torch import nn

from benchmarks.studies.next_trajectory import FakeLoraLinear
from tests.tiny import tiny_qwen2

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _quantize_nf4(model: nn.Module) -> None:
    """Replace the decoder linears by bitsandbytes NF4 Linear4bit (packed uint8 codes)."""
    import bitsandbytes as bnb

    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in TARGETS:
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.float32, quant_type="nf4")  # fmt: skip
                q.weight = bnb.nn.Params4bit(child.weight.data.clone(), requires_grad=False, quant_type="nf4")
                if child.bias is not None:
                    q.bias = nn.Parameter(child.bias.data.clone(), requires_grad=False)
                q.to("cpu")  # quantizes: weight becomes packed uint8
                setattr(module, child_name, q)


def _make_policy(seed: int = 0, quantized: bool = False, r: int = 4):
    from peft import LoraConfig, get_peft_model

    model = tiny_qwen2(seed, vocab_size=96, intermediate_size=96)
    if quantized:
        _quantize_nf4(model)
    torch.manual_seed(seed + 1)
    return get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=TARGETS))


@pytest.fixture
def make_policy():
    return _make_policy


def _batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, 96, (4, 12), generator=g)  # [B, T]


def _train_step(model, optimizer, step: int) -> float:
    """One deterministic LM step on a fixed random batch (stands in for an RL step)."""
    ids = _batch(step)
    logits = model(input_ids=ids).logits  # [B, T, V]
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@pytest.fixture
def train_step():
    return _train_step


@pytest.fixture
def probe_logits():
    @torch.no_grad()
    def probe(model) -> torch.Tensor:
        return model(input_ids=_batch(-1)).logits  # [B, T, V]

    return probe


def lora_optimizer(model, lr: float = 1e-2):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)


@pytest.fixture
def make_optimizer():
    return lora_optimizer


@pytest.fixture
def fake_lora_model():
    def make(shapes, r: int, scaling: float, dtype=torch.float32) -> nn.Module:
        model = nn.Module()
        for i, (out_features, in_features) in enumerate(shapes):
            model.add_module(f"m{i}", FakeLoraLinear(out_features, in_features, r, scaling, dtype))
        return model

    return make
