"""Adaptive Quantization Noise (QeRL): seeded channel-wise Gaussian noise on RMSNorm weights.

At step s each target norm weight w [C] becomes dtype(w + sigma_s * z), z ~ N(0, 1) [C] seeded by (seed, step,
norm key); the clean w is restored after, so noise never accumulates and a resume draws the same (docs/noise.md)."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from rlx.noise.norms import NormSite, find_norm_sites
from rlx.noise.schedules import sigma_at


def generator_seed(seed: int, step: int, key: str) -> int:
    """A 63-bit seed that depends on (seed, step, norm key) only, stable across runs and machines."""
    digest = hashlib.blake2b(f"aqn/{int(seed)}/{int(step)}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass
class _Saved:
    param: nn.Parameter  # [C] the live weight
    clean: torch.Tensor  # [C] its clean value (a copy)
    version: int  # param._version right after the injector last wrote it


class NoiseInjector:
    """Applies and removes AQN noise on a model's norm weights; see the module docstring."""

    def __init__(self, cfg, total_steps: int, seed: int):
        sigma_at(0, total_steps, cfg)  # the run's length (the config's own values: NoiseConfig)
        self.cfg = cfg
        self.total_steps = int(total_steps)
        self.seed = int(seed)
        self.targets = [str(t) for t in cfg.targets]
        self.include_final_norm = bool(cfg.include_final_norm)
        self._active: list[_Saved] | None = None  # set while noise is in the model
        self._active_step: int | None = None
        self._restored: list[_Saved] = []  # what restore() last wrote, for is_clean()

    def sigma_at(self, step: int) -> tuple[float, int]:
        return sigma_at(step, self.total_steps, self.cfg)

    def sites(self, model: nn.Module) -> list[NormSite]:
        return find_norm_sites(model, self.targets, self.include_final_norm)

    def standard_noise(self, step: int, key: str, channels: int) -> torch.Tensor:
        """z ~ N(0, 1) for one norm at one step: [channels] fp32 on CPU (device-independent)."""
        gen = torch.Generator(device="cpu").manual_seed(generator_seed(self.seed, step, key))
        return torch.randn(channels, generator=gen, dtype=torch.float32)

    @property
    def active(self) -> bool:
        """True while noise from apply() is in the model (until restore())."""
        return self._active is not None

    @torch.no_grad()
    def apply(self, model: nn.Module, step: int) -> dict[str, float]:
        """Add sigma(step) * z to each target norm weight on top of a fresh clean copy; return metrics (noise/
        changed_frac: the share of entries still changed after rounding to their dtype). sigma = 0 touches nothing."""
        if self._active is not None:
            raise RuntimeError(f"AQN noise from step {self._active_step} is still applied; call restore() before apply()")
        sigma, stage = self.sigma_at(step)
        sites = self.sites(model)  # validates before anything is written
        metrics = {"noise/sigma": float(sigma), "noise/stage": int(stage), "noise/changed_frac": 0.0}
        if sigma == 0.0:
            return metrics
        saved: list[_Saved] = []
        changed = total = 0
        self._active, self._active_step = saved, int(step)
        try:
            for site in sites:
                z = self.standard_noise(step, site.key, site.channels) * sigma  # [C] fp32
                for param in site.params:
                    clean = param.detach().clone()  # [C]
                    compute = torch.promote_types(param.dtype, torch.float32)
                    noisy = (clean.to(compute) + z.to(device=param.device, dtype=compute)).to(param.dtype)  # [C]
                    param.copy_(noisy)
                    saved.append(_Saved(param, clean, param._version))
                    changed += int((noisy != clean).sum())
                    total += noisy.numel()
        except BaseException:
            self.restore()
            raise
        metrics["noise/changed_frac"] = changed / max(total, 1)
        return metrics

    @property
    def active_step(self) -> int | None:
        """The step whose noise is applied now (None when the weights are clean)."""
        return self._active_step

    @torch.no_grad()
    def restore(self, model: nn.Module | None = None) -> None:
        """Write the clean weights back bitwise (no-op when clean; `model`, if given, must hold them). Under a noisy
        training forward, restore only after backward: autograd saved the noisy weights."""
        if self._active is None:
            return
        if model is not None:
            live = {id(p) for p in model.parameters()}
            if any(id(s.param) not in live for s in self._active):
                raise ValueError("restore() got a model that does not hold the noised norm weights")
        for s in self._active:
            s.param.copy_(s.clean)
            s.version = s.param._version
        self._restored = self._active
        self._active, self._active_step = None, None

    @contextmanager
    def applied(self, model: nn.Module, step: int):
        """`with injector.applied(model, step) as metrics:` noise inside, clean weights after (always)."""
        metrics = self.apply(model, step)
        try:
            yield metrics
        finally:
            self.restore(model)

    @torch.no_grad()
    def is_clean(self, model: nn.Module) -> bool:
        """True iff every target norm weight holds its clean value bitwise, as far as this injector knows (after
        restore, a weight updated in place since, its version counter moved, counts as the new clean value)."""
        self.sites(model)  # the model must have the target norms
        if self._active is not None:
            return all(torch.equal(s.param, s.clean) for s in self._active)
        return all(s.param._version != s.version or torch.equal(s.param, s.clean) for s in self._restored)
