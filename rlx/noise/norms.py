"""Find the norm weights AQN perturbs, by module name, through any wrapper prefix.

A target names a module by its path inside a decoder block `...layers.<i>`, so prefixes (PEFT's
`base_model.model.`, torch.compile's `_orig_mod.`) do not matter; the final norm is the `...norm` outside
every block. A site's key is its name from `layers.` on (or `norm`): the same with and without wrappers."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

_BLOCK = re.compile(r"(?:^|\.)(layers\.(\d+))$")
_IN_BLOCK = re.compile(r"(?:^|\.)(layers\.(\d+)\.(.+))$")
FINAL_NORM_KEY = "norm"


@dataclass(frozen=True)
class NormSite:
    """One norm AQN perturbs: every 1-D weight under the module gets the same noise (a PEFT ModulesToSaveWrapper
    holds the frozen original and the trainable copy: either forward path sees it)."""

    key: str  # wrapper-independent name, e.g. "layers.3.input_layernorm" or "norm"
    name: str  # full module name in this model
    params: tuple[nn.Parameter, ...]  # each [C]

    @property
    def channels(self) -> int:
        return self.params[0].numel()


def _weights_under(name: str, module: nn.Module) -> tuple[nn.Parameter, ...]:
    params = tuple(p for n, p in module.named_parameters() if n == "weight" or n.endswith(".weight"))
    if not params:
        raise ValueError(f"noise target '{name}' has no weight parameter")
    for p in params:
        if p.dim() != 1 or p.numel() != params[0].numel():
            raise ValueError(f"noise target '{name}' is not a norm: expected 1-D weights of one size, got shapes "
                             f"{[tuple(q.shape) for q in params]}")
    if not params[0].is_floating_point():
        raise ValueError(f"noise target '{name}' has a non-floating weight ({params[0].dtype})")
    return params


def _matches(relative: str, target: str) -> bool:
    return relative == target or relative.endswith("." + target)


def find_norm_sites(model: nn.Module, targets, include_final_norm: bool = False) -> list[NormSite]:
    """The norms named by `targets` in every decoder block (plus the final norm if asked), in model order;
    ValueError when there are no blocks, a block lacks a target, or the final norm is not exactly one module."""
    targets = [str(t) for t in targets]
    if not targets and not include_final_norm:
        raise ValueError("noise.targets is empty and include_final_norm is false: nothing to perturb")
    blocks: set[int] = set()
    found: dict[str, set[int]] = {t: set() for t in targets}
    sites: list[NormSite] = []
    final: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if m := _BLOCK.search(name):
            blocks.add(int(m.group(2)))
            continue
        if m := _IN_BLOCK.search(name):
            key, index, relative = m.group(1), int(m.group(2)), m.group(3)
            hit = [t for t in targets if _matches(relative, t)]
            if len(hit) > 1:
                raise ValueError(f"module '{name}' matches several noise targets {hit}")
            if hit:
                found[hit[0]].add(index)
                sites.append(NormSite(key=key, name=name, params=_weights_under(name, module)))
        elif include_final_norm and name.rsplit(".", 1)[-1] == FINAL_NORM_KEY:
            final.append((name, module))
    if not blocks:
        raise ValueError("no decoder blocks found: expected modules named '...layers.<i>'")
    for target, indices in found.items():
        if missing := sorted(blocks - indices):
            norms = sorted({n.split(".")[-1] for n, _ in model.named_modules() if "norm" in n.split(".")[-1]})
            raise ValueError(f"noise target '{target}' is missing from decoder blocks {missing[:8]}; norm-like names in "
                             f"the model: {norms}")
    if include_final_norm:
        if len(final) != 1:
            raise ValueError(f"include_final_norm: expected exactly one module named '...norm' outside the decoder "
                             f"blocks, found {[n for n, _ in final]}")
        name, module = final[0]
        sites.append(NormSite(key=FINAL_NORM_KEY, name=name, params=_weights_under(name, module)))
    return sites


def norm_parameters(model: nn.Module, targets, include_final_norm: bool = False) -> list[torch.Tensor]:
    """All weights AQN would perturb, deduplicated, in model order (for tests and assertions)."""
    seen: dict[int, torch.Tensor] = {}
    for site in find_norm_sites(model, targets, include_final_norm):
        for p in site.params:
            seen.setdefault(id(p), p)
    return list(seen.values())
