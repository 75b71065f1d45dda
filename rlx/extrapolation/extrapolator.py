"""Extrapolators the training loop calls after every optimizer step: the interface and `linear` (next.py: NExt).

`linear` (RL-Extra) sets W = W0 + alpha (W_s - W0) at each extend step s. See docs/extrapolation.md."""

import time
from contextlib import contextmanager

import torch
from torch import nn

from rlx.extrapolation.fold import fold_into_lora
from rlx.extrapolation.lora import LoraFactors, lora_modules, snapshot
from rlx.extrapolation.rank1 import work_dtype
from rlx.extrapolation.records import _copy_tree

STATE_VERSION = 1


class _Timer:
    """Cumulative wall time per category; synchronizes CUDA so GPU work is counted."""

    def __init__(self):
        self.totals = {"records": 0.0, "svd": 0.0, "predictor": 0.0}
        self.device: torch.device | None = None

    def _sync(self):
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def __call__(self, key: str):
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.totals[key] += time.perf_counter() - t0


class Extrapolator:
    """Common part: module discovery, initial adapter, jump bookkeeping, metrics, state."""

    kind = ""

    def __init__(self, cfg, total_steps: int):
        self.cfg = cfg
        self.total_steps = int(total_steps)
        self.extend_at = sorted({int(s) for s in cfg.extend_at})
        bad = [s for s in self.extend_at if not 1 <= s <= self.total_steps]
        if bad:  # each value alone was checked by ExtrapolationConfig; here against the run's length
            raise ValueError(f"extrapolation.extend_at steps {bad} are outside [1, total_steps={self.total_steps}]")
        self.adapter = str(cfg.adapter)
        self.alpha = float(cfg.alpha)
        self.timer = _Timer()
        self.started = False
        self.last_step = -1
        self.module_names: list[str] = []
        self.jumps: list[int] = []
        self.steps_saved = 0.0
        self.predictor_loss = float("nan")
        self._jump_metrics: dict[str, float] = {}

    def observe(self, model: nn.Module, step: int, optimizer: torch.optim.Optimizer | None = None) -> dict[str, float]:
        """Call after each optimizer step with the completed RL steps (with 0 before training); a repeat is a no-op."""
        step = int(step)
        modules = lora_modules(model, self.adapter)
        names = [m.name for m in modules]
        self.timer.device = modules[0].A.device
        self._jump_metrics = {}
        if not self.started:
            if step != 0:
                raise ValueError(f"extrapolation: call observe(model, 0, optimizer) before training (first call had step {step})")
            self.module_names = names
            self._start(modules)
            self.started = True
        elif names != self.module_names:
            raise ValueError("extrapolation: the model's LoRA modules differ from the ones recorded at step 0 / in the checkpoint")
        if step > self.last_step:
            if step > 0:
                self._on_step(modules, step)
            if step in self.extend_at and step not in self.jumps:
                self._jump(modules, step)
                self.jumps.append(step)
                self._jump_metrics["extrap/optimizer_states_reset"] = float(self._reset_optimizer(optimizer, modules))
            self.last_step = step
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        t = self.timer.totals
        return {"extrap/records": float(self._n_records()), "extrap/jumps": float(len(self.jumps)),
                "extrap/steps_saved": float(self.steps_saved), "extrap/time_s/records": t["records"],
                "extrap/time_s/svd": t["svd"], "extrap/time_s/predictor": t["predictor"],
                "extrap/predictor_loss": float(self.predictor_loss), **self._jump_metrics}

    def _reset_optimizer(self, optimizer, modules: list[LoraFactors]) -> int:
        if optimizer is None or not self.cfg.reset_optimizer:
            return 0
        n = 0
        for m in modules:
            for p in (m.A, m.B):
                if p in optimizer.state:
                    del optimizer.state[p]
                    n += 1
        return n

    @staticmethod
    @torch.no_grad()
    def _write(m: LoraFactors, A_new: torch.Tensor, B_new: torch.Tensor) -> None:
        m.A.copy_(A_new.to(m.A.dtype))
        m.B.copy_(B_new.to(m.B.dtype))

    def _start(self, modules: list[LoraFactors]) -> None:
        raise NotImplementedError

    def _on_step(self, modules: list[LoraFactors], step: int) -> None:
        pass

    def _jump(self, modules: list[LoraFactors], step: int) -> None:
        raise NotImplementedError

    def _n_records(self) -> int:
        return 0

    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, "type": self.kind, "started": self.started, "last_step": self.last_step,
                "module_names": list(self.module_names), "jumps": list(self.jumps), "steps_saved": self.steps_saved,
                "predictor_loss": self.predictor_loss, "timings": dict(self.timer.totals)}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("version") != STATE_VERSION or sd.get("type") != self.kind:
            raise ValueError(f"extrapolation: checkpoint state is type {sd.get('type')!r} v{sd.get('version')}, "
                             f"expected {self.kind!r} v{STATE_VERSION}")
        self.started, self.last_step = bool(sd["started"]), int(sd["last_step"])
        self.module_names, self.jumps = list(sd["module_names"]), list(sd["jumps"])
        self.steps_saved, self.predictor_loss = float(sd["steps_saved"]), float(sd["predictor_loss"])
        self.timer.totals = dict(sd["timings"])


class LinearExtrapolator(Extrapolator):
    """W = W0 + alpha (W_s - W0) at each extend step s. Claims (alpha - 1) * s steps saved."""

    kind = "linear"

    def _start(self, modules):
        with self.timer("records"):
            self.initial = snapshot(modules, bool(self.cfg.store_on_cpu))

    def _jump(self, modules, step):
        a = self.alpha
        with self.timer("svd"):
            for m in modules:
                A0, B0 = (t.to(m.A.device) for t in self.initial[m.name])
                if not (A0.any() and B0.any()):  # W0 has no adapter part: scaling the delta = scaling B
                    with torch.no_grad():
                        m.B.mul_(a)
                    continue
                # B0 A0 + a (B A - B0 A0) = B A + [(a-1) B, (1-a) B0] [A; A0]
                dt = work_dtype(m.A)
                L = torch.cat([(a - 1) * m.B.detach().to(dt), (1 - a) * B0.to(dt)], dim=1)  # [out, 2r]
                R = torch.cat([m.A.detach().to(dt), A0.to(dt)], dim=0)  # [2r, in]
                A_new, B_new, _ = fold_into_lora(m.A.detach(), m.B.detach(), L, R)
                self._write(m, A_new, B_new)
        self.steps_saved += (a - 1) * step

    def state_dict(self):
        sd = super().state_dict()
        sd["initial"] = _copy_tree(self.initial) if self.started else {}
        return sd

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.initial = _copy_tree(sd["initial"])
