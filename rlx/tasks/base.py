"""Task interface: seeded train / held-out splits, a deterministic sampler with a resumable
position, and scoring through named reward functions (rlx.tasks.rewards)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rlx.tasks.rewards import REWARDS


@dataclass(frozen=True)
class Example:
    key: str  # stable id (curriculum bookkeeping, disjointness checks)
    prompt: str  # what the policy sees
    answer: str  # gold final answer (what rewards compare against)
    solution: str = ""  # SFT target completion (defaults to the answer)

    @property
    def target(self) -> str:
        return self.solution or self.answer


class Task:
    """A verifiable task. Subclasses fill `train` and `eval` (disjoint) in `__init__`."""

    name = "task"

    def __init__(self, cfg):
        self.cfg = cfg
        self.train: list[Example] = []
        self.eval: list[Example] = []
        if not cfg.rewards:
            raise ValueError(f"task.rewards is empty; name at least one reward function, e.g. task.rewards="
                             f"{{correct: 1.0}} (registered: {sorted(REWARDS)})")
        unknown = [r for r in cfg.rewards if r not in REWARDS]
        if unknown:
            raise ValueError(f"task.rewards: unknown reward function(s) {unknown}; registered: {sorted(REWARDS)}")
        self.verifier = None
        if "math_verify" in cfg.rewards:
            from rlx.tasks.verify import configure

            self.verifier = configure(cfg.get("reward_timeout_s", 5.0))
        self._epoch = 0
        self._pos = 0
        self._order: list[int] | None = None
        self._shuffle_seed = 0

    # ---- sampling -------------------------------------------------------------------------
    def set_seed(self, seed: int) -> None:
        self._shuffle_seed = seed
        self._order = None

    def _epoch_order(self) -> list[int]:
        if self._order is None:
            order = list(range(len(self.train)))
            random.Random(f"{self._shuffle_seed}-{self._epoch}").shuffle(order)
            self._order = order
        return self._order

    def sample(self, n: int, skip=None) -> list[Example]:
        """Next `n` training prompts in a seeded per-epoch shuffle; `skip(key)` retires prompts."""
        out: list[Example] = []
        scanned_since_pick = 0
        while len(out) < n:
            order = self._epoch_order()
            if self._pos >= len(order):
                self._epoch, self._pos, self._order = self._epoch + 1, 0, None
                continue
            ex = self.train[order[self._pos]]
            self._pos += 1
            if skip is not None and skip(ex.key):
                scanned_since_pick += 1
                if scanned_since_pick > 2 * len(self.train):  # a full epoch boundary can hide the last live prompt
                    raise RuntimeError("every training prompt is retired: nothing left to sample")
                continue
            scanned_since_pick = 0
            out.append(ex)
        return out

    def state_dict(self) -> dict:
        return {"epoch": self._epoch, "pos": self._pos, "seed": self._shuffle_seed}

    def load_state_dict(self, sd: dict) -> None:
        self._epoch, self._pos, self._shuffle_seed, self._order = sd["epoch"], sd["pos"], sd["seed"], None

    # ---- scoring --------------------------------------------------------------------------
    def score(self, examples: list[Example], completions: list[str]) -> dict[str, list[float]]:
        """Each configured reward function on each (example, completion); unweighted values."""
        assert len(examples) == len(completions)
        return {name: [REWARDS[name](c, ex) for ex, c in zip(examples, completions)] for name in self.cfg.rewards}

    def total_reward(self, per_fn: dict[str, list[float]]) -> list[float]:
        n = len(next(iter(per_fn.values())))
        return [sum(self.cfg.rewards[k] * per_fn[k][i] for k in per_fn) for i in range(n)]

    def reward_stats(self) -> dict[str, int]:
        """Bounded-reward events since the last call: math_verify timeouts, refused inputs, worker errors."""
        if self.verifier is None:
            return {}
        return {f"train/reward_{k}": v for k, v in self.verifier.pop_stats().items()}

    @staticmethod
    def passed(per_fn: dict[str, list[float]]) -> list[bool]:
        """Whether each completion solved its problem: any configured correctness verifier says so
        (exact `correct` or `math_verify`, so "The answer is 10." counts on GSM8K); else reward > 0."""
        checks = [per_fn[name] for name in ("correct", "math_verify") if name in per_fn]
        n = len(next(iter(per_fn.values())))
        if checks:
            return [any(c[i] >= 1.0 for c in checks) for i in range(n)]
        return [sum(per_fn[k][i] for k in per_fn) > 0 for i in range(n)]
