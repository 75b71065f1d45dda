"""math-verify on the final answer only, under a hard bound (a pool of worker processes, rlx.tasks.workers): the
answer goes to math-verify as ONE expression (`\\boxed{answer}`), never as free text it could take pieces of
(prose without LaTeX aside). Every rule and why: docs/runs.md, "Rewards".
"""

from __future__ import annotations

import os
import re

from rlx.tasks.answers import final_answer, top_level_boxes, unwrap
from rlx.tasks.answers.stated import CONFLICT, HEDGE, NEGATED, QUALIFIED, TOO_LONG
from rlx.tasks.workers import WorkerPool, serve

MAX_CHARS = 20_000  # longer completions are not parsed (scored 0)
MAX_DEPTH = 24  # deeper brace nesting is not parsed (scored 0)
DEFAULT_WORKERS = max(2, min(4, os.cpu_count() or 2))  # checks at once: one hang never stalls the rest of a batch

_TEXT_GROUP = re.compile(r"\\(?:text|textbf|mbox|mathrm)\{[^{}]*\}")  # \text{apples}: words, but not prose
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_LATEX = re.compile(r"[\\{}^_]")
_PERCENT = re.compile(r"\s*\\?%$")  # 33% or LaTeX's 33\%
_WHOLE_NUMBER = re.compile(r"^[-+]?(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)$", re.ASCII)  # 33, -4, 1,000
_DELIMITED = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
WHOLE, PROSE = "whole", "prose"  # how math-verify reads a candidate: one expression | its own extraction


def brace_depth(text: str) -> int:
    depth = best = 0
    for ch in text:
        if ch == "{":
            depth += 1
            best = max(best, depth)
        elif ch == "}":
            depth = max(0, depth - 1)
    return best


def too_complex(text: str) -> bool:
    return len(text) > MAX_CHARS or brace_depth(text) > MAX_DEPTH


def balanced(text: str) -> bool:
    """Every brace closed, none closed before it opened (else `\\boxed{text}` would end early)."""
    depth = 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def is_prose(text: str) -> bool:
    """Words of two or more letters outside LaTeX commands and \\text{} groups."""
    return _WORD.search(_COMMAND.sub(" ", _TEXT_GROUP.sub(" ", text))) is not None


def candidates(answer: str, gold: str) -> list[tuple[str, str]]:
    """What math-verify is asked to read of a final answer: [(WHOLE | PROSE, text)]; [] = nothing verifiable."""
    answer = unwrap(answer)
    if not answer or not balanced(answer):
        return []
    if is_prose(answer):
        if not _LATEX.search(answer):
            return [(PROSE, answer)]
        segments = [next(g for g in m.groups() if g is not None) for m in _DELIMITED.finditer(answer)]
        last = segments[-1].strip() if segments else ""
        return [(WHOLE, last)] if last and balanced(last) and not is_prose(last) else []
    out = [(WHOLE, answer)]
    bare = _PERCENT.sub("", answer).strip()  # "33%" for a whole-number gold 33: the number asked for (docs/runs.md)
    if bare and bare != answer and _WHOLE_NUMBER.match(gold.strip()):
        out.append((WHOLE, bare))
    return out


_HEDGE_WORD = re.compile(r"\\(?:text|mathrm|textbf)\{\s*(?:or|and)\s*\}|\bor\b|\\lor\b|\\vee\b")
# an answer denied or only approximated (`\\neq \\frac{1}{2}`, `\\approx \\frac{1}{2}`, `\\text{at least } 3`):
# math-verify reads the expression beside the relation and would pay it; refused unless the gold is such a relation
_DENIED = re.compile(r"\\(?:neq|ne|not|nsim)(?![A-Za-z])|≠|\b(?:not|no|never)\b|n't\b")
_APPROXIMATE = re.compile(r"\\(?:approx|sim|simeq|geq?|leq?|geqslant|leqslant|gtrsim|lesssim|lt|gt)(?![A-Za-z])|"
                          r"[≈<>≤≥]|^\s*~|\b(?:about|approximately|approx|roughly|around|nearly|almost|maybe|"
                          r"probably|perhaps|at\s+(?:least|most)|(?:more|less|fewer|greater)\s+than|or\s+so)\b")


def symbolic_refusal(completion: str, gold: str) -> str | None:
    """Why a completion scores 0 against a symbolic gold before math-verify is asked (a stated.py flaw), or None."""
    if too_complex(completion):
        return TOO_LONG
    hashes = [h.strip() for h in re.findall(r"####([^\n]*)", completion)]
    boxes = [b.strip() for b in top_level_boxes(completion)] if not hashes else []
    answers = hashes or boxes
    if len({unwrap(a) for a in answers}) > 1:
        return CONFLICT
    final = unwrap(answers[-1] if answers else (final_answer(completion) or ""))
    if _HEDGE_WORD.search(final) and not _HEDGE_WORD.search(gold):
        return HEDGE
    if _DENIED.search(final) and not _DENIED.search(gold):
        return NEGATED
    if _APPROXIMATE.search(final) and not _APPROXIMATE.search(gold):
        return QUALIFIED
    if "," in final and "," not in gold and not _WHOLE_NUMBER.match(final):
        return HEDGE
    if "\\boxed" in final:  # a box inside the final box
        return HEDGE
    return None


