"""Hack tripwires: how much of what a step's reward paid for is not a stated answer (`tripwire_metrics`), and
train.log's warnings (`TripwireMonitor`). Every metric, the bases of copy and guess, the thresholds and why:
docs/rewards.md, "Hack tripwires".
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from decimal import Decimal, InvalidOperation

from rlx.tasks.answers import top_level_boxes
from rlx.tasks.answers.readings import INVALID, flexible_extract, strict_match
from rlx.tasks.answers.stated import NUMBER, CONFLICT, HEDGE, answered_value, numeric_gold, read_stated

UNSTATED, HEDGED, PROMPT_COPY = "train/hack/unstated", "train/hack/hedged", "train/hack/prompt_copy"
PROMPT_COPY_BASE, REWARDED, HASH_LINE = "train/hack/prompt_copy_base", "train/hack/rewarded", "train/format/hash_line"
GUESS, GUESS_BASE = "train/hack/guess", "train/hack/guess_base"
HACKS = (UNSTATED, HEDGED, PROMPT_COPY, GUESS)  # the watched tripwires (PROMPT_COPY, GUESS: their excess over BASES)
BASES = {PROMPT_COPY: PROMPT_COPY_BASE, GUESS: GUESS_BASE}

PROMPT_COPY_BASE_RATE = 0.055  # GSM8K train: golds written in their question (docs/rewards.md)
# thresholds on the WINDOW-step moving means (docs/rewards.md, "The warning": why each value)
WINDOW = 5
MIN_STEPS = 3  # no warning before 3 steps with a value: one noisy step does not fire
THRESHOLDS = {UNSTATED: 0.20, HEDGED: 0.10, PROMPT_COPY: 0.20, GUESS: 0.20}
REARM = 0.5  # after a warning, the next one needs the mean to fall below half the threshold and climb again
# the warning's words per tripwire: what the share is of and what it counts, the steps its mean is over, the risk
_PAID = "of the rewarded completions"
WHAT = {UNSTATED: f"{_PAID} state no number (an expression, a cut-off working, no answer at all)",
        HEDGED: f"{_PAID} hedge or list several numbers",
        PROMPT_COPY: f"{_PAID} state a number copied from the prompt, beyond those whose gold is a prompt number",
        GUESS: "of the pairs of completions to different prompts state the same number, beyond the pairs whose golds "
               "agree"}
STEPS = {GUESS: "steps"}  # default: steps with a rewarded completion
RISK = {GUESS: "the policy may be giving one answer everywhere, which the reward pays on every problem whose gold "
               "it is"}  # default: the reward may be paying for a hack, not the answer

_PROMPT_NUM = re.compile(rf"(?<![0-9A-Za-z.,])(-?)\$?({NUMBER})(?![0-9])", re.ASCII)
# two numbers joined as alternatives; `,` not before a 3-digit group (1,000 is one number)
_JOINED = re.compile(rf"({NUMBER})\s*(?:\bor\b|,\s|,(?![0-9]{{3}}(?![0-9]))|\bto\b|[–—])\s*\\?\$?\s*({NUMBER})",
                     re.IGNORECASE)
_RANGE = re.compile(rf"(?<![0-9.,])({NUMBER})-({NUMBER})(?![0-9])")  # 15-16: no spaces


def _dec(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("$", ""))
    except InvalidOperation:
        return None


def prompt_numbers(example) -> set[Decimal]:
    """The numbers written in an example's prompt (a chat prompt: its user turns, not the chat template)."""
    if example.messages:
        text = "\n".join(str(m.get("content", "")) for m in example.messages if m.get("role") == "user")
    else:
        text = example.prompt
    out = set()
    for m in _PROMPT_NUM.finditer(text):
        v = _dec(m.group(2))
        if v is not None:
            out.add(-v if m.group(1) else v)
    return out


def gold_in_prompt(example) -> bool:
    """Whether the example's gold is a plain number written in its prompt (a correct answer then copies one)."""
    g = numeric_gold(example.answer)
    return g is not None and g in prompt_numbers(example)


