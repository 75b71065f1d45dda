"""Run logging: wandb (offline by default) plus `metrics.jsonl` in the run directory."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

from omegaconf import OmegaConf

MODES = ("offline", "online", "disabled")


def git_sha(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _jsonable(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN/inf: written as null
    return v


class RunLogger:
    """`log(metrics, step)` writes one JSON line per call (with `step`) and the same dict to wandb."""

    def __init__(self, cfg, run_dir: Path, run_id: str | None, resume_step: int | None, code_dir: str | None = None):
        lc = cfg.logger
        if lc.mode not in MODES:
            raise ValueError(f"logger.mode: '{lc.mode}' is not one of {MODES}")
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            self._truncate_after(resume_step)
        self.sha = git_sha(code_dir)
        self.wandb = None
        self.run_id = run_id
        if lc.mode != "disabled":
            import wandb

            config = OmegaConf.to_container(cfg, resolve=True)
            config["git_sha"] = self.sha
            os.environ.setdefault("WANDB_SILENT", "true")
            self.wandb = wandb.init(
                project=lc.project, entity=lc.entity, group=lc.group, name=lc.name, tags=list(lc.tags),
                config=config, dir=str(self.run_dir), mode=lc.mode, id=run_id, resume="allow" if run_id else None,
                reinit="finish_previous",
            )
            self.run_id = self.wandb.id

    def _truncate_after(self, step: int) -> None:
        """On resume, drop lines logged after the checkpoint (they will be logged again), atomically."""
        kept = [ln for ln in self.path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(ln + "\n" for ln in kept))
        os.replace(tmp, self.path)

    def log(self, metrics: dict, step: int) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:  # every metric, always: the scaling fits and reports read it
            f.write(json.dumps(row) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def summary(self, values: dict) -> None:
        values = {k: _jsonable(v) for k, v in values.items()}
        if self.wandb is not None:
            for k, v in values.items():
                self.wandb.summary[k] = v

    def finish(self, exit_code: int = 0) -> None:
        if self.wandb is not None:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
