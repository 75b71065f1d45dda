"""The QeRL speed sweep, launched with its one command at smoke size, and its report's ratios."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import report as R
from rlx.run.records import read_metrics
from tests.sweeps.sweep_helpers import SMOKE, job_dirs, overrides, run_sweep, summary
from tests.report.test_report import table_row

pytestmark = pytest.mark.integration


def test_qerl_speed_runs_every_format_and_batch_and_reports_ratios(tmp_path):
    run_sweep("qerl_speed", tmp_path, SMOKE + ["train.steps=3"])
    jobs = job_dirs(tmp_path)
    seen = {(overrides(j)["quant"], int(overrides(j)["rollout.prompts_per_step"])) for j in jobs}
    assert seen == {(f, p) for f in ("none", "nf4", "mxfp4", "nvfp4") for p in (1, 4)}
    assert all(summary(j)["status"] == "finished" for j in jobs)

    def tokens_per_s(job):  # independent of rlx.report: median over steps 2.. of the logged throughput
        rows = read_metrics(job)
        return float(np.median([r["perf/tokens_per_s"] for r in rows if r["step"] >= 2]))

    tps = {(overrides(j)["quant"], 2 * int(overrides(j)["rollout.prompts_per_step"])): tokens_per_s(j) for j in jobs}
    md, _ = R.build_report(tmp_path, plots=False)
    header = table_row(md, "base format")
    for fmt in ("none", "nf4", "mxfp4", "nvfp4"):
        row = dict(zip(header, table_row(md, fmt)))
        for b in (2, 8):
            assert row[f"rollout tokens/s, batch {b}"] == f"{tps[(fmt, b)]:.0f} (n=1)"
            assert row[f"x vs 16-bit, batch {b}"] == f"{tps[(fmt, b)] / tps[('none', b)]:.2f}"
