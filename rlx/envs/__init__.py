"""Multi-turn episodes with environments (the `env` group): tools, feedback, the loss on the policy's
own tokens only. docs/envs.md.

    engine = wrap_engine(cfg.env, engine, tok)   # env=none: the engine itself, nothing changes

`wrap_engine` returns an engine (rlx.envs.engine.EnvEngine) whose `generate` runs episodes through the
wrapped engine (rlx.envs.driver.run_episodes): every schedule and the evaluation use it unchanged.
`check_env(cfg)` holds the rules that read other groups (before any model is built).
"""

from __future__ import annotations

import functools

from rlx.envs.base import Environment, Episode, Step, Turn
from rlx.envs.config import EnvConfig, as_config
from rlx.envs.registry import ENVIRONMENTS, env_class


def env_factory(cfg, tok):
    """A zero-argument callable making one fresh environment of `cfg.name` per episode (None for none)."""
    from rlx.envs.format import TurnFormat

    cfg = as_config(cfg)
    if cfg.name == "none":
        return None
    fmt = TurnFormat(tok, cfg.reply_format, cfg.chat_role)  # once per run: the chat template is read here
    return functools.partial(env_class(cfg.name), cfg, fmt)


def wrap_engine(cfg, engine, tok):
    """`engine` running the episodes of the `cfg` (the env group) environment; env=none: `engine` itself."""
    from rlx.envs.driver import Budget
    from rlx.envs.engine import EnvEngine

    cfg = as_config(cfg)
    if cfg.name != "none" and hasattr(env_class(cfg.name), "wrap"):  # drives its own episodes (env=verifiers)
        return env_class(cfg.name).wrap(cfg, engine, tok)
    make_env = env_factory(cfg, tok)
    if make_env is None:
        return engine
    return EnvEngine(engine, make_env, Budget.from_config(as_config(cfg)))


def env_task(cfg, seed: int = 0, task_cfg=None):
    """The task an environment brings with it (env=verifiers: its dataset and rubric; env=trl: the task group's
    task `task_cfg` builds, its prompts rendered with the tool schemas), None when the task group's task is the
    run's (every other environment). `cfg` is the env group."""
    cfg = as_config(cfg)
    if cfg.name == "none" or not hasattr(env_class(cfg.name), "task"):
        return None
    return env_class(cfg.name).task(cfg, seed, task_cfg)


def instructions(cfg) -> str:
    """The text `cfg`'s environment adds to every prompt (env.instructions, else the environment's own)."""
    cfg = as_config(cfg)
    if cfg.name == "none":
        return ""
    return env_class(cfg.name).INSTRUCTIONS if cfg.instructions is None else cfg.instructions


def instruction_tokens(cfg, tok) -> int:
    """Tokens the environment adds to every prompt: what an engine's context bound (max_len) must add."""
    text = instructions(cfg)
    return len(tok("\n" + text, add_special_tokens=False).input_ids) if text else 0


def check_env(cfg, task=None) -> None:
    """The env rules that read other groups, before any model is built (cfg = the root config; `task`, once
    built: the tiny model's context holds its longest prompt, the instructions and the episode's budget)."""
    env = as_config(cfg.env)
    if env.name == "none":
        return
    if cfg.rollout.interrupt.enabled:
        raise ValueError(f"env.name={env.name} with rollout.interrupt.enabled=true is not supported: the forced "
                         f"interruption would continue an episode outside its environment; turn one of them off")
    if env.turn_tokens > cfg.rollout.max_new_tokens:
        raise ValueError(f"env.turn_tokens={env.turn_tokens} is larger than the whole episode's budget "
                         f"rollout.max_new_tokens={cfg.rollout.max_new_tokens}")
    if task is not None and cfg.model.source == "tiny":
        from rlx.models.tokenizer import build_char_tokenizer

        tok = build_char_tokenizer()
        prompts = [e.prompt for e in list(task.train) + [e for ex in task.eval_sets.values() for e in ex]]
        longest = max((len(tok(p, add_special_tokens=False).input_ids) for p in prompts), default=0)
        budget = max(cfg.rollout.max_new_tokens, cfg.rollout.eval_max_new_tokens or 0)
        need = longest + instruction_tokens(env, tok) + budget
        if need > cfg.model.max_position_embeddings:
            raise ValueError(f"model.max_position_embeddings={cfg.model.max_position_embeddings} cannot hold the longest "
                             f"prompt, env.name={env.name}'s instructions and an episode's budget ({need} tokens); "
                             f"raise it, shorten env.instructions or lower rollout.max_new_tokens")


__all__ = ["ENVIRONMENTS", "EnvConfig", "Environment", "Episode", "Step", "Turn", "as_config", "check_env",
           "env_class", "env_factory", "env_task", "instruction_tokens", "instructions", "wrap_engine"]
