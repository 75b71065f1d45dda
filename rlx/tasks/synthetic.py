"""Synthetic verifiable tasks generated from a seed, with disjoint train and held-out splits."""

from __future__ import annotations

import random

from rlx.tasks.base import Example, Task


def _split(cfg, make_one, knobs: str = "num_terms / max_operand / digits") -> tuple[list[Example], list[Example]]:
    """Draw unique problems from `make_one(rng)` until both splits are full; the splits never share a prompt."""
    rng = random.Random(cfg.seed)
    seen: dict[str, Example] = {}
    want = cfg.n_train + cfg.n_eval
    tries = 0
    while len(seen) < want:
        tries += 1
        if tries > 50 * want:
            raise ValueError(f"task: only {len(seen)} distinct problems found for n_train+n_eval={want}; "
                             f"enlarge the problem space ({knobs}) or ask for fewer")
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


# ---- keyed rules: a task whose rewarded behaviour is rare under the SFT base ---------------------------------
RULES = {  # name -> transformation of a digit string (each learnable by a tiny transformer)
    "copy": lambda s: s,
    "reverse": lambda s: s[::-1],
    "rotl": lambda s: s[1:] + s[:1],
    "rotr": lambda s: s[-1:] + s[:-1],
    "inc": lambda s: "".join(str((int(c) + 1) % 10) for c in s),
    "dec": lambda s: "".join(str((int(c) - 1) % 10) for c in s),
}
CODES = {"copy": "C", "reverse": "R", "rotl": "L", "rotr": "T", "inc": "I", "dec": "D"}  # the rule's letter
KEYS = "abcdefghijklmnopqrstuvwxyz"


def rule_of_key(num_keys: int, seed: int) -> dict[str, str]:
    """{key letter: rule name}: the rules dealt round-robin to the keys in a seeded order."""
    names = list(RULES)
    rng = random.Random(f"rules-{seed}")
    rng.shuffle(names)
    return {KEYS[i]: names[i % len(names)] for i in range(num_keys)}


class KeyedRules(Task):
    """`k:DDDD=` -> the digits transformed by key k's rule, written `R####54321`. The SFT demonstrator applies k's
    own rule to only `demo_correct` of k's examples, so RL discovers it key by key (calibration: docs/results.md)."""

    name = "rules"

    def __init__(self, cfg):
        super().__init__(cfg)
        if not 1 <= cfg.num_keys <= len(KEYS):
            raise ValueError(f"task.num_keys must be in [1, {len(KEYS)}], got {cfg.num_keys}")
        if cfg.length < 2:
            raise ValueError(f"task.length must be >= 2 (a rotation of one digit is a copy), got {cfg.length}")
        if not 0.0 <= cfg.demo_correct <= 1.0:
            raise ValueError(f"task.demo_correct must be in [0, 1], got {cfg.demo_correct}")
        self.rules = rule_of_key(cfg.num_keys, cfg.seed)
        keys = list(self.rules)

        def make(rng):
            k = rng.choice(keys)
            s = "".join(rng.choice("0123456789") for _ in range(cfg.length))
            return f"{k}:{s}=", (k, s)

        def example(prompt, ks, demo_rng=None):
            k, s = ks
            rule = shown = self.rules[k]
            if demo_rng is not None and demo_rng.random() >= cfg.demo_correct:  # the demonstrator's other rule
                shown = demo_rng.choice([r for r in RULES if r != rule])
            return Example(key=prompt, prompt=prompt, answer=RULES[rule](s), solution=f"{CODES[shown]}####{RULES[shown](s)}",
                           columns={"answer": RULES[rule](s), "rule": rule})

        train, held = _split(cfg, make, "task.num_keys / task.length")  # drawn problems; their answer slot holds (key, digit string)
        demo_rng = random.Random(f"demo-{cfg.seed}")  # one fixed demonstration per training example
        self.train = [example(e.prompt, e.answer, demo_rng) for e in train]
        self.eval = [example(e.prompt, e.answer) for e in held]
