"""NExt trajectory predictor: (global, local) rank-1 components -> next-horizon component (docs/extrapolation.md).

A triplet (u [out], s, v [in]) is encoded as [sqrt(s) u, sqrt(s) v] (d = out + in), one net per (out, in) shape:
one vector keeps u and v's relative sign. Scaled by sqrt(d) / mean|target|; network and training: the paper's."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlx.extrapolation.rank1 import Triplet


def _block(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Linear(hidden, d_in), nn.ReLU(), nn.Linear(d_in, hidden),
                         nn.Linear(hidden, d_out))


class TrajectoryPredictor(nn.Module):
    """Maps encoded (global [N, d], local [N, d]) triplets to the encoded next-horizon triplet [N, d]."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.d = d
        self.global_encoder = _block(d, hidden, d)
        self.local_encoder = _block(d, hidden, d)
        self.combiner = _block(2 * d, hidden, d)

    def forward(self, global_x: torch.Tensor, local_x: torch.Tensor) -> torch.Tensor:
        z = torch.cat([self.global_encoder(global_x), self.local_encoder(local_x)], dim=-1)  # [N, 2d]
        return self.combiner(z)  # [N, d]


def encode_triplet(triplet: Triplet) -> torch.Tensor:
    """(u [out], s, v [in]) -> [sqrt(s) u, sqrt(s) v]  [out + in]."""
    u, s, v = triplet
    return s.clamp(min=0).sqrt() * torch.cat([u, v.to(u)])


def decode_triplet(x: torch.Tensor, out_features: int) -> Triplet:
    """[a, b] [out + in] -> (u, sigma, v) with unit u, v and sigma = |a| |b| (zeros if a or b is 0)."""
    a, b = x[:out_features], x[out_features:]
    na, nb = torch.linalg.norm(a), torch.linalg.norm(b)
    if na == 0 or nb == 0:
        return torch.zeros_like(a), na * nb, torch.zeros_like(b)
    return a / na, na * nb, b / nb


@dataclass
class PredictorFit:
    net: TrajectoryPredictor
    scale: float  # inputs and targets are multiplied by this before the net
    loss_first: float  # L1 (scaled units) at epoch 0, before the first update
    loss_last: float  # L1 (scaled units) after the last update

    def state(self) -> dict:
        """Tensors and plain numbers (a checkpoint's or a stored fit's): the net's weights, its width, the fit's numbers."""
        return {"state": {k: v.detach().clone() for k, v in self.net.state_dict().items()}, "scale": self.scale,
                "loss_first": self.loss_first, "loss_last": self.loss_last,
                "hidden": self.net.global_encoder[0].out_features}  # fmt: skip

    @classmethod
    def from_state(cls, p: dict, d: int) -> "PredictorFit":
        """The fit `state()` saved, for encoded vectors of length d (a bucket's out + in)."""
        with torch.random.fork_rng(devices=[]):  # the init is overwritten; keep the global RNG untouched
            net = TrajectoryPredictor(d, int(p["hidden"]))
        net.load_state_dict(p["state"])
        return cls(net, float(p["scale"]), float(p["loss_first"]), float(p["loss_last"]))

    @torch.no_grad()
    def predict(self, global_x: torch.Tensor, local_x: torch.Tensor) -> torch.Tensor:
        """[N, d] encoded triplets in original units."""
        self.net.eval()
        p = next(self.net.parameters())
        out = self.net(global_x.to(p) * self.scale, local_x.to(p) * self.scale)
        return out / self.scale


def bucket_scale(targets: torch.Tensor) -> float:
    """sqrt(d) / mean target norm (1.0 when all targets are zero); targets [N, d]."""
    mean_norm = float(torch.linalg.norm(targets.double(), dim=1).mean())
    return math.sqrt(targets.shape[1]) / mean_norm if mean_norm > 0 else 1.0


def train_predictor(global_x: torch.Tensor, local_x: torch.Tensor, targets: torch.Tensor, *, hidden: int,
                    epochs: int, lr: float, min_lr_ratio: float, weight_decay: float, seed: int) -> PredictorFit:
    """Fit one bucket's predictor full batch; global_x, local_x, targets [N, d] on one device. The net's init comes from
    `seed`, the global RNG untouched: a fit is a pure function of its inputs (bitwise, on one device)."""
    if not (global_x.shape == local_x.shape == targets.shape) or global_x.ndim != 2 or global_x.shape[0] == 0:
        raise ValueError(f"train_predictor: need equal non-empty [N, d] tensors, got {tuple(global_x.shape)}, "
                         f"{tuple(local_x.shape)}, {tuple(targets.shape)}")
    if epochs < 1:
        raise ValueError(f"train_predictor: epochs must be >= 1, got {epochs}")
    d = global_x.shape[1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = TrajectoryPredictor(d, hidden)
    net = net.to(device=global_x.device, dtype=torch.float32)
    scale = bucket_scale(targets)
    g, l, y = (t.float() * scale for t in (global_x, local_x, targets))
    fused = global_x.device.type in ("cpu", "cuda")
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)
    net.train()
    loss_first = loss_last = float("nan")
    for epoch in range(epochs):
        cosine = 0.5 * (1 + math.cos(math.pi * epoch / epochs))
        for group in opt.param_groups:
            group["lr"] = lr * (min_lr_ratio + (1 - min_lr_ratio) * cosine)
        loss = F.l1_loss(net(g, l), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if epoch == 0:
            loss_first = float(loss.detach())
    with torch.no_grad():
        loss_last = float(F.l1_loss(net(g, l), y))
    return PredictorFit(net, scale, loss_first, loss_last)
