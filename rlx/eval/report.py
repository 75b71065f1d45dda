"""rlx-eval's outputs: results.json (every figure), results.md (the table), completions.jsonl (every completion
with its prompt, reward, verdict, answer, gold and readings)."""

from __future__ import annotations

import json
from pathlib import Path

from rlx.eval.guess import answer_spread
from rlx.eval.metrics import set_metrics
from rlx.tasks.answers.readings import FLEXIBLE
from rlx.tasks.answers import final_answer


def summarize(results: list, ks: list[int]) -> dict:
    """{set name: {prompts, acc, [mean_at_n, pass_at_k, maj_at_k]}}, and several sets' unweighted "mean"."""
    sets = {}
    for r in results:
        m = {"prompts": len(r.examples), "acc": r.acc, "readings": r.reading_acc(), "answers": greedy_spread(r)}
        if r.k:
            m.update(set_metrics(r.samples_passed, [final_answer(t) for t in r.samples], r.k, ks))
        sets[r.name] = m
    if len(sets) > 1:
        rows = list(sets.values())
        shared = set.intersection(*(set(m["readings"]) for m in rows))
        avg = {"prompts": sum(m["prompts"] for m in rows), "acc": sum(m["acc"] for m in rows) / len(rows),
               "readings": {k: sum(m["readings"][k] for m in rows) / len(rows) for k in sorted(shared)}}
        if "mean_at_n" in rows[0]:
            avg["mean_at_n"] = sum(m["mean_at_n"] for m in rows) / len(rows)
            for key in ("pass_at_k", "maj_at_k"):
                avg[key] = {k: sum(m[key][k] for m in rows) / len(rows) for k in ks}
        sets["mean"] = avg
    return sets


def greedy_spread(r) -> dict:
    """rlx.eval.guess's spread of one set's greedy answers (the flexible-extract number where read)."""
    flexible = (r.greedy_readings or {}).get(FLEXIBLE)
    answers = [row["answer"] for row in flexible] if flexible else [final_answer(t) for t in r.greedy]
    return answer_spread(answers, [e.answer for e in r.examples], r.greedy_passed).as_dict()


def markdown(report: dict) -> str:
    """One row per eval set: prompts, greedy accuracy, the benchmark's readings, mean@n, pass@k and maj@k."""
    sets, n, ks = report["sets"], report["sampling"]["n"], report["ks"]
    readings = sorted({k for m in sets.values() for k in m.get("readings", {})})
    head = ["set", "prompts", "greedy acc"] + [f"greedy {r}" for r in readings] + ([f"mean@{n}"] + [f"pass@{k}" for k in ks] + [f"maj@{k}" for k in ks]
                                               if n else [])
    lines = [f"# rlx-eval: {report['source']['kind']} {report['source'].get('path') or ''} ({report['source']['label']})",
             "", f"Task `{report['task']}`, model `{report['model']}`, greedy + {n} samples per prompt "
             f"({_sampling_text(report['sampling'])}); seed {report['seed']}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in sets.items():
        cells = [name, str(m["prompts"]), f"{m['acc']:.4f}"] + [
            f"{m['readings'][r]:.4f}" if r in m.get("readings", {}) else "-" for r in readings]
        if n:
            cells += [f"{m['mean_at_n']:.4f}"] + [f"{m['pass_at_k'][k]:.4f}" for k in ks] + [f"{m['maj_at_k'][k]:.4f}" for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    spread = [(name, m["answers"]) for name, m in sets.items() if m.get("answers") and m["answers"]["mode"] is not None]
    if spread:
        lines += ["", "One answer everywhere? (rlx.eval.guess; bold: the most common answer explains over half the "
                  "passes, or was given to 15%+ of the problems and to twice as many as it is the gold of)", "",
                  "| set | most common greedy answer | given to | gold of | passes that are it | "
                  "acc beyond the most common gold |", "|---|---|---|---|---|---|"]
        for name, a in spread:
            mark = "**" if a["suspect"] else ""
            lines.append(f"| {name} | {mark}{a['mode']}{mark} | {a['given']} of {a['problems']} | {a['gold']} | "
                         f"{a['mode_passes']} of {a['passes']} | "
                         + ("–" if a["beyond"] is None else f"{a['beyond']:.4f} (gold {a['top_gold']} left out)") + " |")
    return "\n".join(lines) + "\n"


def _sampling_text(s: dict) -> str:
    sampled = s.get("samples")
    text = f"up to {s['greedy']['max_tokens']} tokens"
    if sampled:
        text += f"; samples at temperature {sampled['temperature']}, top_p {sampled['top_p']}, top_k {sampled['top_k']}"
    return text


def completion_rows(results: list):
    """One row per completion: greedy first, then the samples of each prompt in order."""
    for r in results:
        for i, e in enumerate(r.examples):
            row = _row(r.name, i, "greedy", 0, e, r.greedy[i], r.greedy_reward[i], r.greedy_passed[i],
                       _at(r.greedy_readings, i))
            if r.greedy_episodes is not None and r.greedy_episodes[i] is not None:
                row["episode"] = r.greedy_episodes[i]  # the whole episode; `completion` is its last turn
            yield row
        for j, text in enumerate(r.samples or []):
            e = r.examples[j // r.k]
            yield _row(r.name, j // r.k, "sample", j % r.k, e, text, r.samples_reward[j], r.samples_passed[j],
                       _at(r.samples_readings, j))


def _at(readings: dict | None, i: int) -> dict:
    return {name: rows[i] for name, rows in (readings or {}).items()}


def _row(name, i, kind, sample, e, text, reward, passed, readings) -> dict:
    """`passed` is the task's verdict (its rewards); `readings` the benchmark's ({reading: {answer, passed}})."""
    return {"set": name, "index": i, "kind": kind, "sample": sample, "key": e.key, "prompt": e.prompt,
            "completion": text, "reward": reward, "passed": bool(passed), "answer": final_answer(text), "gold": e.answer,
            "readings": readings}


def write(out_dir: Path, report: dict, results: list) -> dict[str, Path]:
    """results.json, results.md and completions.jsonl in `out_dir` (replacing an earlier evaluation's)."""
    from rlx.run.logging import write_text_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "md": out_dir / "results.md", "jsonl": out_dir / "completions.jsonl"}
    write_text_atomic(paths["json"], json.dumps(report, indent=2, default=str) + "\n")
    write_text_atomic(paths["md"], markdown(report))
    write_text_atomic(paths["jsonl"], "".join(json.dumps(row, default=str) + "\n" for row in completion_rows(results)))
    return paths
