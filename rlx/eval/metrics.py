"""pass@k (the unbiased estimator of Chen et al. 2021, eq. 1), maj@k and mean@n of one eval set's n samples per
prompt, and which k to report (docs/eval.md)."""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction

from rlx.tasks.answers import unwrap

# a plain decimal numeral (thousands commas in whole groups only) or a fraction of two whole numbers
_DECIMAL = re.compile(r"^[-+]?(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)?(?:\.[0-9]+)?$", re.ASCII)
_RATIO = re.compile(r"^[-+]?[0-9]+/[0-9]*[1-9][0-9]*$", re.ASCII)  # a nonzero denominator


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt from n samples with c passing (exact integer binomials)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)  # comb(m, k) = 0 for m < k: pass@k = 1


def vote_key(answer: str | None) -> Fraction | str | None:
    """What maj@k counts as one answer: a plain numeral's exact value (Fraction, never eval), else the text."""
    text = unwrap(answer) if answer else ""
    if not text:
        return None
    if _RATIO.match(text) or (_DECIMAL.match(text) and any(c.isdigit() for c in text)):
        return Fraction(text.replace(",", ""))
    return text


def majority(answers: list[str | None], passed: list[bool]) -> bool:
    """Whether the most frequent answer (ties: the first seen) passes, by the first sample giving it; no vote: False."""
    keys = [vote_key(a) for a in answers]
    votes = Counter(k for k in keys if k is not None)  # insertion order breaks ties: the first-seen answer wins
    if not votes:
        return False
    top = votes.most_common(1)[0][0]
    return passed[keys.index(top)]


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks + ([n] if ks and ks[-1] != n else [])


def parse_ks(text: str | None, n: int) -> list[int]:
    """The k list of `--k 1,4,16` (None: default_ks(n)); every k must be in 1..n (refused before any model)."""
    if text is None:
        return default_ks(n)
    try:
        ks = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ValueError(f"--k: expected comma-separated integers like 1,4,16; got {text!r}") from None
    bad = [k for k in ks if not 1 <= k <= n]
    if not ks or bad:
        raise ValueError(f"--k {text}: every k must be in 1..n, where n = rollout.eval_k = {n} samples per prompt "
                         f"(pass@k and maj@k draw k of the n samples); raise rollout.eval_k or lower k")
    return ks


def set_metrics(passed: list[bool], answers: list[str | None], n: int, ks: list[int]) -> dict:
    """mean@n, pass@k and maj@k of one set from its prompt-major samples ([P * n] each)."""
    P = len(passed) // n
    rows = [(passed[i * n: (i + 1) * n], answers[i * n: (i + 1) * n]) for i in range(P)]
    return {"mean_at_n": sum(passed) / len(passed),
            "pass_at_k": {k: sum(pass_at_k(n, sum(p), k) for p, _ in rows) / P for k in ks},
            "maj_at_k": {k: sum(majority(a[:k], p[:k]) for p, a in rows) / P for k in ks}}