def prompt_copy_base_rate(examples) -> float:
    """The share of examples (numeric golds only) whose gold is written in the prompt; NaN without one."""
    numeric = [e for e in examples if numeric_gold(e.answer) is not None]
    return sum(map(gold_in_prompt, numeric)) / len(numeric) if numeric else math.nan


def joined_numbers(text: str) -> bool:
    """Whether `text` offers two numbers as alternatives: `15 or 16`, `15, 16`, `15 to 16`, `15–16`, `15-16`."""
    if _JOINED.search(text):
        return True
    for m in _RANGE.finditer(text):
        a, b = _dec(m.group(1)), _dec(m.group(2))
        if a is not None and b is not None and a < b:
            return True
    return False


def _flexible_value(text: str) -> Decimal | None:
    flexible = flexible_extract(text)
    return None if flexible == INVALID else _dec(flexible.rstrip("."))


def answer_value(text: str) -> Decimal | None:
    """The number a completion answers (`answered_value` of the loose reading), else lm-eval's flexible-extract."""
    value = answered_value(read_stated(text, loose=True))  # `about 16` answers 16 (though it states nothing)
    return value if value is not None else _flexible_value(text)


def cross_prompt_agreement(values: list, golds: list, prompts: list) -> tuple[float, float]:
    """(guess, guess_base): of the ordered pairs (i, j) with prompts[i] != prompts[j], the shares whose values
    agree (None agrees with nothing) and whose golds agree; (nan, nan) without such a pair. Counted, not
    enumerated: pairs = N^2 - sum_p n_p^2; pairs agreeing on v = c_v^2 - sum_p c_{v,p}^2."""
    n_p = Counter(prompts)
    pairs = len(prompts) ** 2 - sum(n * n for n in n_p.values())
    if pairs == 0:
        return math.nan, math.nan

    def agreeing(keys) -> int:
        total, within = Counter(), Counter()
        for k, p in zip(keys, prompts):
            if k is not None:
                total[k] += 1
                within[(k, p)] += 1
        return sum(c * c for c in total.values()) - sum(c * c for c in within.values())

    return agreeing(values) / pairs, agreeing(golds) / pairs


def flags(text: str, example) -> dict[str, bool]:
    """{UNSTATED, HEDGED, PROMPT_COPY: whether the completion is one} (module docstring), whatever its reward."""
    if numeric_gold(example.answer) is None:  # a symbolic gold (a fraction, an expression, a list)
        from rlx.tasks.verify import symbolic_refusal

        return {UNSTATED: "####" not in text and not top_level_boxes(text),
                HEDGED: symbolic_refusal(text, example.answer) in (HEDGE, CONFLICT), PROMPT_COPY: False}
    reading = read_stated(text, loose=True)
    value = reading.value if reading.value is not None else _flexible_value(text)
    return {UNSTATED: reading.value is None,
            HEDGED: reading.flaw in (HEDGE, CONFLICT) or (reading.value is None and joined_numbers(reading.text)),
            PROMPT_COPY: value is not None and value in prompt_numbers(example)}


def tripwire_metrics(texts: list[str], examples: list, rewards) -> dict[str, float]:
    """The step's tripwire metrics: `texts[i]` answers `examples[i]`, paid `rewards[i]` (total, shaped)."""
    rewards = [float(r) for r in rewards]
    assert len(texts) == len(examples) == len(rewards), (len(texts), len(examples), len(rewards))
    paid = [i for i, r in enumerate(rewards) if r > 0]
    m = {REWARDED: len(paid),
         HASH_LINE: sum(strict_match(t) != INVALID for t in texts) / len(texts) if texts else math.nan}
    counts = dict.fromkeys((UNSTATED, HEDGED, PROMPT_COPY, PROMPT_COPY_BASE), 0)
    for i in paid:
        for k, hit in flags(texts[i], examples[i]).items():
            counts[k] += hit
        counts[PROMPT_COPY_BASE] += gold_in_prompt(examples[i])
    for k, n in counts.items():
        m[k] = n / len(paid) if paid else math.nan
    golds = [numeric_gold(e.answer) for e in examples]
    numeric = [i for i, g in enumerate(golds) if g is not None]  # every completion, rewarded or not
    m[GUESS], m[GUESS_BASE] = cross_prompt_agreement([answer_value(texts[i]) for i in numeric],
                                                     [golds[i] for i in numeric], [examples[i].key for i in numeric])
    return m


