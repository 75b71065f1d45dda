"""`rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR`: write SWEEP_DIR/report.md (also printed) and its PNGs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlx.report.build import build
from rlx.report.spec import available


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.report",
                                     description="a sweep's results in its paper's layout, with the published numbers")
    parser.add_argument("sweep_dir", type=Path, help="a sweep directory (job directories at any depth)")
    parser.add_argument("--layout", choices=available(),
                        help="the sweep or experiment whose report: block to use (default: the block the jobs' "
                             "configs carry, else the file named by their logger.group)")
    parser.add_argument("--spec", type=Path, default=None,
                        help="a YAML file with a report: block (rlx.report.spec), instead of --layout")
    parser.add_argument("--out", default="report.md", help="file name inside SWEEP_DIR (default report.md)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--base", type=Path, default=None,
                        help="a report of kind runs: the step-0 per-problem file (a completions.jsonl, a run's eval/step_0, "
                             "or the run) for runs without their own eval/step_0; checked against each run's step-0 "
                             "val/*")
    args = parser.parse_args(argv)
    try:
        md, pngs, doc = build(args.sweep_dir, args.layout, plots=not args.no_plots, base=args.base,
                              spec_file=args.spec)
    except ValueError as err:
        parser.error(str(err))
    out = args.sweep_dir / args.out
    out.write_text(md)
    saved = [out]
    if doc is not None:
        saved.append(out.with_suffix(".json"))
        saved[-1].write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(md)
    print("saved " + ", ".join(map(str, saved + pngs)))
    return 0
