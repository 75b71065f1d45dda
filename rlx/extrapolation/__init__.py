"""NExt predict-extend and the linear (RL-Extra) baseline, folded into the LoRA adapter."""

from rlx.extrapolation.config import ExtrapolationConfig
from rlx.extrapolation.extrapolator import (
    EXTRAPOLATORS,
    Extrapolator,
    LinearExtrapolator,
    NextExtrapolator,
    build_extrapolator,
)
from rlx.extrapolation.fold import fold_into_lora, fold_rank1
from rlx.extrapolation.predictor import TrajectoryPredictor, train_predictor
from rlx.extrapolation.rank1 import rank1_from_lora

__all__ = [
    "EXTRAPOLATORS",
    "ExtrapolationConfig",
    "Extrapolator",
    "LinearExtrapolator",
    "NextExtrapolator",
    "TrajectoryPredictor",
    "build_extrapolator",
    "fold_into_lora",
    "fold_rank1",
    "rank1_from_lora",
    "train_predictor",
]
