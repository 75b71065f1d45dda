"""The benchmark's own readings of a completion, beside the task's reward (docs/eval.md, "Readings"): lm-eval's
two GSM8K filters (gsm8k.yaml, v0.4.13) compared by its `exact_match`, and MATH's math-verify, bounded.
"""

from __future__ import annotations

import re

from rlx.tasks.answers.stated import numeric_gold
from rlx.tasks.verify import default_verifier

STRICT, FLEXIBLE, MATH_VERIFY = "strict-match", "flexible-extract", "math-verify"
READINGS = (STRICT, FLEXIBLE, MATH_VERIFY)
INVALID = "[invalid]"  # lm-eval's RegexFilter fallback

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")  # gsm8k.yaml's regexes_to_ignore, applied in this order


def _regex_filter(text: str, pattern: re.Pattern, group_select: int) -> str:
    """lm-eval's RegexFilter on one response: findall, pick `group_select`, a tuple's first non-empty group."""
    found = pattern.findall(text)
    if not found:
        return INVALID
    match = found[group_select]
    if isinstance(match, tuple):
        match = next((m for m in match if m), INVALID)
    return match.strip()


def strict_match(text: str) -> str:
    """lm-eval's GSM8K strict-match extraction: the number after the first `#### `, else "[invalid]"."""
    return _regex_filter(text, _STRICT, 0)


def flexible_extract(text: str) -> str:
    """lm-eval's GSM8K flexible-extract extraction: the last number-like run in the text, else "[invalid]"."""
    return _regex_filter(text, _FLEXIBLE, -1)


def normalized(s: str) -> str:
    """An answer as lm-eval's exact_match compares it: gsm8k.yaml's regexes_to_ignore removed, lower case."""
    for pattern in _IGNORE:
        s = re.sub(pattern, "", s)
    return s.lower()


def exact_match(prediction: str, gold: str) -> bool:
    """lm-eval's exact_match as gsm8k.yaml configures it (ignore_case, its regexes_to_ignore)."""
    return normalized(prediction) == normalized(gold)


def readings_for(examples, configured=None) -> list[str]:
    """A set's readings: `configured` (task.readings), else GSM8K's two for plain-number golds, else math-verify."""
    if configured:
        bad = [r for r in configured if r not in READINGS]
        if bad:
            raise ValueError(f"task.readings: unknown reading(s) {bad}; known: {list(READINGS)}")
        return list(configured)
    if examples and all(numeric_gold(e.answer) is not None for e in examples):
        return [STRICT, FLEXIBLE]
    return [MATH_VERIFY]


def read(readings: list[str], completions: list[str], golds: list[str]) -> dict[str, list[dict]]:
    """{reading: [{"answer": what it extracted, "passed": bool}] per completion}."""
    out: dict[str, list[dict]] = {}
    for name in readings:
        if name == STRICT:
            answers = [strict_match(c) for c in completions]
        elif name == FLEXIBLE:
            answers = [flexible_extract(c) for c in completions]
        else:
            passed = default_verifier().score_text(list(zip(golds, completions)))
            out[name] = [{"answer": None, "passed": bool(p)} for p in passed]
            continue
        out[name] = [{"answer": a, "passed": exact_match(a, g)} for a, g in zip(answers, golds)]
    return out
