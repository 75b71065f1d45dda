"""`python -m rlx.eval.regrade FILE_OR_RUN ... [--strict] [--md OUT]`: score completions already written
under today's rules, without generating anything.

rlx-eval's completions.jsonl, or a training run's (golds rebuilt from its task); docs/rewards.md, "Re-graded".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlx.tasks.answers.readings import FLEXIBLE, STRICT, read
from rlx.tasks.base import Example
from rlx.tasks.answers.stated import numeric_gold, read_stated


def _user_text(prompt: str) -> str:
    """The user turn of a chat-rendered prompt (ChatML), else the prompt itself."""
    start = prompt.rfind("<|im_start|>user\n")
    if start < 0:
        return prompt
    body = prompt[start + len("<|im_start|>user\n"):]
    return body.split("<|im_end|>", 1)[0]


def golds_from_run(run_dir: Path, overrides: list[str] | None = None) -> dict[str, str]:
    """{prompt text: gold} of the run's task, rebuilt from summary.json's config, else from `overrides`."""
    from omegaconf import OmegaConf

    from rlx.eval.source import base_config
    from rlx.tasks import build_task

    summary = run_dir / "summary.json"
    config = json.loads(summary.read_text()).get("config") if summary.is_file() else None
    if config is not None:
        node = OmegaConf.create(config["task"])
    elif overrides:
        node = base_config(overrides).task
    else:
        raise ValueError(f"{run_dir}: its rows carry no gold and it recorded no config (summary.json) to rebuild "
                         f"the task from; name the run's config: --config experiment=... [key=value ...]")
    task = build_task(node)
    return {e.prompt: e.answer for e in task.train + task.eval}


def load(target: Path, overrides: list[str] | None = None) -> tuple[list[dict], str]:
    """(rows with `completion`, `gold` and the recorded `passed`, what they are)."""
    path = target / "completions.jsonl" if target.is_dir() else target
    if not path.is_file():
        raise FileNotFoundError(f"{target}: no completions.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if rows and "gold" in rows[0]:
        return [r for r in rows if r.get("kind", "greedy") == "greedy"], "rlx-eval greedy completions"
    golds = golds_from_run(path.parent, overrides)
    out = []
    for r in rows:
        gold = golds.get(_user_text(r["prompt"]))
        if gold is None:
            raise ValueError(f"{path}: a row's prompt matches no example of the run's task: {r['prompt'][:80]!r}")
        out.append({**r, "gold": gold})
    return out, "training samples"


def regrade(rows: list[dict], loose: bool = True) -> dict:
    """Passes over the rows: recorded, stated_answer's, each reading's, and recorded ones that fail (by flaw)."""
    texts, golds = [r["completion"] for r in rows], [r["gold"] for r in rows]
    readings = read([STRICT, FLEXIBLE], texts, golds)
    out = {"rows": len(rows), "recorded": 0, "stated": 0, STRICT: 0, FLEXIBLE: 0, "recorded_unstated": {}}
    for i, (text, gold) in enumerate(zip(texts, golds)):
        g = numeric_gold(gold)
        r = read_stated(text, loose)
        ok = g is not None and r.value == g
        out["recorded"] += bool(rows[i]["passed"])
        out["stated"] += ok
        out[STRICT] += readings[STRICT][i]["passed"]
        out[FLEXIBLE] += readings[FLEXIBLE][i]["passed"]
        if rows[i]["passed"] and not ok:
            why = r.flaw or "other number"
            out["recorded_unstated"][why] = out["recorded_unstated"].get(why, 0) + 1
    return out


def markdown(results: dict[str, dict]) -> str:
    lines = ["| file | rows | recorded passes | stated_answer | strict-match | flexible-extract | recorded passes "
             "that fail stated_answer (why) |", "|---|---|---|---|---|---|---|"]
    for name, m in results.items():
        why = ", ".join(f"{k} {v}" for k, v in sorted(m["recorded_unstated"].items(), key=lambda kv: -kv[1])) or "-"
        lines.append(f"| {name} | {m['rows']} | {m['recorded']} | {m['stated']} | {m[STRICT]} | {m[FLEXIBLE]} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, dict]:
    ap = argparse.ArgumentParser(prog="rlx-regrade", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="completions.jsonl files or run directories")
    ap.add_argument("--strict", action="store_true", help="stated_answer without the loose reading (#### and "
                    "boxes only); default: loose, as for chat prompts")
    ap.add_argument("--config", nargs="*", default=None, help="Hydra overrides composing the task of runs that "
                    "recorded no config (their samples carry no gold)")
    ap.add_argument("--md", default=None, help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    results = {}
    try:
        for p in args.paths:
            rows, what = load(Path(p), args.config)
            results[p] = {**regrade(rows, loose=not args.strict), "what": what}
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"rlx-regrade: error: {e}") from None
    table = markdown(results)
    print(table, end="")
    if args.md:
        from rlx.run.logging import write_text_atomic

        write_text_atomic(Path(args.md), table)
    return results


if __name__ == "__main__":
    main()