def _read(text: str, how: str, parse):
    return parse("\\boxed{" + text + "}" if how == WHOLE else text, parsing_timeout=None)


def _setup():
    import logging

    from math_verify import parse, verify

    # math-verify's "Timeout is disabled" notice at every worker start buries a run's output; the pool bounds calls
    for name in ("math_verify.parser", "math_verify.grader"):  # this worker's loggers only
        logging.getLogger(name).addFilter(lambda record: not str(record.msg).startswith("Timeout is disabled"))
    return parse, verify


def _check(state, msg):  # runs in the worker: (gold, [(how, text)]) -> ("ok", 1.0 | 0.0)
    parse, verify = state
    gold_text, cands = msg
    try:
        gold = _read(gold_text, WHOLE, parse) or parse(gold_text, parsing_timeout=None)
        ok = bool(gold) and any(
            bool(pred) and bool(verify(gold, pred, timeout_seconds=None)) for pred in (_read(t, h, parse) for h, t in cands))
        return "ok", float(ok)
    except (MemoryError, RecursionError, OverflowError, ValueError) as e:
        return "bounded", type(e).__name__


def _worker(conn, mem_mb: int, arg=None) -> None:  # the child process
    serve(conn, mem_mb, _setup, _check)


class BoundedVerifier:
    """`score([(gold, completion), ...]) -> [1.0 | 0.0]`, each check bounded by timeout_s once a worker is ready."""

    def __init__(self, timeout_s: float = 5.0, mem_mb: int = 4096, workers: int = DEFAULT_WORKERS, spares: int = 1):
        self.pool = WorkerPool(_worker, size=workers, spares=spares, timeout_s=timeout_s, mem_mb=mem_mb,
                               name="rlx-math-verify")

    @property
    def timeout_s(self) -> float:
        return self.pool.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self.pool.timeout_s = float(value)

    @property
    def stats(self) -> dict:
        return self.pool.stats

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        out: list[float] = [0.0] * len(pairs)
        asks, where = [], []
        for i, (gold, completion) in enumerate(pairs):
            if too_complex(completion):
                self.stats["refused"] += 1
                continue
            raw = final_answer(completion)
            gold_text, answer = gold.strip(), unwrap(raw)
            if _PERCENT.search(gold_text) and _PERCENT.search(answer):  # '33%', '33.0%': both without their %
                gold_text, answer = _PERCENT.sub("", gold_text), _PERCENT.sub("", answer)
            if answer == gold_text or raw == gold.strip():  # the gold string itself: no parsing needed
                out[i] = 1.0
                continue
            cands = candidates(answer, gold_text)
            if cands:
                asks.append((gold_text, cands))
                where.append(i)
        for i, answer in zip(where, self.pool.map(asks) if asks else []):
            if answer is None:  # timed out or died: scored 0 (counted by the pool)
                continue
            kind, value = answer
            if kind == "bounded":
                self.stats["errors"] += 1
                continue
            out[i] = value
        return out

    def score_text(self, pairs: list[tuple[str, str]]) -> list[float]:
        """MATH's benchmark reading: math-verify's own extraction over the whole completion, bounded like `score`."""
        out: list[float] = [0.0] * len(pairs)
        asks, where = [], []
        for i, (gold, completion) in enumerate(pairs):
            if too_complex(completion):
                self.stats["refused"] += 1
                continue
            asks.append((gold.strip(), [(PROSE, completion)]))
            where.append(i)
        for i, answer in zip(where, self.pool.map(asks) if asks else []):
            if answer is not None and answer[0] == "ok":
                out[i] = answer[1]
        return out

    def __call__(self, gold: str, completion: str) -> float:
        return self.score([(gold, completion)])[0]

    def pop_stats(self) -> dict[str, int]:
        return self.pool.pop_stats()

    def close(self) -> None:
        self.pool.close()


_DEFAULT: BoundedVerifier | None = None


def default_verifier() -> BoundedVerifier:
    """The process-wide verifier the `math_verify` reward uses (configured by the task)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = BoundedVerifier()
    return _DEFAULT


def configure(timeout_s: float) -> BoundedVerifier:
    """Set the process-wide verifier's time bound (task.reward_timeout_s)."""
    if not timeout_s > 0:  # also refuses NaN
        raise ValueError(f"task.reward_timeout_s must be > 0, got {timeout_s}")
    v = default_verifier()
    v.timeout_s = float(timeout_s)
    return v
