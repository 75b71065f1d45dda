"""GSM8K-style word problems from a seed: a count changed in `task.steps` sentences (add, take away, multiply,
share equally); the answer is the final count, and `columns` keep the record (start, (op, operand) steps)."""

from __future__ import annotations

from rlx.tasks.base import Example, Task
from rlx.tasks.synthetic import _split

NAMES = ["Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jamal", "Kira", "Liam",
         "Mei", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara"]
OBJECTS = ["apples", "marbles", "stickers", "books", "cookies", "pencils", "stamps", "shells", "coins",
           "cards", "beads", "eggs"]
# one sentence per operation; {n} the person, {f} a friend, {o} the objects, {b} the operand
TEMPLATES = {
    "+": ["{n} buys {b} more {o}.", "{f} gives {n} {b} {o}.", "{n} finds {b} more {o}."],
    "-": ["{n} gives {b} {o} to {f}.", "{n} loses {b} {o}.", "{n} sells {b} {o}."],
    "*": ["Then the number of {o} {n} has becomes {b} times as large.",
          "{n} collects more {o} until there are {b} times as many as before."],
    "/": ["{n} splits the {o} into {b} equal groups and keeps only one group.",
          "{n} packs the {o} into {b} boxes with the same number in each and keeps one box."],
}
# keeps the '#### N' placeholder that SmolLM2 often copies: the wording without it scored lower (docs/models.md)
INSTRUCTION = "Solve the problem step by step, then write the final answer on the last line as '#### N'."
MAX_VALUE = 1000  # counts stay in [0, MAX_VALUE]


def apply(value: int, op: str, b: int) -> int:
    if op == "+":
        return value + b
    if op == "-":
        return value - b
    if op == "*":
        return value * b
    if op == "/":
        if value % b:
            raise ValueError(f"{value} is not divisible by {b}")
        return value // b
    raise ValueError(f"unknown operation '{op}'")


def _operand(rng, value: int, op: str, max_operand: int) -> int | None:
    """An operand that keeps the count a whole number in [0, MAX_VALUE], or None if `op` cannot apply."""
    if op == "+":  # amounts of 2 or more: "buys 1 more apples" reads badly
        return rng.randint(2, min(max_operand, MAX_VALUE - value)) if value <= MAX_VALUE - 2 else None
    if op == "-":
        return rng.randint(2, min(max_operand, value)) if value >= 2 else None
    if op == "*":
        ks = [k for k in (2, 3, 4) if value * k <= MAX_VALUE]
        return rng.choice(ks) if ks and value >= 1 else None
    ks = [k for k in (2, 3, 4, 5) if value >= k and value % k == 0]
    return rng.choice(ks) if ks else None


def make_problem(rng, steps: int, max_operand: int) -> tuple[str, dict]:
    """(prompt, record): the story text and {start, steps [(op, operand)], answer, solution}."""
    name, friend = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    value = start = rng.randint(2, max_operand)
    sentences = [f"{name} has {start} {obj}."]
    record, lines = [], []
    for _ in range(steps):
        while True:  # "+" or "-" always applies (MAX_VALUE >= 4), so this ends
            op = rng.choice("+-*/")
            b = _operand(rng, value, op, max_operand)
            if b is not None:
                break
        template = rng.choice(TEMPLATES[op])
        sentences.append(template.format(n=name, f=friend, o=obj, b=b))
        new = apply(value, op, b)
        lines.append(f"{value} {op} {b} = {new}")
        record.append([op, b])
        value = new
    sentences.append(f"How many {obj} does {name} have now?")
    prompt = " ".join(sentences) + "\n" + INSTRUCTION
    solution = "\n".join(lines + [f"#### {value}"])
    return prompt, {"start": start, "steps": record, "answer": str(value), "solution": solution}


class WordProblems(Task):
    """GSM8K-style word problems with `task.steps` arithmetic steps (difficulty) and an integer answer."""

    name = "wordproblems"

    def __init__(self, cfg):
        super().__init__(cfg)
        if not 1 <= cfg.steps <= 8:
            raise ValueError(f"task.steps must be in [1, 8] (arithmetic steps per problem), got {cfg.steps}")
        if cfg.max_operand < 2:
            raise ValueError(f"task.max_operand must be >= 2 for wordproblems, got {cfg.max_operand}")
        records: dict[str, dict] = {}

        def make(rng):
            prompt, rec = make_problem(rng, cfg.steps, cfg.max_operand)
            records.setdefault(prompt, rec)
            return prompt, rec["answer"]

        train, held = _split(cfg, make)

        def full(e: Example) -> Example:
            rec = records[e.prompt]
            return Example(key=e.key, prompt=e.prompt, answer=e.answer, solution=rec["solution"],
                           columns={"answer": e.answer, "start": rec["start"], "steps": rec["steps"]})

        self.train, self.eval = [full(e) for e in train], [full(e) for e in held]
