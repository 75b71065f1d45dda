"""Environments by short name (`env.name`), as lazy import paths: naming one imports nothing else."""

from __future__ import annotations

import importlib

ENVIRONMENTS = {"calculator": "rlx.envs.calculator:CalculatorEnv",
                "trl": "rlx.envs.ecosystem.trl_env:Trl",  # env.factory: docs/envs.md
                "verifiers": "rlx.envs.ecosystem.vf_engine:Verifiers"}  # env.id / env.args: docs/envs.md


def env_class(name: str):
    """The registered Environment subclass `name`."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"env.name: unknown environment '{name}'; registered: {sorted(ENVIRONMENTS)}")
    module, cls = ENVIRONMENTS[name].split(":")
    return getattr(importlib.import_module(module), cls)
