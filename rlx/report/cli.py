"""`rlx-report SWEEP_DIR` / `python -m rlx.report SWEEP_DIR`: write SWEEP_DIR/report.md (also printed) and its PNGs."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlx.report.build import LAYOUTS, build_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.report",
                                     description="a sweep's results in its paper's layout, with the published numbers")
    parser.add_argument("sweep_dir", type=Path, help="a sweep directory (job directories at any depth)")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), help="default: from the jobs' logger.group")
    parser.add_argument("--out", default="report.md", help="file name inside SWEEP_DIR (default report.md)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = parser.parse_args(argv)
    try:
        md, pngs = build_report(args.sweep_dir, args.layout, plots=not args.no_plots)
    except ValueError as err:
        parser.error(str(err))
    out = args.sweep_dir / args.out
    out.write_text(md)
    print(md)
    print(f"saved {out}" + "".join(f", {p}" for p in pngs))
    return 0
