"""Rank-1 trajectory records of every LoRA module, NExt's training data (docs/extrapolation.md, Records).

global_t / local_t: top triplets of W_t - W_0 / W_t - W_{t-interval}; target_t: of W_{t+horizon} - W_t. Signs
are aligned with a reference so records vary continuously; `after_jump` re-anchors the snapshot window."""

import torch

from rlx.extrapolation.lora import LoraFactors, snapshot
from rlx.extrapolation.rank1 import Triplet, align_sign, rank1_from_lora, work_dtype

Factors = dict[str, tuple[torch.Tensor, torch.Tensor]]


def _zero_triplet(m: LoraFactors) -> Triplet:
    kw = {"dtype": work_dtype(m.A), "device": m.A.device}
    return torch.zeros(m.out_features, **kw), torch.zeros((), **kw), torch.zeros(m.in_features, **kw)


def _aligned(triplet: Triplet, *references: Triplet) -> Triplet:
    """Align with the first nonzero reference (unchanged if none)."""
    for ref in references:
        if ref[1] > 0:
            return align_sign(triplet, ref)
    return triplet


class TrajectoryRecords:
    """Records, targets and the snapshot window; all state is plain tensors / python."""

    def __init__(self, interval: int, horizon: int, to_cpu: bool = False):
        if interval < 1 or horizon < 1 or horizon % interval:
            raise ValueError(f"records: need interval >= 1 and horizon a multiple of it, got {interval}, {horizon}")
        self.interval, self.horizon, self.to_cpu = interval, horizon, to_cpu
        self.initial: Factors = {}
        self.window: dict[int, Factors] = {}  # step -> snapshot
        self.records: dict[int, dict[str, dict[str, Triplet]]] = {}  # step -> name -> {"global", "local"}
        self.targets: dict[int, dict[str, Triplet]] = {}  # step t -> name -> triplet of W_{t+h} - W_t

    def start(self, modules: list[LoraFactors], initial: Factors) -> None:
        """Step 0: remember W_0 (already snapshotted), zero global/local triplets."""
        self.initial = initial
        self.window = {0: initial}
        self.records = {0: {m.name: {"global": _zero_triplet(m), "local": _zero_triplet(m)} for m in modules}}
        self.targets = {}

    def _triplet(self, m: LoraFactors, reference: tuple[torch.Tensor, torch.Tensor]) -> Triplet:
        A0, B0 = reference
        return rank1_from_lora(m.A.detach(), m.B.detach(), m.scaling, A0.to(m.A.device), B0.to(m.B.device))

    def record(self, step: int, modules: list[LoraFactors], timer) -> None:
        """Take the record at `step` (a multiple of interval, after the previous record)."""
        prev = step - self.interval
        if prev not in self.window or prev not in self.records:
            raise ValueError(f"records: no record at step {prev} to take the local delta at step {step}")
        start = step - self.horizon
        with timer("svd"):
            record = {}
            for m in modules:
                g = _aligned(self._triplet(m, self.initial[m.name]), self.records[prev][m.name]["global"])
                loc = _aligned(self._triplet(m, self.window[prev][m.name]), g)
                record[m.name] = {"global": g, "local": loc}
            if start in self.window and start in self.records:
                self.targets[start] = {m.name: _aligned(self._triplet(m, self.window[start][m.name]),
                                                        self.records[start][m.name]["local"],
                                                        self.records[start][m.name]["global"]) for m in modules}
        with timer("records"):
            self.records[step] = record
            self.window[step] = snapshot(modules, self.to_cpu)
            for t in [t for t in self.window if t <= start]:
                del self.window[t]

    def after_jump(self, step: int, modules: list[LoraFactors], timer) -> None:
        """The adapter just jumped at `step` (which has a record): re-anchor the window there."""
        with timer("svd"):
            for m in modules:
                entry = self.records[step][m.name]
                entry["global"] = _aligned(self._triplet(m, self.initial[m.name]), entry["global"])
        with timer("records"):
            self.window = {step: snapshot(modules, self.to_cpu)}

    def pairs(self) -> list[int]:
        """Record steps t with a target (training pairs), ascending."""
        return sorted(t for t in self.targets if t in self.records)

    def state_dict(self) -> dict:
        """Nested dicts of tensors (the containers are copied; tensors are never mutated here)."""
        return _copy_tree({"interval": self.interval, "horizon": self.horizon, "initial": self.initial,
                           "window": self.window, "records": self.records, "targets": self.targets})

    def load_state_dict(self, sd: dict) -> None:
        if (sd["interval"], sd["horizon"]) != (self.interval, self.horizon):
            raise ValueError(f"records: checkpoint has interval/horizon {sd['interval']}/{sd['horizon']}, config "
                             f"{self.interval}/{self.horizon}")
        sd = _copy_tree(sd)
        self.initial, self.window = sd["initial"], sd["window"]
        self.records, self.targets = sd["records"], sd["targets"]


def _copy_tree(obj):
    """Copy dict / list / tuple containers, keep the tensors (and other leaves) as they are."""
    if isinstance(obj, dict):
        return {k: _copy_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy_tree(v) for v in obj)
    return obj
