"""Word problems as a verifiers environment, written as a verifiers user writes one (verifiers 0.1.10's
classic API): a `load_environment` that returns a `vf.SingleTurnEnv` with a dataset, a parser and a rubric.

    python -m rlx.train env=verifiers env.id=examples/envs/wordproblems_vf.py 'env.args={n_train: 2000}'

The problems are rlx's generated word problems (rlx.tasks.wordproblems.make_problem: a story of `steps`
arithmetic steps with a whole-number answer, asking for the answer as '#### N'), so a run here can be set
beside rlx's own `task=wordproblems`; everything else is this file's own: the rows, the parser that reads the
stated answer, and the rubric that scores it (not rlx's stated_answer).
"""

from __future__ import annotations

import random
import re

import verifiers as vf
from datasets import Dataset

from rlx.tasks.wordproblems import make_problem

_STATED = re.compile(r"####[ \t]*(-?\d[\d,]*(?:\.\d+)?)[ \t]*")


def stated_number(text: str) -> str | None:
    """The answer the reply states, written plainly ('1,200' -> '1200', '7.0' -> '7'), or None: its last line
    must be '#### N' with nothing else on it, and no other line may start a '####' answer. Looser readings (the
    last '#### N' anywhere) pay for '#### 9^1', '#### 9 or so' and two conflicting answers: rlx-audit showed it."""
    if len(text or "") > 20_000:  # not read: a reply this long is no answer (and a regex over it costs)
        return None
    lines = [line.strip() for line in (text or "").strip().splitlines()]
    if not lines or sum(line.startswith("####") for line in lines) != 1:
        return None
    found = _STATED.fullmatch(lines[-1])
    return None if found is None else _plain(found.group(1))


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The reply's last number, written plainly, or None: the reading lm-eval's GSM8K 'flexible-extract' makes.
    Looser than `stated_number`, and one SmolLM2-135M can learn from: its replies end on a sentence ('Grace has
    18 - 2 = 16.'), and none of the 1,800 greedy held-out replies in docs/runs/smollm2_wp_stated (base and
    trained) ends on a '#### N' line."""
    if len(text or "") > 20_000:  # as stated_number: no answer
        return None
    found = _NUMBER.findall(text or "")
    return _plain(found[-1]) if found else None


def _plain(number: str) -> str:
    """'1,200' -> '1200', '7.0' -> '7'."""
    number = number.replace(",", "")
    return number[:-2] if number.endswith(".0") else number


READINGS = {"strict": stated_number, "last_number": last_number}


def correct_answer(completion, answer, parser, **kwargs) -> float:
    """1 when the reply states the answer, read the environment's way (`reading`: a last line '#### N', or the
    last number)."""
    return 1.0 if parser.parse_answer(completion) == str(answer) else 0.0


def states_an_answer(completion, parser, **kwargs) -> float:
    """1 when the reply states some number, read the environment's way (a metric: weight 0)."""
    return 0.0 if parser.parse_answer(completion) is None else 1.0


def _rows(n: int, steps: int, max_operand: int, seed: int, exclude: set[str]) -> list[dict]:
    rng, rows = random.Random(seed), []
    while len(rows) < n:
        question, record = make_problem(rng, steps, max_operand)
        if question in exclude:
            continue
        exclude.add(question)
        rows.append({"question": question, "answer": record["answer"], "info": {"solution": record["solution"]}})
    return rows


def load_environment(n_train: int = 2000, n_eval: int = 200, steps: int = 2, max_operand: int = 20, seed: int = 0,
                     system_prompt: str | None = None, reading: str = "strict") -> vf.Environment:
    if reading not in READINGS:
        raise ValueError(f"load_environment: reading={reading!r} is not one of {sorted(READINGS)}")
    seen: set[str] = set()
    train = _rows(n_train, steps, max_operand, seed, seen)
    held = _rows(n_eval, steps, max_operand, seed + 1, seen)  # never a training question
    parser = vf.Parser(extract_fn=READINGS[reading])
    rubric = vf.Rubric(funcs=[correct_answer, states_an_answer], weights=[1.0, 0.0], parser=parser)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(train), eval_dataset=Dataset.from_list(held),
                            system_prompt=system_prompt, parser=parser, rubric=rubric)
