"""Each arm's learning rate, chosen on the training side of a tuning sweep (stage 1 of
sweeps/smollm2_qerl_tuned.yaml): `python -m rlx.report.select_lr STAGE1_DIR` (rlx-select-lr; docs/sweeps.md, "Two-stage
tuning"). Prints the choices and the stage-2 command; exit status 1 while an arm is undecided."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlx.report.lr_choice import LAST, METRIC, expected_grid, select, selection_table, stage2_command


def main(argv: list[str] | None = None) -> int:
    from rlx.report.qerl import infer_qerl
    from rlx.report.sweeps import papers
    from rlx.run.records import read_sweep
    from rlx.sweeps.spec import arm_axis

    ap = argparse.ArgumentParser(prog="python -m rlx.report.select_lr", description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path, help="the tuning sweep's directory (its run directories at any depth)")
    ap.add_argument("--metric", default=METRIC, help=f"training metric to maximize (default {METRIC})")
    ap.add_argument("--last", type=int, default=LAST, help=f"steps at the end of each run it averages (default {LAST})")
    ap.add_argument("--seeds", default="1,2,3", help="seeds of the stage-2 command (default 1,2,3)")
    ap.add_argument("--stage2-dir", default=None, help="stage 2's sweep directory (default: SWEEP_DIR/../stage2)")
    args = ap.parse_args(argv)
    if args.metric.startswith("val/"):
        ap.error(f"--metric {args.metric}: the lr is chosen on the training side, never on held-out metrics")
    if args.last < 1:
        ap.error(f"--last must be >= 1, got {args.last}")
    if not args.sweep_dir.is_dir():
        ap.error(f"{args.sweep_dir} is not a directory")
    try:
        jobs = read_sweep(args.sweep_dir, marker=".hydra/config.yaml")
    except ValueError as e:
        ap.error(str(e))
    if not jobs:
        ap.error(f"no run directories (with .hydra/config.yaml) under {args.sweep_dir}")
    groups = sorted({str(j.get("logger.group")) for j in jobs})
    sweep = groups[0] if len(groups) == 1 else None
    arm_key = arm_axis(sweep)[0] if sweep else None
    choices = select(jobs, infer_qerl, args.metric, args.last, arm_key, expected_grid(sweep) if sweep else None)
    labels = papers()["qerl"]["labels"]
    print(f"# Learning rate per arm: {args.sweep_dir} ({len(jobs)} runs)\n")
    print("\n".join(selection_table(choices, labels, args.metric, args.last)))
    stage2 = args.stage2_dir or str(args.sweep_dir.parent / "stage2")
    cmd = stage2_command(choices, sweep, arm_key, stage2, args.seeds) if sweep and arm_key else None
    if cmd:
        print(f"\nStage 2 (seeds {args.seeds} at each arm's lr):\n\n    {cmd}")
    undecided = [a for a, c in choices.items() if not c.decided]
    if undecided:
        print(f"\n{len(undecided)} arm(s) undecided: {', '.join(undecided)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
