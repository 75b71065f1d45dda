"""Preflight: every value a run needs, checked before any model is built, each refusal naming its key.

`check(cfg)` is the first thing `rlx.train` does: the schema's unknown keys and the ranges its types
cannot express (`check_values`), each component's own config check (algo, noise, extrapolation,
sampling, schedule, engine, reward functions), the trainer device, and what N torchrun ranks cannot do
(`check_distributed`). It builds nothing heavy: a typo costs a second, not a model load.
"""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from rlx.run.device import DeviceSpec, resolve
from rlx.run import distributed as dist
from rlx.algo.config import as_config as algo_config
from rlx.config import unknown_keys
from rlx.evaluation import eval_sampling
from rlx.extrapolation import build_extrapolator
from rlx.run.logging import MODES as LOGGER_MODES
from rlx.noise import build_noise
from rlx.rollout import SamplingParams, check_engine
from rlx.rollout.schedule import check_rollout_schedule_config


def check(cfg) -> DeviceSpec:
    """Every value the loop needs, checked before any model is built (naming the key)."""
    check_values(cfg)
    check_finetune(cfg, dist.launched_world_size())
    check_distributed(cfg, dist.launched_world_size())
    algo_config(cfg.algo)  # the algo group's own checks (AlgoConfig.__post_init__)
    check_shared_prefix(cfg)
    build_noise(cfg.noise, cfg.train.steps, cfg.seed)  # noise and extrapolation configs (no model needed)
    build_extrapolator(cfg.extrapolation, cfg.train.steps)
    for key in ("eval_every", "ckpt_every", "log_every"):
        if cfg.train[key] < 1:
            raise ValueError(f"train.{key} must be >= 1, got {cfg.train[key]}")
    if cfg.train.steps < 0:
        raise ValueError(f"train.steps must be >= 0, got {cfg.train.steps}")
    if cfg.train.resume not in ("auto", "never"):
        raise ValueError(f"train.resume: '{cfg.train.resume}' is not auto or never")
    if cfg.model.source == "gguf":  # the file (and its package) exist; rollout=vllm's head_dim check below converts it
        from rlx.models.gguf import resolve_gguf

        resolve_gguf(cfg.model.gguf_file)
    SamplingParams.from_config(cfg.rollout)
    eval_sampling(cfg.rollout)  # evaluation's own settings (rollout.eval_*)
    check_rollout_schedule_config(cfg.rollout)
    trainer = resolve(cfg.trainer, dist.launched_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    check_engine(cfg)
    return trainer


def check_finetune(cfg, world_size: int = 1) -> None:
    """model.finetune, and what full fine-tuning cannot do: the knobs that need a LoRA adapter or a frozen
    (quantized) base, 16-bit weights (model.dtype: AdamW's small steps round away in them), and FSDP over
    N ranks (its layer shards would sit beside whole embeddings and head, which the gradient clip and the
    engines' head cannot mix). model.lora.* is ignored with full (the model groups set it), not refused."""
    from rlx.models import FINETUNE

    m = cfg.model
    if m.finetune not in FINETUNE:
        raise ValueError(f"model.finetune: '{m.finetune}' is not one of {list(FINETUNE)}")
    if m.finetune != "full":
        return
    if m.dtype in ("bfloat16", "float16"):  # AdamW steps below half a unit in the last place (bf16: 2^-8) round away
        raise ValueError(f"model.finetune=full with model.dtype={m.dtype} is not supported: AdamW would update "
                         f"{m.dtype} weights in place, where small updates vanish; use model.dtype=float32 with "
                         f"trainer.dtype=bf16 (bf16 autocast forwards, fp32 weights and optimizer)")
    for bad, what in ((cfg.quant.format != "none", f"quant.format={cfg.quant.format} (a quantized base is frozen: "
                                                    f"only a LoRA adapter trains on it)"),
                      (cfg.extrapolation.type != "none", f"extrapolation.type={cfg.extrapolation.type} (NExt and "
                                                         f"the linear baseline extend the LoRA adapter's rank-1 records)"),
                      (cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sync == "adapter",
                       "rollout.vllm.sync=adapter (there is no adapter to serve; sync=auto reloads every weight)"),
                      (world_size > 1 and cfg.trainer.strategy == "fsdp", f"trainer.strategy=fsdp on {world_size} "
                       f"ranks (only the decoder layers are sharded; use trainer.strategy=ddp)")):
        if bad:
            raise ValueError(f"model.finetune=full with {what} is not supported; use model.finetune=lora, or "
                             f"turn it off")


def check_shared_prefix(cfg) -> None:
    """algo.shared_prefix feeds the prompt's KV cache to its completions; transformers' gradient
    checkpointing drops every cache in training, so the completions would not see their prompt."""
    if cfg.algo.shared_prefix and cfg.model.get("gradient_checkpointing", False):
        raise ValueError("algo.shared_prefix=true with model.gradient_checkpointing=true: checkpointed layers drop "
                         "the prompt's KV cache the completions attend to; turn one of them off")


def check_distributed(cfg, world_size: int) -> None:
    """What N data-parallel ranks cannot do (yet), refused before any work."""
    if world_size <= 1:
        return
    if cfg.rollout.mode == "async":
        raise ValueError(f"rollout.mode=async with {world_size} processes (torchrun): every rank would fill its own queue "
                         f"and take batches at its own moments, so the ranks' batches would differ. Use rollout.mode=stale "
                         f"(generation with the policy of exactly k updates ago) or sync under torchrun")
    if cfg.trainer.strategy == "fsdp":
        for bad, what in ((cfg.rollout.engine != "hf", f"rollout={cfg.rollout.engine} (the engine would need whole weights "
                                                       f"exported from the shards)"),
                          (cfg.rollout.mode != "sync", f"rollout.mode={cfg.rollout.mode} (old adapter versions are "
                                                       f"loaded into sharded tensors)"),
                          (cfg.noise.type != "none", f"noise={cfg.noise.type} (AQN perturbs whole norm weights)"),
                          (cfg.extrapolation.type != "none", f"extrapolation={cfg.extrapolation.type} (NExt's rank-1 "
                                                             f"records need whole adapter matrices)")):
            if bad:
                raise ValueError(f"trainer.strategy=fsdp with {what} is not supported; use trainer.strategy=ddp "
                                 f"(replicated weights), which supports it")


def check_values(cfg) -> None:
    """Values the schema's types cannot rule out, refused before any model is built (naming the key)."""
    unknown = unknown_keys(cfg)
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}: not in rlx's schema, so nothing would read them "
                         f"(a `+key=value` override adds keys; check the spelling, `--help` lists every key)")
    from rlx.limits import check_model, check_numbers
    from rlx.scaling.config import as_config
    from rlx.tasks import FILE_TASKS, check_task_config

    check_numbers(cfg)  # every numeric field of every schema: NaN / inf / out of its range (rlx/limits.py)
    check_model(cfg)  # the tiny model's heads and width, model.dtype, quant.format / quant.kernel
    as_config(cfg.scaling)  # scaling.fit / scaling.compute (else refused only when the run ends)

    r, m, t = cfg.rollout, cfg.model, cfg.task
    rules = [
        (r.temperature > 0, "rollout.temperature", "must be > 0 for training rollouts (behaviour log-probs "
                                                    "of a greedy policy are not a distribution)"),
        (r.eval_temperature >= 0, "rollout.eval_temperature", "must be >= 0"),
        (r.group_size >= 2, "rollout.group_size", "must be >= 2: advantages are rewards centred on their group, "
                                                  "so a group of one always has advantage 0"),
        (r.prompts_per_step >= 1, "rollout.prompts_per_step", "must be >= 1"),
        (r.eval_k >= 0, "rollout.eval_k", "must be >= 0"),
        (r.batch_size >= 1, "rollout.batch_size", "must be >= 1"),
        (m.lora.r >= 1, "model.lora.r", "must be >= 1"),
        (m.lora.alpha > 0, "model.lora.alpha", "must be > 0"),
        (0 <= m.lora.dropout < 1, "model.lora.dropout", "must be in [0, 1)"),
        (cfg.logger.mode in LOGGER_MODES, "logger.mode", f"must be one of {list(LOGGER_MODES)}"),
        (t.name in FILE_TASKS or t.n_train >= 1, "task.n_train", "must be >= 1 for a synthetic task"),
        (t.name in FILE_TASKS or t.n_eval >= 1, "task.n_eval", "must be >= 1 for a synthetic task (0 means all "
                                                               "rows only for file tasks)"),
        (t.n_train >= 0, "task.n_train", "must be >= 0"),
        (t.n_eval >= 0, "task.n_eval", "must be >= 0"),
        (t.reward_timeout_s > 0, "task.reward_timeout_s", "must be > 0"),
        (cfg.logger.completions_every >= 0, "logger.completions_every", "must be >= 0 (0 = no completion tables)"),
        (cfg.logger.completions_rows >= 1, "logger.completions_rows", "must be >= 1"),
        (cfg.logger.completions_max_mb > 0, "logger.completions_max_mb", "must be > 0"),
    ]
    for ok, key, why in rules:
        if not ok:
            raise ValueError(f"{key} {why}; got {OmegaConf.select(cfg, key)!r}")
    check_task_config(t)  # reward entries: registered, or importable with TRL's signature (no data read yet)
