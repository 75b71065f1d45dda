"""What a training process keeps around its loop: the logger (rank 0's; NullLogger elsewhere), the progress bar
or step lines, and summary.json on the way out, whether the run ended or failed."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from rlx.run import distributed as dist
from rlx.run.lock import RunDirBusy
from rlx.run.logging import NullLogger, RunLogger, say, write_summary, write_text_atomic


@dataclass
class Session:
    cfg: object
    run_dir: Path
    world: dist.World
    logger: object  # RunLogger on rank 0, else NullLogger
    summary: dict = field(default_factory=dict)  # summary.json
    progress: object = None  # the tqdm bar (train.progress, rank 0), once the step-0 evaluation is done
    last_acc: float = math.nan  # the latest held-out accuracy (the bar shows it)
    exit_code: int = 1

    @classmethod
    def open(cls, cfg, run_dir: Path, world: dist.World, run_id: str | None, start_step: int) -> Session:
        """The session of a run that starts after `start_step` (0: a fresh run), continuing wandb run `run_id`."""
        if world.is_main:
            logger = RunLogger(cfg, run_dir, run_id, start_step if start_step > 0 else None,
                               code_dir=HydraConfig.get().runtime.cwd if HydraConfig.initialized() else None)
        else:
            logger = NullLogger(run_id)
        return cls(cfg, Path(run_dir), world, logger,
                   summary={"status": "running", "git_sha": logger.sha, "wandb_run_id": logger.run_id})

    def begin(self, acc_base: float, start_step: int) -> None:
        """The step-0 accuracy is known: it goes into the summary, and the bar starts."""
        self.summary["val/acc_base"] = self.last_acc = acc_base
        if self.cfg.train.progress and self.world.is_main:
            from tqdm import tqdm

            self.progress = tqdm(total=self.cfg.train.steps, initial=start_step, desc="rl", dynamic_ncols=True)

    def log(self, step: int, m: dict, rows: list | None, consumed: list) -> None:
        """Step `step`'s metrics, completion-table rows (None unless due) and consumed prompts; the bar or a line."""
        self.logger.log(m, step=step)
        self.logger.log_completions(rows, step)
        self.logger.log_prompts(consumed, step)
        self.last_acc = m.get("val/acc", self.last_acc)
        if self.progress is not None:
            self.progress.update(1)
            self.progress.set_postfix(reward=f"{m['train/reward/mean']:.3f}", acc=f"{self.last_acc:.3f}")
        elif step % self.cfg.train.log_every == 0:
            say(f"[step {step}/{self.cfg.train.steps}] reward {m['train/reward/mean']:.3f} "
                f"({m['timing_s/step']:.2f}s/step)")

    def finish(self, summary: dict) -> None:
        self.summary.update(summary)
        self.exit_code = 0

    def fail(self, e: BaseException) -> None:
        error = f"{type(e).__name__}: {e}"
        if self.world.distributed:  # a peer's crash reaches this rank as a broken collective
            error = f"rank {self.world.rank}: {error} (if another rank failed first, torchrun's 'Root Cause' names it)"
        self.summary.update({"status": "failed", "error": error})

    def close(self, t_start: float) -> None:
        """Write the summary (rank 0) and close the logger; `t_start` is moved back by earlier processes' wall time."""
        if self.progress is not None:
            self.progress.close()
        self.summary["wall_s"] = time.time() - t_start
        if self.world.distributed:
            self.summary["world_size"] = self.world.size
        if self.world.is_main:
            write_summary(self.run_dir, self.summary, failing=self.exit_code != 0)
        self.logger.summary({k: v for k, v in self.summary.items() if isinstance(v, (int, float, str)) and v is not None})
        self.logger.finish(self.exit_code)


def sweep_job_failed(run_dir: Path, e: Exception) -> None:
    """A sweep job that died while building gets a failed summary.json (unless another process holds it)."""
    summary = Path(run_dir) / "summary.json"
    if not summary.exists() and not isinstance(e, RunDirBusy):
        write_text_atomic(summary, json.dumps({"status": "failed", "error": f"{type(e).__name__}: {e}"}, indent=2))
