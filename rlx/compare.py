"""`python -m rlx.compare DIR`: compare the recipes (or runs) of a sweep directory from their logs.

Prints a markdown table (final reward, A +/- interval, B, C_mid, steps, compute per recipe) and
ScaleRL's verdicts, and saves DIR/compare.md, DIR/compare.png and DIR/compare.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlx.scaling.cli import add_options, config_from_args
from rlx.scaling.compare import compare_dir, write_comparison
from rlx.scaling.logs import find_runs, read_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.compare", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="sweep directory (run directories at any depth)")
    parser.add_argument("--by", choices=("recipe", "run"), default="recipe",
                        help="one row per recipe (seeds pooled) or per run (default recipe)")
    parser.add_argument("--prefix", default="compare", help="output file names: DIR/<prefix>.{md,png,json}")
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        runs = [read_run(p) for p in find_runs(args.dir)]
        cfg = config_from_args(args, runs)
        comparison = compare_dir(args.dir, cfg, by=args.by, kind=args.fit)
    except ValueError as err:
        parser.error(str(err))
    md, png, js = write_comparison(comparison, args.prefix)
    print(comparison.markdown())
    print(f"saved {md}, {png}, {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
