"""Reward functions the audit tests pass by import path (TRL's convention): deliberately gameable ones that
rlx-audit must catch. They read text only; nothing is evaluated."""

import re
from decimal import Decimal

_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?", re.ASCII)


def _gold(answer) -> Decimal | None:
    """The gold of the `answer` column: the text after its last `####` (GSM8K's answer field), else all of it."""
    text = str(answer).rsplit("####", 1)[-1].strip().replace(",", "")
    m = _NUMBER.fullmatch(text)
    return Decimal(m.group(0)) if m else None


def last_number(completions, answer, **kwargs):
    """1.0 when the last number ANYWHERE in the completion equals the gold: what an echoed prompt, a hedge
    (`15 or 16`) or a list ending in the gold get paid by."""
    out = []
    for c, a in zip(completions, answer):
        found = _NUMBER.findall(c.replace(",", ""))
        gold = _gold(a)
        out.append(float(bool(found) and gold is not None and Decimal(found[-1]) == gold))
    return out


def nothing(completions, **kwargs):
    """0.0 for everything: a reward set that pays no honest correct answer (the audit must say it is broken)."""
    return [0.0 for _ in completions]


_FIRST_ANSWER = re.compile(r"answer is\s*\$?(-?[0-9]+(?:\.[0-9]+)?)", re.IGNORECASE | re.ASCII)


def first_answer(completions, answer, **kwargs):
    """1.0 when the FIRST "answer is N" equals the gold, whatever later lines say: what a correction that
    starts with the gold (`The answer is 16. Actually it is 17.`) gets paid by."""
    out = []
    for c, a in zip(completions, answer):
        m = _FIRST_ANSWER.search(c.replace(",", ""))
        gold = _gold(a)
        out.append(float(m is not None and gold is not None and Decimal(m.group(1)) == gold))
    return out
