"""Extrapolators called by the training loop after every optimizer step.

`linear` (RL-Extra baseline): at each extend step s, W = W0 + alpha (W_s - W0), i.e. the LoRA
delta is scaled by alpha (exactly B <- alpha B when the initial adapter product is zero, as with
PEFT's default init; otherwise re-factorized to rank r).
`next` (NExt): rank-1 records every `interval` steps; at each extend step a fresh predictor per
(out, in) shape bucket is trained on the records so far, predicts every module's next-`horizon`
update triplet, and alpha * sigma u v^T is folded into the adapter (rank r kept).
After a jump the Adam state of the LoRA params is dropped (cfg.reset_optimizer), so AdamW
restarts its moments and bias correction for them at the next step.
"""

import math
import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch import nn

from rlx.extrapolation.fold import fold_into_lora, fold_rank1
from rlx.extrapolation.lora import LoraFactors, lora_modules, snapshot
from rlx.extrapolation.predictor import (
    PredictorFit,
    TrajectoryPredictor,
    decode_triplet,
    encode_triplet,
    train_predictor,
)
from rlx.extrapolation.rank1 import work_dtype
from rlx.extrapolation.records import TrajectoryRecords, _copy_tree

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
        self._validate()
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

    # -- validation -----------------------------------------------------------------------
    def _validate(self) -> None:
        cfg = self.cfg
        if not self.extend_at:
            raise ValueError(f"extrapolation.type={self.kind} needs at least one step in extrapolation.extend_at")
        bad = [s for s in self.extend_at if not 1 <= s <= self.total_steps]
        if bad:
            raise ValueError(f"extrapolation.extend_at steps {bad} are outside [1, total_steps={self.total_steps}]")
        if not math.isfinite(float(cfg.alpha)):
            raise ValueError(f"extrapolation.alpha must be finite, got {cfg.alpha}")

    # -- loop interface ---------------------------------------------------------------------
    def observe(self, model: nn.Module, step: int, optimizer: torch.optim.Optimizer | None = None) -> dict[str, float]:
        """Call after each optimizer step with the count of completed RL steps (and once with 0
        before training). A step at or before the last observed one is a no-op (safe on resume)."""
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
        out = {
            "extrap/records": float(self._n_records()),
            "extrap/jumps": float(len(self.jumps)),
            "extrap/steps_saved": float(self.steps_saved),
            "extrap/time_s/records": self.timer.totals["records"],
            "extrap/time_s/svd": self.timer.totals["svd"],
            "extrap/time_s/predictor": self.timer.totals["predictor"],
            "extrap/predictor_loss": float(self.predictor_loss),
        }
        out.update(self._jump_metrics)
        return out

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

    # -- subclass hooks ----------------------------------------------------------------------
    def _start(self, modules: list[LoraFactors]) -> None:
        raise NotImplementedError

    def _on_step(self, modules: list[LoraFactors], step: int) -> None:
        pass

    def _jump(self, modules: list[LoraFactors], step: int) -> None:
        raise NotImplementedError

    def _n_records(self) -> int:
        return 0

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "type": self.kind,
            "started": self.started,
            "last_step": self.last_step,
            "module_names": list(self.module_names),
            "jumps": list(self.jumps),
            "steps_saved": self.steps_saved,
            "predictor_loss": self.predictor_loss,
            "timings": dict(self.timer.totals),
        }

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("version") != STATE_VERSION or sd.get("type") != self.kind:
            raise ValueError(
                f"extrapolation: checkpoint state is type {sd.get('type')!r} v{sd.get('version')}, "
                f"expected {self.kind!r} v{STATE_VERSION}"
            )
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


