"""Rollout engines behind one interface (`RolloutEngine.sync / generate -> RolloutBatch`), registered by lazy
import path, so a CPU install without vLLM never imports it."""

from __future__ import annotations

import importlib

from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams

ENGINES = {"hf": "rlx.rollout.hf:HFEngine", "vllm": "rlx.rollout.vllm:VLLMEngine",
           "vllm_server": "rlx.rollout.server.engine:VLLMServerEngine"}


def engine_class(name: str):
    if name not in ENGINES:
        raise ValueError(f"rollout.engine: unknown engine '{name}'; registered: {sorted(ENGINES)}")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def max_sequence_len(rollout, tok, prompts: list[str]) -> int:
    """Prompt + completion tokens the engine's KV cache needs: 2 x the longest of `prompts` + the budget."""
    from rlx.rollout.kv_sizing import completion_budget

    longest = max(len(tok(q, add_special_tokens=False).input_ids) for q in prompts)
    return 2 * longest + completion_budget(rollout, tok)


def check_engine(cfg) -> None:
    """Validate the run config's engine before any model is built (unknown name, the engine's limits)."""
    engine_class(cfg.rollout.engine).check_config(cfg)


def build_engine(cfg, tokenizer, policy, trainer, *, fp32_head: bool = False, base_dir=None, seed: int = 0,
                 max_len: int | None = None, quant_format: str = "none", own_weights: bool = False,
                 log_dir=None) -> RolloutEngine:
    """The `cfg.engine` engine serving `policy` (`own_weights`: not the trainer's module; `log_dir`: its logs)."""
    return engine_class(cfg.engine)(cfg, tokenizer, policy, trainer, fp32_head=fp32_head, base_dir=base_dir,
                                    seed=seed, max_len=max_len, quant_format=quant_format, own_weights=own_weights,
                                    log_dir=log_dir)


__all__ = ["ENGINES", "RolloutBatch", "RolloutEngine", "SamplingParams", "build_engine", "check_engine", "engine_class",
           "max_sequence_len"]
