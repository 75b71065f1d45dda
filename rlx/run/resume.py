"""A run's checkpoint and how the run continues from it: what `save` stores (everything the next step
depends on: weights, optimizer, scheduler, every RNG stream, the task's position, curriculum, NExt
records, stale-mode versions, compute so far, the config) and what `resume` restores and refuses
(a config that differs from the recorded one, except bookkeeping keys). Files are written by
rlx.run.checkpoint (atomic, verified); under torchrun rank 0 writes and every rank resumes.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from rlx.run.device import rng_state, set_rng_state
from rlx.run import distributed as dist
from rlx.run.logging import say as _log


def resume(p, found: tuple | None) -> None:
    """Restore a run from `found` = (path, state) of Checkpointer.load_latest (the adapter is already in the
    policy; a corrupt checkpoint was logged and skipped, all corrupt: CheckpointError)."""
    if found is None:
        return
    latest, st = found
    p.dp.load_optimizer_state(p.policy, p.opt, st["optimizer"])
    p.sched.load_state_dict(st["scheduler"])
    set_rng_state(st["rng"])
    p.gen.set_state(st["rollout_rng"])
    p.task.load_state_dict(st["task"])
    if p.curriculum is not None:
        p.curriculum.load_state_dict(st["curriculum"])
    if p.extrap is not None:
        p.extrap.load_state_dict(st["extrapolator"])
    if st.get("schedule"):  # stale mode: the last k + 1 policy versions (async: the queue is not kept)
        p.schedule.load_state_dict(st["schedule"])
    changed = config_changes(st.get("config"), p.cfg)
    if changed:
        hydra_cfg = p.run_dir / ".hydra" / "config.yaml"
        if hydra_cfg.is_file() and p.world.is_main:  # Hydra already wrote the refused settings there: put back what ran
            hydra_cfg.write_text(OmegaConf.to_yaml(OmegaConf.create(st["config"])))
        raise ValueError(f"train.resume=auto from {latest}: the config differs from the one the checkpoint was "
                         f"trained with: {'; '.join(changed)}. Resuming would train under settings the recorded "
                         f"config does not show: run with the original values, or start a new run "
                         f"(another hydra.run.dir). Only bookkeeping keys may change on resume "
                         f"(train.steps, evaluation/checkpoint/log intervals, logger, threads, rollout.eval_chunk)")
    p.start_step, p.run_id, p.compute = st["step"], st["wandb_run_id"], st["compute"]
    p.wall_offset = p.compute["gpu_hours"] * 3600.0 / p.trainer.num_devices
    _log(f"[resume] from {latest} (step {p.start_step})")


# keys a resumed run may change (bookkeeping, budget, where it runs); anything else is refused
RESUMABLE_CHANGES = ("train.steps", "train.eval_every", "train.ckpt_every", "train.log_every", "train.progress",
                     "train.resume", "train.fail_at_step", "train.fail_rank", "logger.", "trainer.threads", "trainer.device",
                     "trainer.dist_timeout_s",
                     "model.cache_dir", "paper",
                     "trainer.malloc_mmap_threshold_mb",  # where freed blocks go: no value changes
                     "model.gradient_checkpointing",  # memory only: the recomputed forward gives bitwise the same grads
                     "rollout.eval_chunk",  # evaluation's sequences per engine call: no sample or metric changes
                     "task.default_rewards.")  # the task file's set: what ran is task.rewards, compared


def config_changes(saved: dict | None, cfg) -> list[str]:
    """'key: old -> new' for every setting that differs from the checkpoint's config (bookkeeping keys aside)."""
    if saved is None:  # a checkpoint from before configs were recorded: nothing to compare
        return []
    from rlx.run.records import flatten

    old, new = flatten(saved), flatten(OmegaConf.to_container(cfg, resolve=True))
    keys = sorted(set(old) | set(new))
    return [f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}" for k in keys
            if old.get(k) != new.get(k) and not any(k == c.rstrip(".") or k.startswith(c) for c in RESUMABLE_CHANGES)]


def save(p, step: int, run_id: str | None) -> None:
    """Checkpoint step `step` of the run `p` (rlx.train.Parts): rank 0 writes, every rank takes part."""
    p.compute_now()  # bring the wall-time compute up to date before it is stored
    weights, optimizer = p.dp.gathered_trainable(p.policy), p.dp.optimizer_state(p.policy, p.opt)  # fsdp: whole tensors
    dist.check_agreement(p.world, p.dp.checksum(p.policy, weights), f"the trainable weights at step {step}")
    if not p.world.is_main:  # rank 0 writes; the others wait until the checkpoint is complete
        p.world.barrier()
        return
    with p.schedule.paused():  # async: no generation touches the task or the RNG streams while they are read
        p.ckpt.save(step, p.policy, {
            "step": step, "optimizer": optimizer, "scheduler": p.sched.state_dict(), "rng": rng_state(),
            "rollout_rng": p.gen.get_state(), "task": p.task.state_dict(), "wandb_run_id": run_id,
            "curriculum": p.curriculum.state_dict() if p.curriculum is not None else None,
            "extrapolator": p.extrap.state_dict() if p.extrap is not None else None, "compute": dict(p.compute),
            "schedule": p.schedule.state_dict(),
            "config": OmegaConf.to_container(p.cfg, resolve=True),  # what resume compares against
        }, log=_log, weights=weights)
    p.world.barrier()
