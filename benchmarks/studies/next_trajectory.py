"""A synthetic smooth LoRA trajectory with a known future, to check the NExt predictor.

    python -m benchmarks.studies.next_trajectory --lr 1e-4 --epochs 1000 --hidden 256

Module (tau, c) follows W(t) = c (1 - exp(-t/tau)) u(t/tau) v0^T with u rotating in a fixed
plane: decelerating and turning, so repeating the last local delta overshoots and points the
wrong way. All modules follow one law in rescaled time t / tau, so a slow module's state at the
extend step is covered by the training pairs of faster ones; fast modules whose state at the
extend step lies beyond every training pair are excluded from the error (an MLP does not
extrapolate). The script prints the predictor's L1 loss and the relative error of the jump
against the true next-horizon update, next to the 'repeat the last local delta' baseline.
"""

import argparse
import math

import torch
from torch import nn

F64 = torch.float64


class FakeLoraLinear(nn.Module):
    """Only the attributes of a PEFT LoraLayer that the extrapolator reads (no base layer)."""

    def __init__(self, out_features: int, in_features: int, r: int, scaling: float, dtype=torch.float32):
        super().__init__()
        self.lora_A = nn.ModuleDict({"default": nn.Linear(in_features, r, bias=False, dtype=dtype)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, out_features, bias=False, dtype=dtype)})
        self.scaling = {"default": scaling}


class SmoothTrajectory:
    """Sets the factors of `n = len(taus) * len(amplitudes)` fake LoRA modules to W(t)."""

    def __init__(self, out=16, inn=12, r=4, scaling=0.5, taus=(60.0, 80.0, 100.0, 120.0, 150.0),
                 amplitudes=(0.6, 1.0, 1.4), theta=1.0, seed=0):  # fmt: skip
        g = torch.Generator().manual_seed(seed)
        self.out, self.inn, self.r, self.scaling, self.theta, self.taus = out, inn, r, scaling, theta, taus
        self.plane, _ = torch.linalg.qr(torch.randn(out, 2, generator=g, dtype=F64))  # [out, 2]
        self.v0 = torch.randn(inn, generator=g, dtype=F64)
        self.v0 /= torch.linalg.norm(self.v0)
        self.A = torch.randn(r, inn, generator=g, dtype=F64)  # [r, in]
        self.A[0] = self.v0
        self.params = [(tau, c) for tau in taus for c in amplitudes]
        self.model = nn.Module()
        for i in range(len(self.params)):
            self.model.add_module(f"m{i}", FakeLoraLinear(out, inn, r, scaling))

    def column(self, t: float, i: int) -> torch.Tensor:  # [out]; W(t) = column v0^T
        tau, c = self.params[i]
        x = t / tau
        direction = math.cos(self.theta * x) * self.plane[:, 0] + math.sin(self.theta * x) * self.plane[:, 1]
        return c * (1 - math.exp(-x)) * direction

    def dense(self, t: float, i: int) -> torch.Tensor:  # [out, in]
        return torch.outer(self.column(t, i), self.v0)

    @torch.no_grad()
    def set_step(self, t: float) -> None:
        for i in range(len(self.params)):
            m = getattr(self.model, f"m{i}")
            B = torch.zeros(self.out, self.r, dtype=F64)
            B[:, 0] = self.column(t, i) / self.scaling
            m.lora_A["default"].weight.copy_(self.A)
            m.lora_B["default"].weight.copy_(B)

    def adapter_delta(self, i: int) -> torch.Tensor:  # [out, in]: scaling * B A now
        m = getattr(self.model, f"m{i}")
        return self.scaling * (m.lora_B["default"].weight.detach().double() @ m.lora_A["default"].weight.detach().double())

    def covered(self, extend: int, horizon: int) -> list[int]:
        """Modules whose rescaled time at `extend` lies within the training pairs' range."""
        reach = (extend - horizon) / min(self.taus)
        return [i for i, (tau, _) in enumerate(self.params) if extend / tau <= reach]


def evaluate(cfg, traj: SmoothTrajectory | None = None) -> dict[str, float]:
    """Run the `next` extrapolator (alpha is forced to 1) over the trajectory up to its single
    extend step; relative errors of the jump vs the true next-horizon update."""
    from rlx.extrapolation.next import NextExtrapolator

    traj = traj or SmoothTrajectory()
    extend, horizon, interval = int(cfg.extend_at[0]), int(cfg.horizon), int(cfg.interval)
    if float(cfg.alpha) != 1.0 or len(cfg.extend_at) != 1:
        raise ValueError("synthetic.evaluate: use alpha = 1 and a single extend step")
    ext = NextExtrapolator(cfg, total_steps=extend)
    for t in range(extend + 1):
        traj.set_step(t)
        metrics = ext.observe(traj.model, t, None)
    pred, base = [], []
    for i in traj.covered(extend, horizon):
        truth = traj.dense(extend + horizon, i) - traj.dense(extend, i)
        jump = traj.adapter_delta(i) - traj.dense(extend, i)
        repeat_local = (horizon / interval) * (traj.dense(extend, i) - traj.dense(extend - interval, i))
        pred.append(float(torch.linalg.norm(jump - truth) / torch.linalg.norm(truth)))
        base.append(float(torch.linalg.norm(repeat_local - truth) / torch.linalg.norm(truth)))
    return {
        "loss_first": metrics["extrap/predictor_loss_first"],
        "loss_last": metrics["extrap/predictor_loss"],
        "pairs": metrics["extrap/predictor_pairs"],
        "modules_checked": float(len(pred)),
        "jump_rel_error": sum(pred) / len(pred),
        "repeat_local_rel_error": sum(base) / len(base),
    }


def main(argv: list[str] | None = None) -> None:
    from rlx.extrapolation.config import ExtrapolationConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cfg = ExtrapolationConfig(type="next", interval=10, horizon=50, extend_at=[150], alpha=1.0,
                              hidden=a.hidden, epochs=a.epochs, lr=a.lr, seed=a.seed)  # fmt: skip
    res = evaluate(cfg)
    print(" ".join(f"{k}={v:.4g}" for k, v in res.items()))


if __name__ == "__main__":
    main()
