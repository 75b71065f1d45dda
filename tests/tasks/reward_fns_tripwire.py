"""A gameable reward the tripwire test trains on by import path (tests/tasks/test_tripwires.py)."""

import re

from rlx.tasks.answers.readings import INVALID, strict_match

_DIGIT = re.compile(r"[0-9]")


def no_answer(completions, **kwargs):
    """1.0 for every completion with no `#### N` line and no digit on its last line (a truncated working, an
    expression cut off at `=`, words): a reward that pays for stating nothing, as a careless checker might."""
    def last_line(c):
        lines = [ln for ln in c.splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    return [float(strict_match(c) == INVALID and not _DIGIT.search(last_line(c))) for c in completions]
