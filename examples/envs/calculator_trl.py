"""A TRL-style environment class, written as a TRL user writes one for `GRPOTrainer(environment_factory=...)`:
`reset(**row)` starts an episode, every public method is a tool the model may call (its schema from its type
hints and docstring), `get_reward()` scores the finished episode from the environment's state.

    python -m rlx.train task=wordproblems env=trl env.factory=examples/envs/calculator_trl.py:WordProblemCalculator \\
        model.chat_template=examples/envs/chatml_tools.jinja env.max_turns=4

On rlx's word problems: the model may `calculate` arithmetic and `submit` its answer; `get_reward` is 1 when the
submitted answer is the row's (the task's own rewards score the final reply as well).
"""

from __future__ import annotations

from arith_eval import evaluate  # the calculator beside this file (no eval)


class WordProblemCalculator:
    """A calculator and an answer box for one word problem at a time."""

    def __init__(self):
        self.answer: str | None = None
        self.submitted: str | None = None

    def reset(self, **row) -> str | None:
        self.answer, self.submitted = str(row.get("answer", "")), None
        return None  # the problem is the prompt already: nothing to add to it

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression exactly.

        Args:
            expression: Numbers with + - * / and parentheses, e.g. "(12 + 3) * 4".

        Returns:
            The value, as a whole number or a decimal rounded to 6 places.
        """
        return evaluate(expression)

    def submit(self, answer: str) -> str:
        """Submit the final answer to the problem (the last submission counts).

        Args:
            answer: The answer, a number written plainly, e.g. "42".
        """
        self.submitted = answer.strip().replace(",", "")
        return "Submitted."

    def get_reward(self) -> float:
        return 1.0 if self.submitted is not None and self.submitted == self.answer else 0.0
