"""Fake run directories in the format the training loop writes (metrics.jsonl, .hydra/config.yaml, summary.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlx.scaling.curves import sigmoid

R0 = 0.2  # our choice of the reward at zero compute


def noisy_sigmoid(compute, A, B, C_mid, r0=R0, noise=0.01, seed=0) -> np.ndarray:
    """Reward at each compute with N(0, noise^2) added; the zero-compute point stays exactly r0."""
    rng = np.random.default_rng(seed)
    y = sigmoid(compute, A, B, C_mid, r0) + rng.normal(0.0, noise, np.shape(compute))
    return np.where(np.asarray(compute) == 0, r0, y)


def write_run(path: Path, steps, compute, reward, *, seed=0, algo="grpo", loss="ppo_clip", summary=None,
              gpu_hours_per_flop=1e-12, gpu_hours_setup=0.0, extra_lines=(), train_steps=200) -> Path:
    """A run directory: evaluation lines (val/acc + cumulative compute) interleaved with training lines."""
    path.mkdir(parents=True, exist_ok=True)
    lines = []
    for s, c, r in zip(steps, compute, reward):
        if s > 0:
            lines.append({"step": int(s), "train/reward/mean": float(r) + 0.05, "train/loss": 0.1})
        lines.append({
            "step": int(s), "val/acc": float(r), "val/mean_at_k": float(r) * 0.9,
            "perf/compute/flops": float(c), "perf/compute/tokens": float(c) / 1e3,
            "perf/compute/steps": float(s), "perf/compute/gpu_hours": gpu_hours_setup + float(c) * gpu_hours_per_flop,
        })
    lines.extend(extra_lines)
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path / ".hydra").mkdir(exist_ok=True)
    config = {
        "seed": seed,
        "algo": {"name": algo, "loss": loss, "lr": 1e-3},
        "task": {"name": "arith", "seed": 1234},
        "quant": {"format": "none"},
        "scaling": {"fit": "none", "compute": "flops", "metric": "val/acc"},
        "logger": {"mode": "offline", "name": f"{algo}-{seed}"},
        "train": {"steps": train_steps, "progress": False},
    }
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "summary.json").write_text(json.dumps(summary or {"status": "ok", "val/acc": float(reward[-1])}))
    return path


@pytest.fixture
def noisy():
    """noisy_sigmoid(compute, A, B, C_mid, r0=0.2, noise=0.01, seed=0)."""
    return noisy_sigmoid


@pytest.fixture
def make_run():
    """write_run(path, steps, compute, reward, *, seed, algo, loss, summary, extra_lines)."""
    return write_run


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A multirun-like sweep: two recipes (grpo with A=0.61, cispo with A=0.70) x two seeds, dirs 0..3."""
    root = tmp_path / "multirun"
    steps = np.arange(0, 201, 5)
    compute = steps * 1e12  # [41] flops, 1e12 per step
    jobs = [("grpo", "ppo_clip", 0.61, 0), ("grpo", "ppo_clip", 0.61, 1), ("cispo", "cispo", 0.70, 0), ("cispo", "cispo", 0.70, 1)]
    for i, (algo, loss, a, seed) in enumerate(jobs):
        reward = noisy_sigmoid(compute, a, 1.9, 6e13, seed=10 * i + seed)
        write_run(root / str(i), steps, compute, reward, seed=seed, algo=algo, loss=loss)
    return root
