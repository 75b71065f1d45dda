"""Rollout backends behind one interface (`RolloutBackend.generate -> RolloutBatch`)."""

from rlx.rollout.base import RolloutBackend, RolloutBatch
from rlx.rollout.hf import BACKENDS, HFRollout, build_rollout

__all__ = ["RolloutBackend", "RolloutBatch", "HFRollout", "BACKENDS", "build_rollout"]
