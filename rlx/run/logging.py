"""Run logging: wandb (offline by default) plus `metrics.jsonl` in the run directory (read back by rlx.run.records)."""

from __future__ import annotations

import json
import logging as std_logging  # the stdlib module (this one is rlx.run.logging)
import math
import os
import subprocess
from pathlib import Path

from omegaconf import OmegaConf

from rlx.run.records import parse_metrics


def git_sha(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def say(msg: str) -> None:
    """A run's log line: under Hydra its job logging (console and <run_dir>/train.log), otherwise stdout."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        std_logging.getLogger("rlx").info(msg)
    else:
        print(msg, flush=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Temp file + fsync + os.replace: `path` holds the old text or the new, never a part of either."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_summary(run_dir: Path, summary: dict, failing: bool) -> None:
    """summary.json; while the run is failing, a failed write is only said: the run's own error is raised."""
    try:
        write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2, default=str))
    except OSError as e:
        if not failing:
            raise
        say(f"[run] summary.json could not be written either ({type(e).__name__}: {e}); the error below is "
            f"what stopped the run")


def _jsonable(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN/inf: written as null
    return v


class NullLogger:
    """The logger of ranks other than 0 under torchrun: they compute the same metrics and write nothing."""

    def __init__(self, run_id: str | None = None):
        self.run_id, self.sha = run_id, None

    def log(self, metrics: dict, step: int) -> None:
        pass

    def log_completions(self, rows: list[dict] | None, step: int) -> None:
        pass

    def log_prompts(self, examples: list, step: int) -> None:
        pass

    def summary(self, values: dict) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


class RunLogger:
    """`log(metrics, step)` writes one JSON line per call (with `step`) and the same dict to wandb."""

    def __init__(self, cfg, run_dir: Path, run_id: str | None, resume_step: int | None, code_dir: str | None = None):
        lc = cfg.logger  # its values were checked when preflight converted it (rlx.run.config)
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.completions_path = self.run_dir / "completions.jsonl"
        self.prompts_path = self.run_dir / "prompts.jsonl"  # the prompt ledger
        self.completions_cap = int(lc.get("completions_max_mb", 5.0) * 2**20)  # bytes
        self._table_bytes = 0  # completion-table bytes sent to wandb so far (capped like the file)
        for path in (self.path, self.completions_path, self.prompts_path):  # all are rows with a step
            if resume_step is not None and path.exists():  # rows after the checkpoint come again
                self._truncate_after(path, resume_step)
            elif resume_step is None and path.exists() and path.stat().st_size > 0:  # a fresh start in a used dir
                self._set_aside(path)
        self.sha, self.wandb, self.run_id = git_sha(code_dir), None, run_id
        if lc.mode != "disabled":
            import wandb

            config = OmegaConf.to_container(cfg, resolve=True)
            config["git_sha"] = self.sha
            os.environ.setdefault("WANDB_SILENT", "true")
            self.wandb = wandb.init(project=lc.project, entity=lc.entity, group=lc.group, name=lc.name,
                                    tags=list(lc.tags), config=config, dir=str(self.run_dir), mode=lc.mode, id=run_id,
                                    resume="allow" if run_id else None, reinit="finish_previous")
            self.run_id = self.wandb.id

    def _set_aside(self, path: Path) -> None:
        """Keep an earlier start's rows (it reached no checkpoint) under another name: each step is logged once."""
        n = 1
        while (self.run_dir / f"{path.stem}.prev-{n}.jsonl").exists():
            n += 1
        dest = self.run_dir / f"{path.stem}.prev-{n}.jsonl"
        os.replace(path, dest)
        say(f"[run] {path} held rows of an earlier start that reached no checkpoint; kept as {dest.name}, "
             f"this start writes a fresh {path.name}")

    def _truncate_after(self, path: Path, step: int) -> None:
        """On resume, drop the lines logged after the checkpoint (logged again), atomically; see parse_metrics."""
        rows, dropped = parse_metrics(path)
        if dropped:
            say(f"[resume] {dropped}")
        write_text_atomic(path, "".join(ln + "\n" for ln, row in rows if row["step"] <= step))

    def log(self, metrics: dict, step: int) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:  # every metric, always: the scaling fits and reports read it
            f.write(json.dumps(row) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def log_prompts(self, examples: list, step: int) -> None:
        """The prompt ledger, prompts.jsonl: stream indices and keys of the prompts step `step` consumed."""
        row = {"step": step, "index": [int(e.index) for e in examples], "key": [e.key for e in examples]}
        with self.prompts_path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def log_completions(self, rows: list[dict] | None, step: int) -> None:
        """A completion table, appended to completions.jsonl (oldest dumps dropped to half the cap when it would pass
        logger.completions_max_mb) and sent to wandb until the tables reach the cap (its history cannot shrink)."""
        if not rows:
            return
        lines = [json.dumps({k: _jsonable(v) for k, v in r.items()}) + "\n" for r in rows]
        new = sum(len(ln.encode()) for ln in lines)
        while lines and new > self.completions_cap:  # one dump over the whole cap: its first rows only
            new -= len(lines.pop().encode())
        size = self.completions_path.stat().st_size if self.completions_path.exists() else 0
        if size + new > self.completions_cap:
            self._drop_oldest_completions(self.completions_cap // 2 - new)
        with self.completions_path.open("a") as f:
            f.writelines(lines)
        if self.wandb is None:
            return
        if self._table_bytes + new > self.completions_cap:
            if self._table_bytes <= self.completions_cap:
                say(f"[log] step {step}: completion tables sent to wandb reached logger.completions_max_mb="
                    f"{self.completions_cap / 2**20:g}; no more tables go to wandb ({self.completions_path.name} "
                    f"keeps the newest)")
                self._table_bytes = self.completions_cap + 1
            return
        import wandb

        self._table_bytes += new
        cols = list(rows[0])
        table = wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows[: len(lines)]])
        self.wandb.log({"completions": table}, step=step)

    def _drop_oldest_completions(self, budget: int) -> None:
        """Keep the newest whole dumps of completions.jsonl that fit in `budget` bytes (atomic rewrite)."""
        by_step: dict[int, list[str]] = {}
        for ln in self.completions_path.read_text().splitlines(keepends=True):
            if ln.strip():
                by_step.setdefault(json.loads(ln)["step"], []).append(ln)
        kept, used = [], 0
        for step in sorted(by_step, reverse=True):
            n = sum(len(ln.encode()) for ln in by_step[step])
            if used + n > budget:
                break
            kept[:0], used = by_step[step], used + n
        write_text_atomic(self.completions_path, "".join(kept))

    def summary(self, values: dict) -> None:
        values = {k: _jsonable(v) for k, v in values.items()}
        if self.wandb is not None:
            for k, v in values.items():
                self.wandb.summary[k] = v

    def finish(self, exit_code: int = 0) -> None:
        if self.wandb is not None:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None
