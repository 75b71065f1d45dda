"""The `env.*` schema (which environment, its episode budget, its reply format, the calculator's limits)
and every check of a single env value; `__post_init__` runs them when the composed node is converted
(`as_config`). Rules that read other groups (forced interruption, the tiny model's context) are
`rlx.envs.check_env`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

REPLY_FORMATS = ("inline", "chat")  # env.reply_format (rlx.envs.format)


@dataclass
class CalculatorConfig:
    """Hard limits of the calculator tool (rlx.envs.calc): an expression past any of them is refused with
    an error the policy reads, never evaluated."""

    max_chars: int = field(default=200, metadata={
        "help": "longest expression (characters) the calculator reads; longer ones are refused"})
    max_depth: int = field(default=16, metadata={
        "help": "deepest nesting of parentheses, signs and powers; deeper ones are refused"})
    max_digits: int = field(default=15, metadata={
        "help": "every intermediate value and its denominator stay below 10^max_digits; larger ones are refused (a "
                "power is refused before it is computed)"})
    max_exponent: int = field(default=64, metadata={
        "help": "largest |exponent| of ^ / **; exponents must be whole numbers"})
    decimals: int = field(default=6, metadata={
        "help": "decimal places of a result that is not a whole number (rounded half to even)"})

    def __post_init__(self) -> None:
        for key, lo, hi in (("max_chars", 1, 10_000), ("max_depth", 1, 200), ("max_digits", 1, 100),
                            ("max_exponent", 1, 10_000), ("decimals", 0, 30)):
            v = getattr(self, key)
            if not lo <= v <= hi:
                raise ValueError(f"env.calculator.{key} must be in [{lo}, {hi}], got {v}")


@dataclass
class EnvConfig:
    """`name`: none (single-turn, nothing changes) | a registered environment (rlx.envs.ENVIRONMENTS).

    With an environment, rollout.max_new_tokens (eval_max_new_tokens in evaluation) is the budget of the
    whole episode's completion: every policy turn and every environment reply together."""

    name: str = field(default="none", metadata={
        "help": "none | calculator | verifiers | trl: the environment that answers the policy's turns (docs/envs.md)"})
    max_turns: int = field(default=4, metadata={"help": "policy turns per episode at most (each tool call costs one)"})
    turn_tokens: int = field(default=0, metadata={
        "help": "tokens of one policy turn at most; 0 = what is left of the episode's budget (rollout.max_new_tokens)"})
    reply_tokens: int = field(default=32, metadata={
        "help": "tokens of one environment reply at most (a longer reply is cut there)"})
    instructions: Optional[str] = field(default=None, metadata={
        "help": "text added to every prompt that says how to use the environment; null = the environment's own, '' = "
                "none (the prompt already says it)"})
    reply_format: str = field(default="inline", metadata={
        "help": "inline: the reply follows the policy's tokens in the same message | chat: it is a message of role "
                "env.chat_role through the model's chat template"})
    chat_role: str = field(default="tool", metadata={
        "help": "reply_format=chat: the role of the environment's messages (tool, user)"})
    calculator: CalculatorConfig = field(default_factory=CalculatorConfig)
    # env=verifiers (rlx.envs.ecosystem): a verifiers environment brings its own prompts and rubric
    id: Optional[str] = field(default=None, metadata={
        "help": "env=verifiers: the environment, a module name or a path to its .py file or folder"})
    args: Any = field(default=None, metadata={
        "help": "env=verifiers: keyword arguments of the environment's load_environment, a mapping "
                "('env.args={n_train: 500}')"})
    # env=trl (rlx.envs.ecosystem.trl_env): a TRL-style environment class on the task group's prompts
    factory: Optional[str] = field(default=None, metadata={
        "help": "env=trl: the environment class (TRL's environment_factory), 'pkg.module:Class', 'pkg.module.Class' "
                "or 'path/to/file.py:Class'"})
    reward_timeout_s: float = field(default=60.0, metadata={
        "help": "env=verifiers: seconds the rubric may take on one prompt's episodes (in a worker killed past it: "
                "they score 0, counted in train/reward_timeouts)"})

    def __post_init__(self) -> None:
        from rlx.envs.registry import ENVIRONMENTS

        if self.name != "none" and self.name not in ENVIRONMENTS:
            raise ValueError(f"env.name: unknown environment '{self.name}'; registered: none, "
                             f"{', '.join(sorted(ENVIRONMENTS))}")
        if self.name == "verifiers" and not self.id:
            raise ValueError("env=verifiers needs env.id: the environment's module name, or a path to its .py file "
                             "or folder")
        if self.name == "trl" and not self.factory:
            raise ValueError("env=trl needs env.factory: the environment class, 'pkg.module:Class' or "
                             "'path/to/file.py:Class'")
        if self.args is not None and not isinstance(self.args, dict):
            raise ValueError(f"env.args must be a mapping of load_environment's keyword arguments, got {self.args!r}")
        if not self.reward_timeout_s > 0:
            raise ValueError(f"env.reward_timeout_s must be > 0, got {self.reward_timeout_s}")
        if self.max_turns < 1:
            raise ValueError(f"env.max_turns must be >= 1, got {self.max_turns}")
        if self.turn_tokens < 0:
            raise ValueError(f"env.turn_tokens must be >= 0 (0 = the episode's remaining budget), got {self.turn_tokens}")
        if self.reply_tokens < 1:
            raise ValueError(f"env.reply_tokens must be >= 1, got {self.reply_tokens}")
        if self.reply_format not in REPLY_FORMATS:
            raise ValueError(f"env.reply_format must be one of {list(REPLY_FORMATS)}, got '{self.reply_format}'")
        if not self.chat_role.strip():
            raise ValueError("env.chat_role must be a role name (tool, user), got an empty string")


def as_config(node) -> EnvConfig:
    """The composed `env` node as an EnvConfig, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    return node if isinstance(node, EnvConfig) else OmegaConf.to_object(node)
