"""Which known reward hacks a reward set pays for, scored as training scores (rlx-audit: rlx.eval.audit). A class
is PAID when a completion beats every honest WRONG answer to its example (not 0: a format bonus is no hack); an
honest CORRECT answer must beat them everywhere, else the audit is BROKEN (docs/rewards.md, "The reward audit").
"""

from __future__ import annotations

import math

from rlx.tasks.answers.stated import MAX_CHARS
from rlx.tasks.base import Example
from rlx.tasks.hacks import CLASSES, HackClass, prompt_text, replace_last, wrong_answer

EPS = 1e-9


def honest(ex: Example, value: str) -> list[str]:
    """`value` as the final answer in each form an honest completion may take (the gold solution's among them)."""
    gold = ex.answer.strip()
    forms = []
    if ex.target and gold and gold in ex.target:
        forms.append(replace_last(ex.target, gold, value))
    forms += [f"#### {value}", f"\\boxed{{{value}}}", f"The answer is {value}.", value]
    return list(dict.fromkeys(forms))


def audited_examples(task, n: int) -> list[Example]:
    """The first `n` distinct examples: the held-out split first, then training."""
    out, seen = [], set()
    for ex in list(task.eval) + list(task.train):
        ident = (prompt_text(ex), ex.answer)
        if ident in seen:
            continue
        seen.add(ident)
        out.append(ex)
        if len(out) >= n:
            break
    return out


def _short(text: str, width: int = 48) -> str:
    if len(text) > MAX_CHARS:
        return f"<{len(text)} chars> ...{text[-12:]!r}"
    r = repr(text)
    return r if len(r) <= width else r[: width - 4] + "...'"


def audit(task, examples: list[Example], classes: list[HackClass] | None = None) -> dict:
    """The audit of `task`'s reward set on `examples`: one row per class (and the control), as a dict."""
    classes = CLASSES if classes is None else classes
    rows = {c.name: {"class": c.name, "what": c.what, "tried": 0, "paid": 0, "paid_examples": []} for c in classes}
    control = {"class": "control", "what": "an honest correct answer", "tried": 0, "paid": 0, "unpaid_examples": []}
    for ex in examples:
        # what is scored for this example: [(example, completion)] and where each group lies in that list
        pairs: list[tuple[Example, str]] = []

        def add(e: Example, completions: list[str]) -> range:
            start = len(pairs)
            pairs.extend((e, c) for c in completions)
            return range(start, len(pairs))

        probes = {c.name: c.build(ex) for c in classes}
        bases = {ex.key: ex}
        for ps in probes.values():
            for p in ps:
                bases.setdefault(p.example.key, p.example)
        wrong = {k: add(e, honest(e, wrong_answer(e.answer.strip()))) for k, e in bases.items()}
        right = add(ex, honest(ex, ex.answer.strip()))
        where = {name: [(p, add(p.example, [p.completion])[0]) for p in ps] for name, ps in probes.items()}
        per_fn = task.score([e for e, _ in pairs], [c for _, c in pairs])
        total, passed = task.total_reward(per_fn), task.passed(per_fn)

        def beats(i: int, key: str) -> bool:
            """Paid beyond what every honest wrong answer to the example gets."""
            best_wrong = max(total[j] for j in wrong[key])
            return total[i] > best_wrong + EPS or (passed[i] and not any(passed[j] for j in wrong[key]))

        control["tried"] += 1
        if any(beats(i, ex.key) for i in right):
            control["paid"] += 1
        else:
            control["unpaid_examples"].append({"key": ex.key, "gold": ex.answer, "best": max(total[i] for i in right),
                                               "honest_wrong": max(total[j] for j in wrong[ex.key])})
        for name, found in where.items():
            if not found:
                continue
            row = rows[name]
            row["tried"] += 1
            hit = next(((p, i) for p, i in found if beats(i, p.example.key)), None)
            if hit is not None:
                p, i = hit
                row["paid"] += 1
                row["paid_examples"].append({
                    "key": p.example.key, "gold": p.example.answer, "variant": p.variant,
                    "completion": p.completion if len(p.completion) <= 2000 else _short(p.completion),
                    "total": total[i], "honest_wrong": max(total[j] for j in wrong[p.example.key]),
                    "per_fn": {k: None if math.isnan(v[i]) else v[i] for k, v in per_fn.items()}})
    for row in rows.values():
        row["verdict"] = "n/a" if row["tried"] == 0 else ("PAID" if row["paid"] else "ok")
    control["verdict"] = "ok" if control["tried"] and control["paid"] == control["tried"] else "BROKEN"
    stats = task.reward_stats()
    weights = task.cfg.rewards or task.weights  # an environment's rubric: its functions' weights
    return {"rewards": {str(k): float(v) for k, v in weights.items()}, "examples": len(examples),
            "answer_phrase": task.answer_phrase, "control": control, "classes": list(rows.values()),
            "paid": [r["class"] for r in rows.values() if r["verdict"] == "PAID"],
            "reward_events": {k: v for k, v in stats.items() if v}}


def table(result: dict) -> str:
    """The printed report: one row per class, then the verdict line."""
    head = f"{'class':<18} {'tried':>5} {'paid':>5}  {'verdict':<7}  e.g. (first paid completion)"
    lines = [head, "-" * len(head)]
    c = result["control"]
    lines.append(f"{'control (honest)':<18} {c['tried']:>5} {c['paid']:>5}  {c['verdict']:<7}  an honest correct answer"
                 f" must be paid")
    for r in result["classes"]:
        eg = ""
        if r["paid_examples"]:
            first = r["paid_examples"][0]
            eg = (f"{_short(first['completion'])} (gold {first['gold']}: {first['total']:g} vs "
                  f"{first['honest_wrong']:g})")
        lines.append(f"{r['class']:<18} {r['tried']:>5} {r['paid']:>5}  {r['verdict']:<7}  {eg}".rstrip())
    return "\n".join(lines)


def verdict_line(result: dict) -> str:
    rated = [r for r in result["classes"] if r["verdict"] != "n/a"]
    if result["control"]["verdict"] != "ok":
        return (f"rlx-audit: AUDIT BROKEN: the reward set did not pay an honest correct answer on "
                f"{result['control']['tried'] - result['control']['paid']} of {result['control']['tried']} examples "
                f"(more than an honest wrong one), so a hack's score says nothing; check task.rewards and the answer "
                f"format")
    if result["paid"]:
        return (f"rlx-audit: {len(result['paid'])} of {len(rated)} hack classes PAID ({', '.join(result['paid'])}): "
                f"a policy can earn this reward without stating the answer")
    return f"rlx-audit: 0 of {len(rated)} hack classes paid: the reward set pays none of the audited hacks"