class NextExtrapolator(Extrapolator):
    """NExt predict-extend. Each jump claims alpha * horizon steps saved."""

    kind = "next"

    def __init__(self, cfg, total_steps):
        super().__init__(cfg, total_steps)
        self.records = TrajectoryRecords(int(cfg.interval), int(cfg.horizon), bool(cfg.store_on_cpu))
        self.fits: dict[tuple[int, int], PredictorFit] = {}  # (out, in) bucket -> fitted predictor
        self.last_prediction: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # not in state

    def _validate(self):
        super()._validate()
        cfg = self.cfg
        interval, horizon = int(cfg.interval), int(cfg.horizon)
        if interval < 1 or horizon < interval or horizon % interval:
            raise ValueError(
                f"extrapolation: need interval >= 1 and horizon a multiple of interval, got {interval}, {horizon}"
            )
        off = [s for s in self.extend_at if s % interval]
        if off:
            raise ValueError(f"extrapolation.extend_at steps {off} are not multiples of interval={interval}")
        if self.extend_at[0] < horizon:
            raise ValueError(
                f"extrapolation: first extend step {self.extend_at[0]} < horizon {horizon}: no training pair would exist"
            )
        if int(cfg.epochs) < 1 or int(cfg.hidden) < 1 or float(cfg.lr) <= 0 or not 0 <= float(cfg.min_lr_ratio) <= 1:
            raise ValueError(
                f"extrapolation: bad predictor settings epochs={cfg.epochs} hidden={cfg.hidden} "
                f"lr={cfg.lr} min_lr_ratio={cfg.min_lr_ratio}"
            )

    def _n_records(self):
        return len(self.records.records)

    def _start(self, modules):
        with self.timer("records"):
            self.records.start(modules, snapshot(modules, bool(self.cfg.store_on_cpu)))

    def _on_step(self, modules, step):
        if step % self.records.interval == 0 and step <= self.extend_at[-1]:
            self.records.record(step, modules, self.timer)

    # -- predict-extend ----------------------------------------------------------------------
    def _bucket_rows(self, modules, steps, with_targets: bool):
        """{(out, in): (global [N, d], local [N, d], target [N, d] | None, keys [(step, name)])}, d = out + in."""
        device = modules[0].A.device
        rows = defaultdict(lambda: ([], [], [], []))
        for t in steps:
            rec, tgt = self.records.records[t], self.records.targets.get(t)
            for m in modules:
                g, l, y, keys = rows[(m.out_features, m.in_features)]
                g.append(encode_triplet(rec[m.name]["global"]).to(device))
                l.append(encode_triplet(rec[m.name]["local"]).to(device))
                if with_targets:
                    y.append(encode_triplet(tgt[m.name]).to(device))
                keys.append((t, m.name))
        return {
            shape: (torch.stack(g), torch.stack(l), torch.stack(y) if with_targets else None, keys)
            for shape, (g, l, y, keys) in sorted(rows.items())
        }

    def _train(self, modules) -> None:
        steps = self.records.pairs()
        if not steps:
            raise RuntimeError("extrapolation: no training pairs (record, target) available for the predictor")
        cfg = self.cfg
        self.fits, first, last, counts = {}, [], [], []
        for shape, (g, l, y, _) in self._bucket_rows(modules, steps, with_targets=True).items():
            fit = train_predictor(
                g, l, y,
                hidden=int(cfg.hidden), epochs=int(cfg.epochs), lr=float(cfg.lr),
                min_lr_ratio=float(cfg.min_lr_ratio), weight_decay=float(cfg.weight_decay),
                seed=int(cfg.seed) * 1_000_003 + len(self.jumps) * 7_919 + shape[0] * 31 + shape[1],
            )  # fmt: skip
            self.fits[shape] = fit
            first.append(fit.loss_first)
            last.append(fit.loss_last)
            counts.append(g.shape[0])
        n = sum(counts)
        self.predictor_loss = sum(c * x for c, x in zip(counts, last)) / n
        self._jump_metrics["extrap/predictor_loss_first"] = sum(c * x for c, x in zip(counts, first)) / n
        self._jump_metrics["extrap/predictor_pairs"] = float(len(steps))

    def predict(self, modules, step: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """{name: (u [out], sigma, v [in])}: the predicted next-horizon update from the record at `step`."""
        preds = {}
        for shape, (g, l, _, keys) in self._bucket_rows(modules, [step], with_targets=False).items():
            out = self.fits[shape].predict(g, l)  # [N, out + in]
            for (_, name), x in zip(keys, out):
                preds[name] = decode_triplet(x, shape[0])
        return {m.name: preds[m.name] for m in modules}

    def _jump(self, modules, step):
        with self.timer("predictor"):
            self._train(modules)
            preds = self.predict(modules, step)
        self.last_prediction = preds
        sig, cos, lost = [], [], []
        with self.timer("svd"):
            for m in modules:
                u, sigma, v = preds[m.name]
                jump = self.alpha * sigma
                if jump == 0:
                    continue
                A_new, B_new, dropped = fold_rank1(m.A.detach(), m.B.detach(), m.scaling, u, jump, v)
                self._write(m, A_new, B_new)
                ul, _, vl = self.records.records[step][m.name]["local"]
                sig.append(float(jump))
                cos.append(float(torch.dot(u, ul.to(u)) * torch.dot(v, vl.to(v))))
                lost.append(float(torch.linalg.norm(dropped)) * abs(m.scaling) / abs(float(jump)))
        self.records.after_jump(step, modules, self.timer)
        self.steps_saved += self.alpha * self.records.horizon
        if sig:
            self._jump_metrics.update(
                {
                    "extrap/jump_sigma_mean": sum(sig) / len(sig),
                    "extrap/jump_cos_local": sum(cos) / len(cos),
                    "extrap/fold_rel_error": sum(lost) / len(lost),
                }
            )

    # -- state ------------------------------------------------------------------------------
    def state_dict(self):
        sd = super().state_dict()
        sd["records"] = self.records.state_dict()
        sd["predictors"] = {
            shape: {"state": {k: v.detach().clone() for k, v in f.net.state_dict().items()}, "scale": f.scale,
                    "loss_first": f.loss_first, "loss_last": f.loss_last, "hidden": int(self.cfg.hidden)}
            for shape, f in self.fits.items()
        }  # fmt: skip
        return sd

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.records.load_state_dict(sd["records"])
        self.fits = {}
        for (n_out, n_in), p in sd["predictors"].items():
            with torch.random.fork_rng(devices=[]):  # init is overwritten; keep the global RNG untouched
                net = TrajectoryPredictor(int(n_out) + int(n_in), int(p["hidden"]))
            net.load_state_dict(p["state"])
            self.fits[(int(n_out), int(n_in))] = PredictorFit(net, float(p["scale"]), float(p["loss_first"]), float(p["loss_last"]))


EXTRAPOLATORS: dict[str, type[Extrapolator]] = {"linear": LinearExtrapolator, "next": NextExtrapolator}


def build_extrapolator(cfg, total_steps: int) -> Extrapolator | None:
    """The extrapolator named by cfg.type, or None for "none"."""
    kind = str(cfg.type)
    if kind == "none":
        return None
    if kind not in EXTRAPOLATORS:
        raise ValueError(f"extrapolation.type must be one of none, {', '.join(EXTRAPOLATORS)}; got {kind!r}")
    return EXTRAPOLATORS[kind](cfg, total_steps)
