"""`python -m rlx.eval.paired BASE.jsonl RUN.jsonl [RUN.jsonl ...]`: a run's greedy accuracy against the
base's on the same problems, from rlx-eval's completions.jsonl files.

The interval is the paired one over problems: d_i = passed_run(i) - passed_base(i), mean(d) +- 1.96 sd(d) /
sqrt(n): "did this run beat the base on these problems", one run at a time (across seeds: rlx.report's).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


VERDICTS = ("passed", "stated", "strict-match", "flexible-extract")


def verdict(row: dict, by: str = "passed") -> bool:
    """A row's verdict: the recorded `passed`, `stated` (today's rule, loose), or a benchmark reading."""
    if by == "passed":
        return bool(row["passed"])
    if by == "stated":
        from rlx.tasks.answers.stated import numeric_gold, read_stated

        gold = numeric_gold(row["gold"])
        return gold is not None and read_stated(row["completion"]).value == gold
    if by in (row.get("readings") or {}):
        return bool(row["readings"][by]["passed"])
    from rlx.tasks.answers.readings import read

    return bool(read([by], [row["completion"]], [row["gold"]])[by][0]["passed"])


def greedy_passed(path: Path, by: str = "passed") -> dict[tuple[str, int], bool]:
    """(eval set, problem index) -> the greedy completion's verdict (`verdict`)."""
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "greedy":
            out[(r["set"], int(r["index"]))] = verdict(r, by)
    if not out:
        raise ValueError(f"{path}: no greedy completion (run rlx-eval, which writes them)")
    return out


def paired_gain(base: dict, run: dict) -> dict:
    """Accuracies (%), the gain (points) with its paired 95% interval, problems gained / lost."""
    if base.keys() != run.keys():
        raise ValueError(f"the two files score different problems ({len(base)} vs {len(run)}, "
                         f"{len(base.keys() ^ run.keys())} not in both): evaluate both on the same eval sets")
    d = [int(run[k]) - int(base[k]) for k in sorted(base)]
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least 2 problems")
    mean = sum(d) / n
    half = 1.96 * math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
    return {"n": n, "base_acc": 100 * sum(base.values()) / n, "run_acc": 100 * sum(run.values()) / n,
            "gain": 100 * mean, "low": 100 * (mean - half), "high": 100 * (mean + half),
            "gained": sum(x > 0 for x in d), "lost": sum(x < 0 for x in d)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rlx.eval.paired", description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="the base model's completions.jsonl (rlx-eval without a run)")
    ap.add_argument("runs", type=Path, nargs="+", help="each run's completions.jsonl (rlx-eval RUN)")
    ap.add_argument("--by", default="passed", choices=VERDICTS, help="the verdict compared: the recorded `passed` "
                    "(default), today's `stated` rule, or a benchmark reading (docs/eval.md)")
    args = ap.parse_args(argv)
    base = greedy_passed(args.base, args.by)
    print("| run | problems | base acc (%) | run acc (%) | gain (points) [paired 95%] | gained / lost |")
    print("|---|---|---|---|---|---|")
    for path in args.runs:
        g = paired_gain(base, greedy_passed(path, args.by))
        print(f"| {path} | {g['n']} | {g['base_acc']:.1f} | {g['run_acc']:.1f} | {g['gain']:+.1f} "
              f"[{g['low']:+.1f}, {g['high']:+.1f}] | {g['gained']} / {g['lost']} |")


if __name__ == "__main__":
    main()
