"""Find the LoRA factors of a PEFT-wrapped model and snapshot them; the base layer is never touched. Duck typing
on PEFT's `lora_A`, `lora_B`, `scaling`: any base PEFT can wrap (nn.Linear, bnb 4-bit, rlx packed)."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class LoraFactors:
    """One adapted module: delta W = scaling * B @ A."""

    name: str
    A: nn.Parameter  # [r, in]
    B: nn.Parameter  # [out, r]
    scaling: float

    @property
    def rank(self) -> int:
        return self.A.shape[0]

    @property
    def in_features(self) -> int:
        return self.A.shape[1]

    @property
    def out_features(self) -> int:
        return self.B.shape[0]


def lora_modules(model: nn.Module, adapter: str = "default") -> list[LoraFactors]:
    """All modules carrying adapter `adapter`, in `named_modules` order."""
    found = []
    for name, module in model.named_modules():
        lora_A = getattr(module, "lora_A", None)
        if not isinstance(lora_A, nn.ModuleDict) or adapter not in lora_A:
            continue
        if getattr(module, "use_dora", {}).get(adapter, False):
            raise ValueError(f"extrapolation: module {name!r} uses DoRA, which is not supported")
        A = lora_A[adapter].weight
        B = module.lora_B[adapter].weight
        if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[1]:
            raise ValueError(f"extrapolation: module {name!r} has non-matrix LoRA factors {tuple(A.shape)}, "
                             f"{tuple(B.shape)}")
        if min(B.shape[0], A.shape[1]) < A.shape[0]:
            raise ValueError(f"extrapolation: module {name!r} has LoRA rank {A.shape[0]} above its dimensions "
                             f"({B.shape[0]}, {A.shape[1]})")
        found.append(LoraFactors(name, A, B, float(module.scaling[adapter])))
    if not found:
        raise ValueError(f"extrapolation: the model has no LoRA modules with adapter {adapter!r}")
    return found


def snapshot(modules: list[LoraFactors], to_cpu: bool = False) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Detached copies {name: (A [r, in], B [out, r])} in the factors' own dtype."""
    out = {}
    for m in modules:
        A, B = m.A.detach().clone(), m.B.detach().clone()
        out[m.name] = (A.cpu(), B.cpu()) if to_cpu else (A, B)
    return out
