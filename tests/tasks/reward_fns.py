"""Reward functions the tests pass by import path (TRL's convention). They record their calls in a
file named by RLX_TEST_REWARD_LOG, since they run in the reward worker process, not the test's."""

import json
import os
import time

IMPORTED_AT = time.time()  # when the reward worker that runs these imported them (its start-up)


def _record(name, completions, kwargs):  # kwargs: what the function got besides `completions`
    path = os.environ.get("RLX_TEST_REWARD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"fn": name, "n": len(completions), "kwargs": sorted(kwargs),
                                "answer": kwargs.get("answer"), "level": kwargs.get("level")}, default=str) + "\n")


def matches_answer(completions, answer, **kwargs):
    """1.0 where the completion is the answer column's value; None where the answer is 'skip'."""
    _record("matches_answer", completions, {"answer": answer, **kwargs})
    return [None if a == "skip" else float(c.strip() == str(a).strip()) for c, a in zip(completions, answer)]


def short(completions, **kwargs):
    _record("short", completions, kwargs)
    return [1.0 if len(c) <= 3 else 0.0 for c in completions]


def hangs(completions, **kwargs):
    while True:  # a reward bug: never returns
        time.sleep(0.1)


def stamp(completions, **kwargs):
    """0.0 each; records when the worker answering it was started (its import time) and its pid."""
    path = os.environ.get("RLX_TEST_REWARD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"fn": "stamp", "imported": IMPORTED_AT, "pid": os.getpid()}) + "\n")
    return [0.0 for _ in completions]


def raises(completions, **kwargs):
    raise KeyError("no such column in my reward")


def wrong_length(completions, **kwargs):
    return [1.0]


def no_kwargs(completions, answer):
    return [0.0 for _ in completions]


def needs_level(completions, level, **kwargs):
    return [0.0 for _ in completions]


NOT_A_FUNCTION = 3
