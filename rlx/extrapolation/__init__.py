"""NExt predict-extend and the linear (RL-Extra) baseline, folded into the LoRA adapter."""

from rlx.extrapolation.config import ExtrapolationConfig
from rlx.extrapolation.extrapolator import Extrapolator, LinearExtrapolator
from rlx.extrapolation.fold import fold_into_lora, fold_rank1
from rlx.extrapolation.predictor import TrajectoryPredictor, train_predictor
from rlx.extrapolation.next import NextExtrapolator
from rlx.extrapolation.rank1 import rank1_from_lora

EXTRAPOLATORS: dict[str, type[Extrapolator]] = {"linear": LinearExtrapolator, "next": NextExtrapolator}


def build_extrapolator(cfg, total_steps: int) -> Extrapolator | None:
    """The extrapolator named by cfg.type, or None for "none"."""
    kind = str(cfg.type)  # a name ExtrapolationConfig checked
    return None if kind == "none" else EXTRAPOLATORS[kind](cfg, total_steps)


__all__ = ["EXTRAPOLATORS", "ExtrapolationConfig", "Extrapolator", "LinearExtrapolator", "NextExtrapolator",
           "TrajectoryPredictor", "build_extrapolator", "fold_into_lora", "fold_rank1", "rank1_from_lora",
           "train_predictor"]
