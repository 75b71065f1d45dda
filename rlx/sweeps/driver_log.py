"""The predictive driver's own wandb run (rlx.sweeps.rounds): per round, each arm's fit and whether it runs on."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from rlx.run.config import LoggerConfig
from rlx.sweeps.rule import Decision


class DriverLog:
    """The driver's wandb run (docs/predictive.md, "wandb"); a restarted driver appends to the same run."""

    def __init__(self, name: str, sweep_dir: str | Path, overrides: list[str]):
        default = LoggerConfig()
        kv = {o.lstrip("+").split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
        self.mode = "disabled" if kv.get("logger") == "disabled" else kv.get("logger.mode", default.mode)
        self.run = None
        if self.mode == "disabled":
            return
        import wandb  # a driver that does not log never imports it

        id_file = Path(sweep_dir) / "predictive_wandb_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else None
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(project=kv.get("logger.project", default.project), entity=kv.get("logger.entity", default.entity),
                              group=kv.get("logger.group", name), job_type="predictive", name=f"{name}-predictive",
                              dir=str(sweep_dir), mode=self.mode, id=run_id, resume="allow" if run_id else None,
                              reinit="finish_previous", config={"sweep": name, "sweep_dir": str(sweep_dir)})
        id_file.write_text(self.run.id)

    def log_round(self, round_: int, decisions: list[Decision], records: list[dict]) -> None:
        if self.run is None:
            return
        import wandb

        row: dict = {"predictive/round": round_, "predictive/arms_running": sum(d.decision == "continue" for d in decisions)}
        for d in decisions:
            for key in ("A", "A_lo", "A_hi", "B"):
                if getattr(d, key) is not None:
                    row[f"predictive/{d.arm}/{key}"] = getattr(d, key)
            row[f"predictive/{d.arm}/budget"] = d.budget
            row[f"predictive/{d.arm}/stopped"] = int(d.decision == "stop")
        cols = list(asdict(decisions[0])) if decisions else []
        row["predictive/decisions"] = wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in records])
        self.run.log(row, step=round_)

    def finish(self, exit_code: int) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
