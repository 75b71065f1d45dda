"""ScaleRL no-positive-resampling: retire prompts whose pass rate reaches a threshold."""

from __future__ import annotations

from typing import Any


class PassRateCurriculum:
    """Per-prompt pass-rate history; a prompt whose latest pass rate is >= threshold is retired for good."""

    def __init__(self, threshold: float = 0.9) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"pass_rate_threshold must be in (0, 1], got {threshold}")
        self.threshold = float(threshold)
        self.history: dict[str, list[float]] = {}
        self.retired: set[str] = set()

    def update(self, prompt_keys: list[str], pass_rates: list[float]) -> list[str]:
        """Record one pass rate per prompt; returns the keys newly retired by this update."""
        if len(prompt_keys) != len(pass_rates):
            raise ValueError(f"{len(prompt_keys)} prompt keys but {len(pass_rates)} pass rates")
        newly = []
        for key, rate in zip(prompt_keys, pass_rates):
            rate = float(rate)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"pass rate of prompt {key!r} must be in [0, 1], got {rate}")
            self.history.setdefault(key, []).append(rate)
            if rate >= self.threshold and key not in self.retired:
                self.retired.add(key)
                newly.append(key)
        return newly

    def is_retired(self, key: str) -> bool:
        return key in self.retired

    def __len__(self) -> int:
        return len(self.retired)

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "history": {k: list(v) for k, v in self.history.items()},
                "retired": sorted(self.retired)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.threshold = float(state["threshold"])
        self.history = {k: list(v) for k, v in state["history"].items()}
        self.retired = set(state["retired"])
