"""Synthetic verifiable tasks generated from a seed, with disjoint train and held-out splits."""

from __future__ import annotations

import random

from rlx.tasks.base import Example, Task


def _split(cfg, make_one) -> tuple[list[Example], list[Example]]:
    """Draw unique problems from `make_one(rng)` until both splits are full; the splits never share a prompt."""
    rng = random.Random(cfg.seed)
    seen: dict[str, Example] = {}
    want = cfg.n_train + cfg.n_eval
    tries = 0
    while len(seen) < want:
        tries += 1
        if tries > 50 * want:
            raise ValueError(
                f"task: only {len(seen)} distinct problems found for n_train+n_eval={want}; "
                "enlarge the problem space (num_terms / max_operand / digits) or ask for fewer"
            )
        prompt, answer = make_one(rng)
        if prompt not in seen:
            seen[prompt] = Example(key=prompt, prompt=prompt, answer=answer)
    items = list(seen.values())
    return items[: cfg.n_train], items[cfg.n_train :]


class Arith(Task):
    """Multi-step integer arithmetic: `a op b op c =` with + and -, exact integer answer."""

    name = "arith"

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.num_terms < 2 or cfg.max_operand < 1:
            raise ValueError("task.num_terms must be >= 2 and task.max_operand >= 1")

        def make(rng):
            terms = [rng.randint(0, cfg.max_operand) for _ in range(cfg.num_terms)]
            ops = [rng.choice("+-") for _ in range(cfg.num_terms - 1)]
            value, text = terms[0], str(terms[0])
            for op, t in zip(ops, terms[1:]):
                value = value + t if op == "+" else value - t
                text += f"{op}{t}"
            return text + "=", str(value)

        self.train, self.eval = _split(cfg, make)


class Multiply(Task):
    """Multi-digit multiplication `a*b=` with `digits`-digit operands (hard for a tiny model)."""

    name = "multiply"

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.digits < 1:
            raise ValueError("task.digits must be >= 1")
        lo, hi = 10 ** (cfg.digits - 1), 10**cfg.digits - 1

        def make(rng):
            a, b = rng.randint(lo, hi), rng.randint(lo, hi)
            return f"{a}*{b}=", str(a * b)

        self.train, self.eval = _split(cfg, make)
