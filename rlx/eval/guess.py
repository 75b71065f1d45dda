"""One answer everywhere: how much of a held-out score a single repeated answer explains; it marks, never
changes a score (docs/eval.md, "One answer everywhere": the figures, and why MIN_SHARE and OVER_GOLD).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from rlx.eval.metrics import vote_key
from rlx.tasks.answers.readings import FLEXIBLE, INVALID, normalized

MIN_SHARE = 0.15  # of the problems: one answer given less often is no pattern on a 100-problem set
OVER_GOLD = 2  # given to at least this many times as many problems as it is the gold of


@dataclass(frozen=True)
class AnswerSpread:
    problems: int
    passes: int
    mode: str | None  # the most common answer (a number in plain form; None: no completion gave one)
    given: int  # problems answered with the mode
    gold: int  # problems whose gold is the mode
    mode_passes: int  # passes whose answer is the mode
    top_gold: str  # the set's most common gold
    beyond: float  # passes / problems over the problems whose gold is not top_gold (nan if there are none)

    @property
    def suspect(self) -> bool:
        if self.mode is None:
            return False
        many_passes = self.passes >= 2 and 2 * self.mode_passes > self.passes
        over_given = self.given >= MIN_SHARE * self.problems and self.given >= OVER_GOLD * self.gold
        return many_passes or over_given

    def cell(self) -> str:
        """`1 x 18 (gold of 15), 5 of 5 passes`, bold when suspect; `–` without an answer."""
        if self.mode is None:
            return "–"
        text = f"{self.mode} x {self.given} (gold of {self.gold}), {self.mode_passes} of {self.passes} passes"
        return f"**{text}**" if self.suspect else text

    def as_dict(self) -> dict:
        return {"mode": self.mode, "given": self.given, "gold": self.gold, "passes": self.passes,
                "mode_passes": self.mode_passes, "problems": self.problems, "top_gold": self.top_gold,
                "beyond": None if math.isnan(self.beyond) else self.beyond, "suspect": self.suspect}


def _plain(key) -> str:
    """A vote key as text: 4 for `4.`, `4.0` and `**4**`; 3/2 as 1.5; other text as it is."""
    if isinstance(key, Fraction):
        if key.denominator == 1:
            return str(key.numerator)
        return format(Decimal(key.numerator) / Decimal(key.denominator), "f")
    return str(key)


def row_answer(row: dict) -> str | None:
    """A completions.jsonl row's answer: its flexible-extract reading (normalized), else the task's extraction."""
    reading = (row.get("readings") or {}).get(FLEXIBLE)
    if reading:  # lm-eval's raw match (`2,` from "2, 2, 2"): compared after gsm8k.yaml's regexes_to_ignore
        answer = None if reading.get("answer") in (None, INVALID) else normalized(str(reading["answer"]))
        return answer if answer and any(c.isdigit() for c in answer) else None  # `....` is no number
    answer = row.get("answer")
    return None if answer is None else str(answer)


def best_constant(golds: list[str]) -> tuple[str, int]:
    """(the most common gold in plain form, how many problems have it; ties: the first seen)."""
    if not golds:
        raise ValueError("best_constant needs at least one gold")
    key, count = Counter(vote_key(g) for g in golds).most_common(1)[0]
    return _plain(key), count


def answer_spread(answers: list[str | None], golds: list[str], passed: list[bool]) -> AnswerSpread:
    """The spread of one set's greedy answers ([P] each; answers compared by vote_key, None is no vote)."""
    if not (len(answers) == len(golds) == len(passed)) or not golds:
        raise ValueError(f"answer_spread needs one answer, gold and verdict per problem; got {len(answers)}, "
                         f"{len(golds)}, {len(passed)}")
    keys = [None if a in (None, INVALID) else vote_key(a) for a in answers]  # lm-eval's "[invalid]": no answer
    gold_keys = [vote_key(g) for g in golds]
    votes = Counter(k for k in keys if k is not None)
    top_gold_key = Counter(gold_keys).most_common(1)[0][0]
    others = [p for p, g in zip(passed, gold_keys) if g != top_gold_key]
    beyond = sum(others) / len(others) if others else float("nan")
    top_gold = _plain(top_gold_key)
    if not votes:
        return AnswerSpread(len(golds), sum(passed), None, 0, 0, 0, top_gold, beyond)
    mode_key, given = votes.most_common(1)[0]
    return AnswerSpread(len(golds), sum(passed), _plain(mode_key), given,
                        sum(g == mode_key for g in gold_keys),
                        sum(p and k == mode_key for p, k in zip(passed, keys)), top_gold, beyond)


def spreads_of_rows(rows: list[dict]) -> dict[str, AnswerSpread]:
    """{set: answer_spread} of completions.jsonl rows (rlx-eval's format; greedy rows only), sets in file order."""
    by_set: dict[str, list[dict]] = {}
    for i, r in enumerate(rows):
        if r.get("kind", "greedy") == "greedy":
            missing = [k for k in ("gold", "passed") if k not in r]
            if missing:
                raise ValueError(f"row {i + 1} has no {' or '.join(missing)}: not an rlx-eval completions.jsonl row")
            by_set.setdefault(str(r.get("set", "default")), []).append(r)
    return {name: answer_spread([row_answer(r) for r in rs], [str(r["gold"]) for r in rs],
                                [bool(r["passed"]) for r in rs]) for name, rs in by_set.items()}
