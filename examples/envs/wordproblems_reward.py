"""The word-problem environment's rubric as a reward in TRL's convention, so that rlx's own `task=wordproblems`
trains on exactly the rule the verifiers environment pays (the pairing in docs/results.md, "SmolLM2 on a
verifiers environment"):

    python -m rlx.train experiment=smollm2_wordproblems \\
        'task.rewards={examples.envs.wordproblems_reward.last_number_correct: 1.0}'
"""

from __future__ import annotations

from examples.envs.wordproblems_vf import READINGS


def _paid(reading: str, completions: list[str], answer: list[str]) -> list[float]:
    read = READINGS[reading]
    return [1.0 if read(text) == str(gold) else 0.0 for text, gold in zip(completions, answer)]


def strict_correct(completions, answer, **kwargs) -> list[float]:
    """1 when the reply's last line is '#### <answer>' (the environment's default reading)."""
    return _paid("strict", completions, answer)


def last_number_correct(completions, answer, **kwargs) -> list[float]:
    """1 when the reply's last number is the answer (`load_environment(reading="last_number")`)."""
    return _paid("last_number", completions, answer)
