"""The environment interface: an episode is a list of turns on token ids.

The driver (rlx.envs.driver) owns the loop, the engine and the budgets; an environment only answers:

    prompt_ids = env.reset(prompt_ids, example)   # [P] the prompt the episode starts from (may add instructions)
    loop:  action_ids = policy turn (engine.generate on prompt + every turn so far, as token ids)
           step = env.step(action_ids)            # reply token ids, reward, done
           the reply's ids are appended as they are; the next policy turn continues after them

A fresh instance serves each episode (its state is the episode's). `stop_strings`: a policy turn ends
where its text first holds one of them (a tool call's closing tag); the driver cuts the turn's tokens
there, so the environment sees the action up to and including that token. Rewards: `Step.reward` per
turn, summed over the episode (`Episode.reward`); a task's reward functions score the final answer
(the last policy turn's text) as in single-turn runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    """An environment's answer to one policy turn."""

    reply: list[int] = field(default_factory=list)  # token ids appended after the policy's turn (may be empty)
    reward: float = 0.0  # this turn's reward (added to the episode's)
    done: bool = False  # the episode ends here (the policy answered, or the environment stops it)
    info: dict[str, float] = field(default_factory=dict)  # counts summed over the episode (env/<key> metrics)


@dataclass
class Turn:
    """One turn of an episode: the policy's sampled tokens (with their behaviour log-probs, versions and
    entropies) or an environment's reply (context only: never in the loss)."""

    role: str  # "policy" | "env"
    ids: list[int]
    logprobs: list[float] | None = None  # policy: log-probs of `ids` under the sampling distribution
    versions: list[int] | None = None  # policy: the policy version that sampled each token
    entropy: list[float] | None = None  # policy: sampling entropy per token (engines that return it)
    text: str = ""  # policy: the turn's text (eos and stop ids left out)


@dataclass
class Episode:
    """One episode: its prompt, its turns in order, and how it ended."""

    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0  # sum of the environment's per-turn rewards
    truncated: bool = False  # ended by a budget (tokens, turns), not by the policy or the environment
    info: dict[str, float] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Completion tokens so far (policy and environment)."""
        return sum(len(t.ids) for t in self.turns)

    def context(self) -> list[int]:
        """Prompt and every turn: what the next policy turn is sampled after."""
        return [*self.prompt_ids, *(i for t in self.turns for i in t.ids)]

    @property
    def answer(self) -> str:
        """The last policy turn's text: what the task's reward functions score."""
        return next((t.text for t in reversed(self.turns) if t.role == "policy"), "")


class Environment:
    """Answers the policy's turns of one episode. Subclasses register in rlx.envs.registry.ENVIRONMENTS.

    `fmt` (rlx.envs.format.TurnFormat) makes token ids of the environment's text (its instructions and
    replies) for the run's tokenizer and reply format; `instructions` (None = the class's own
    `INSTRUCTIONS`, "" = none) is put into every prompt by `reset`."""

    stop_strings: tuple[str, ...] = ()
    INSTRUCTIONS = ""

    def __init__(self, cfg, fmt):
        self.cfg, self.fmt, self.tok = cfg, fmt, fmt.tok
        given = getattr(cfg, "instructions", None)
        self.instructions = self.INSTRUCTIONS if given is None else given

    def reset(self, prompt_ids: list[int], example=None) -> list[int]:
        """Start an episode on `prompt_ids` (the task's `example` when the caller has it); returns the prompt
        the policy's first turn is sampled after."""
        return self.fmt.instruct(prompt_ids, self.instructions)

    def step(self, action_ids: list[int]) -> Step:
        """Answer the policy's turn (its sampled token ids, cut after a stop string)."""
        raise NotImplementedError

    def text(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)