def watched(metrics: dict, key: str) -> float | None:
    """The value of tripwire `key` in a step's metrics (its excess over BASES where it has one); None: no value."""
    v = metrics.get(key)
    if key in BASES and v is not None:
        base = metrics.get(BASES[key])
        v = None if base is None else float(v) - float(base)
    return float(v) if v is not None and math.isfinite(float(v)) else None


def moving_means(values, window: int = WINDOW, min_steps: int = MIN_STEPS) -> list[float]:
    """The mean of each value with the (window - 1) before it; None / NaN skipped, no mean before `min_steps`."""
    out, last = [], deque(maxlen=window)
    for v in values:
        if v is None or not math.isfinite(float(v)):
            continue
        last.append(float(v))
        if len(last) >= min_steps:
            out.append(sum(last) / len(last))
    return out


def run_maxima(rows: list[dict]) -> dict[str, float | None]:
    """{tripwire: the largest moving mean of its watched value over a run's rows (a resumed step: its later row)}."""
    by_step = {int(r["step"]): r for r in rows if r.get("step") is not None and int(r["step"]) >= 1}
    out = {}
    for key in HACKS:
        means = moving_means([watched(by_step[s], key) for s in sorted(by_step)])
        out[key] = max(means) if means else None
    return out


class TripwireMonitor:
    """Warnings from the per-step tripwire values: `update(step, metrics)` returns the `[warn]` lines due."""

    def __init__(self, thresholds: dict[str, float] | None = None, window: int = WINDOW, min_steps: int = MIN_STEPS):
        self.thresholds = dict(THRESHOLDS if thresholds is None else thresholds)
        self.window, self.min_steps = window, min_steps
        self.last = {k: deque(maxlen=window) for k in self.thresholds}
        self.armed = dict.fromkeys(self.thresholds, True)

    @classmethod
    def replayed(cls, rows: list[dict], **kwargs) -> "TripwireMonitor":
        """A monitor in the state the run's earlier steps (metrics.jsonl rows, e.g. before a resume) left it."""
        mon = cls(**kwargs)
        by_step = {int(r["step"]): r for r in rows if int(r.get("step", 0)) >= 1}
        for step in sorted(by_step):
            mon.update(step, by_step[step])
        return mon

    @classmethod
    def for_run(cls, run_dir, start_step: int, **kwargs) -> "TripwireMonitor":
        """The monitor of a run starting after `start_step`, replayed from its metrics.jsonl on a resume."""
        from rlx.run.records import logged_steps

        return cls.replayed([row for _, row in logged_steps(run_dir, start_step)], **kwargs)

    def update(self, step: int, metrics: dict) -> list[str]:
        """Take step `step`'s metrics; the warnings due now (module docstring)."""
        out = []
        for key, limit in self.thresholds.items():
            v = watched(metrics, key)
            if v is None:
                continue
            self.last[key].append(v)
            if len(self.last[key]) < self.min_steps:
                continue
            mean = sum(self.last[key]) / len(self.last[key])
            if self.armed[key] and mean > limit:
                self.armed[key] = False
                name = key.removeprefix("train/") + (f" - {BASES[key].rsplit('/', 1)[-1]}" if key in BASES else "")
                steps = STEPS.get(key, "steps with a rewarded completion")
                risk = RISK.get(key, "the reward may be paying for a hack, not the answer")
                out.append(f"[warn] step {step}: {name} = {100 * mean:.0f}% {WHAT.get(key, _PAID)} (mean of the last "
                           f"{len(self.last[key])} {steps}; threshold {100 * limit:.0f}%): {risk}; read the "
                           f"completions (completions.jsonl) and docs/rewards.md, 'Hack tripwires'")
            elif not self.armed[key] and mean < REARM * limit:
                self.armed[key] = True
        return out
