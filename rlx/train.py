"""rlx training entry point: `python -m rlx.train [overrides]`.

One RL experiment, top to bottom: build the parts named by the config, then for each step sample
prompts -> G completions each -> rewards -> advantages -> policy-gradient updates -> metrics, with
held-out evaluation and atomic checkpoints. Comments mark where the loop departs from textbook GRPO.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rlx import algo as A
from rlx.checkpoint import Checkpointer, rng_state, set_rng_state
from rlx.config import register_configs
from rlx.extrapolation import build_extrapolator
from rlx.logging import RunLogger, read_metrics
from rlx.models import build_policy, token_logprobs
from rlx.noise import build_noise
from rlx.rollout import RolloutBatch, build_rollout
from rlx.tasks import build_task

register_configs()

# metrics that measure time; everything else in metrics.jsonl is a deterministic function of the seed
TIMING_PREFIXES = ("timing_s/", "perf/tokens_per_s", "perf/compute/gpu_hours", "extrap/time_s/")


class NonFiniteError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(msg, flush=True)


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def evaluate(model, rollout, task, cfg, step: int) -> dict:
    """Greedy accuracy and mean@k on the held-out split; never under AQN noise, adapters enabled."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)  # own stream: eval never shifts training RNG
    ex = task.eval
    prompts = [e.prompt for e in ex]
    max_new = cfg.rollout.eval_max_new_tokens or cfg.rollout.max_new_tokens
    greedy = rollout.generate(model, prompts, 1, g, temperature=0.0, max_new_tokens=max_new)
    acc = sum(task.passed(task.score(ex, greedy.texts))) / len(ex)
    out = {"val/acc": acc}
    k = cfg.rollout.eval_k
    if k > 0:
        sampled = rollout.generate(model, prompts, k, g, temperature=cfg.rollout.eval_temperature, max_new_tokens=max_new)
        ex_k = [e for e in ex for _ in range(k)]
        out["val/mean_at_k"] = sum(task.passed(task.score(ex_k, sampled.texts))) / len(ex_k)
        out["val/k"] = k
    return out


def _score(task, cfg, examples, batch):
    """Rewards of a rollout batch: per reward function, weighted total, and DAPO overlong shaping."""
    ex_rows = [examples[i] for i in batch.group.tolist()]
    per_fn = task.score(ex_rows, batch.texts)
    rewards = torch.tensor(task.total_reward(per_fn), dtype=torch.float32)  # [N]
    if cfg.algo.overlong_shaping:
        rewards = rewards + A.overlong_penalty(batch.lengths, cfg.algo, cfg.rollout.max_new_tokens)
    passed = torch.tensor(task.passed(per_fn), dtype=torch.float32)  # [N]
    return per_fn, rewards, passed


def run(cfg: DictConfig, run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    A.check_config(cfg.algo)
    for key in ("eval_every", "ckpt_every"):
        if cfg.train[key] < 1:
            raise ValueError(f"train.{key} must be >= 1, got {cfg.train[key]}")
    if cfg.train.steps < 0:
        raise ValueError(f"train.steps must be >= 0, got {cfg.train.steps}")
    if cfg.train.resume not in ("auto", "never"):
        raise ValueError(f"train.resume: '{cfg.train.resume}' is not auto or never")
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    _seed_everything(cfg.seed)
    t_start = time.time()

    # ---- build --------------------------------------------------------------------------------
    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    model, tok = build_policy(cfg, task, _log)
    _seed_everything(cfg.seed)  # the same RNG streams whether the SFT base came from the cache or not
    rollout = build_rollout(cfg.rollout, tok, fp32_head=cfg.algo.fp32_lm_head)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.algo.warmup_steps)))
    noise = build_noise(cfg.noise, cfg.train.steps, cfg.seed)
    extrap = build_extrapolator(cfg.extrapolation, cfg.train.steps)
    curriculum = A.PassRateCurriculum(cfg.algo.pass_rate_threshold) if cfg.algo.no_positive_resampling else None
    gen = torch.Generator().manual_seed(cfg.seed)  # the rollout sampling stream
    G, B = cfg.rollout.group_size, cfg.rollout.prompts_per_step
    max_new = cfg.rollout.max_new_tokens

    # ---- resume -------------------------------------------------------------------------------
    ckpt = Checkpointer(run_dir / "ckpt")
    start_step, run_id = 0, None
    compute = {"flops": 0.0, "tokens": 0.0, "steps": 0.0, "gpu_hours": 0.0}
    latest = ckpt.latest() if cfg.train.resume == "auto" else None
    if latest is not None:
        st = Checkpointer.load(latest, model)
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        set_rng_state(st["rng"])
        gen.set_state(st["rollout_rng"])
        task.load_state_dict(st["task"])
        if curriculum is not None:
            curriculum.load_state_dict(st["curriculum"])
        if extrap is not None:
            extrap.load_state_dict(st["extrapolator"])
        start_step, run_id, compute = st["step"], st["wandb_run_id"], st["compute"]
        _log(f"[resume] from {latest} (step {start_step})")
    logger = RunLogger(cfg, run_dir, run_id, start_step if latest is not None else None,
                       code_dir=HydraConfig.get().runtime.cwd if HydraConfig.initialized() else None)
    summary: dict = {"status": "running", "git_sha": logger.sha, "wandb_run_id": logger.run_id}
    wall_offset = compute["gpu_hours"] * 3600.0
    t_run = time.time()

    def compute_now() -> dict:
        compute["gpu_hours"] = (wall_offset + time.time() - t_run) / 3600.0  # devices (1) x wall hours
        return {f"perf/compute/{k}": v for k, v in compute.items()}

    def save(step: int) -> None:
        compute_now()  # bring the wall-time compute up to date before it is stored
        ckpt.save(step, model, {
            "step": step, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": rng_state(),
            "rollout_rng": gen.get_state(), "task": task.state_dict(), "wandb_run_id": logger.run_id,
            "curriculum": curriculum.state_dict() if curriculum is not None else None,
            "extrapolator": extrap.state_dict() if extrap is not None else None, "compute": dict(compute),
        })

    def sample_and_generate(n: int, step: int, m: dict | None = None):
        """n training prompts -> G completions each, under AQN noise when configured (restored after)."""
        examples = task.sample(n, skip=curriculum.is_retired if curriculum is not None else None)
        if noise is not None:
            noise_metrics = noise.apply(model, step)
            if m is not None:
                m.update(noise_metrics)
        try:
            return examples, rollout.generate(model, [e.prompt for e in examples], G, gen)
        finally:
            if noise is not None:
                noise.restore(model)

    progress = None
    exit_code = 1
    try:
        if start_step == 0:
            t0 = time.time()
            ev = evaluate(model, rollout, task, cfg, 0)
            summary["val/acc_base"] = ev["val/acc"]
            logger.log({**ev, **compute_now(), "timing_s/eval": time.time() - t0}, step=0)
            _log(f"[eval] step 0 (SFT base): val/acc {ev['val/acc']:.3f}")
            if extrap is not None:
                extrap.observe(model, 0, opt)
        else:
            summary["val/acc_base"] = next((r["val/acc"] for r in read_metrics(run_dir) if r["step"] == 0), float("nan"))
        if cfg.train.progress:
            from tqdm import tqdm

            progress = tqdm(total=cfg.train.steps, initial=start_step, desc="rl", dynamic_ncols=True)

        for step in range(start_step + 1, cfg.train.steps + 1):
            if step == cfg.train.fail_at_step:
                raise RuntimeError(f"train.fail_at_step={step}: forced failure (testing aid)")
            m: dict = {}
            t_gen = time.time()

            # ---- rollout: AQN noise is on the sampling policy only (QeRL) --------------------------
            examples, batch = sample_and_generate(B, step, m)
            per_fn, rewards, passed = _score(task, cfg, examples, batch)
            zero_var = A.zero_variance_groups(rewards, batch.group)  # [N] bool
            m["train/frac_reward_zero_std"] = zero_var.float().view(-1, G)[:, 0].mean().item()
            m["train/reward/mean"] = rewards.mean().item()
            m["train/reward/std"] = rewards.std().item() if len(rewards) > 1 else 0.0
            for name, vals in per_fn.items():
                m[f"train/rewards/{name}"] = sum(vals) / len(vals)
            m["train/pass_rate"] = passed.mean().item()
            m["actor/entropy"] = ((batch.entropy * batch.completion_mask).sum() / batch.completion_mask.sum()).item()
            m["response_length/mean"] = batch.lengths.float().mean().item()
            m["response_length/clip_ratio"] = batch.truncated.float().mean().item()
            gen_tokens = int(batch.completion_mask.sum())
            if curriculum is not None:  # ScaleRL no-positive-resampling: retire prompts that are solved
                rates = passed.view(-1, G).mean(1).tolist()
                curriculum.update([e.key for e in examples], rates)
                m["train/retired_prompts"] = len(curriculum)

            # ---- batch shaping (DAPO dynamic sampling / ScaleRL zero-variance filter) ------------
            if cfg.algo.dynamic_sampling:
                keep = ~zero_var
                parts, part_rewards, offset, rounds, refilled = [batch.select(keep)], [rewards[keep]], len(examples), 0, 0
                have = int(keep.sum()) // G
                while have < B and rounds < cfg.algo.max_resample_rounds:
                    rounds += 1
                    extra, more = sample_and_generate(B - have, step)
                    _, r2, _ = _score(task, cfg, extra, more)
                    gen_tokens += int(more.completion_mask.sum())
                    k2 = ~A.zero_variance_groups(r2, more.group)
                    more.group = more.group + offset
                    offset += len(extra)
                    parts.append(more.select(k2))
                    part_rewards.append(r2[k2])
                    refilled += int(k2.sum()) // G
                    have += int(k2.sum()) // G
                batch, rewards = RolloutBatch.concat(parts), torch.cat(part_rewards)
                m["train/dynamic_sampling/rounds"] = rounds
                m["train/dynamic_sampling/refilled_groups"] = refilled
                m["train/dynamic_sampling/dropped_groups"] = int(zero_var.sum()) // G
            elif cfg.algo.zero_variance_filter:
                m["train/dropped_groups"] = int(zero_var.sum()) // G
                batch, rewards = batch.select(~zero_var), rewards[~zero_var]
            m["timing_s/gen"] = time.time() - t_gen

            # ---- update ------------------------------------------------------------------------
            t_train = time.time()
            trained_tokens = 0
            if len(batch) > 0:
                group = torch.unique(batch.group, return_inverse=True)[1]  # contiguous prompt ids [N]
                adv = A.compute_advantages(rewards, group, cfg.algo)  # [N]
                mask = batch.completion_mask.float()  # [N, T]
                if cfg.algo.mask_truncated:
                    mask = A.mask_truncated(mask, batch.truncated)
                # normalizers from the FULL batch, before micro-batching (loss independent of the split)
                weights = A.token_weights(mask, group, cfg.algo, max_new)  # [N, T]
                ids, attn, T = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
                mbs = cfg.algo.micro_batch_size
                slices = [slice(s, s + mbs) for s in range(0, len(batch), mbs)]
                ref = None
                if cfg.algo.beta > 0:  # reference = the same model with adapters disabled
                    with torch.no_grad(), model.disable_adapter():
                        ref = torch.cat([token_logprobs(model, ids[s], attn[s], T, cfg.rollout.temperature,
                                                        cfg.algo.fp32_lm_head) for s in slices])
                # old log-probs come from the rollout (PPO-off-policy style for mu > 1)
                old = batch.logprobs
                agg: dict[str, float] = {}
                model.train()
                for _ in range(cfg.algo.mu):
                    opt.zero_grad(set_to_none=True)
                    tok_total = 0.0
                    for s in slices:
                        if noise is not None and cfg.noise.apply_in_train_forward:
                            noise.apply(model, step)
                        try:
                            logp = token_logprobs(model, ids[s], attn[s], T, cfg.rollout.temperature, cfg.algo.fp32_lm_head)
                            loss, lm = A.policy_loss(logp, old[s], adv[s], weights[s], mask[s], cfg.algo,
                                                     ref_logp=ref[s] if ref is not None else None)
                            if not torch.isfinite(loss):
                                raise NonFiniteError(f"non-finite loss ({loss.item()}) at step {step}; update refused, "
                                                     "last checkpoint left intact")
                            loss.backward()
                        finally:
                            if noise is not None and cfg.noise.apply_in_train_forward:
                                noise.restore(model)
                        ntok = float(mask[s].sum())
                        tok_total += ntok
                        for k, v in lm.items():  # token-weighted mean over micro-batches (max for ratio/max)
                            agg[k] = max(agg.get(k, -math.inf), v) if k.endswith("/max") else agg.get(k, 0.0) + v * ntok
                        agg["actor/loss"] = agg.get("actor/loss", 0.0) + loss.item() * ntok
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.algo.grad_clip)
                    if not torch.isfinite(grad_norm):
                        raise NonFiniteError(f"non-finite gradient norm at step {step}; update refused, "
                                             "last checkpoint left intact")
                    opt.step()
                    sched.step()
                    trained_tokens += int(mask.sum())
                model.eval()
                n_upd = cfg.algo.mu * max(tok_total, 1.0)
                for k, v in agg.items():
                    m[k] = v if k.endswith("/max") else v / n_upd
                m["actor/grad_norm"] = grad_norm.item()
                m["actor/lr"] = sched.get_last_lr()[0]
            m["train/num_sequences"] = len(batch)
            m["timing_s/train"] = time.time() - t_train

            # ---- extrapolation (NExt): rank-1 records, maybe predict-extend ----------------------
            if extrap is not None:
                m.update(extrap.observe(model, step, opt))

            compute["steps"] += 1
            compute["tokens"] += gen_tokens
            compute["flops"] += 2.0 * n_params * gen_tokens + 6.0 * n_params * trained_tokens
            m["perf/tokens_per_s"] = gen_tokens / max(m["timing_s/gen"], 1e-9)
            if step % cfg.train.eval_every == 0 or step == cfg.train.steps:
                t0 = time.time()
                m.update(evaluate(model, rollout, task, cfg, step))
                m["timing_s/eval"] = time.time() - t0
                m.update(compute_now())
            m["timing_s/step"] = time.time() - t_gen
            logger.log(m, step=step)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(reward=f"{m['train/reward/mean']:.3f}",
                                     acc=f"{m['val/acc']:.3f}" if "val/acc" in m else None)
            if step % cfg.train.ckpt_every == 0 or step == cfg.train.steps:
                save(step)

        last_eval = [r for r in read_metrics(run_dir) if "val/acc" in r][-1]
        summary.update({"status": "finished", "val/acc": last_eval["val/acc"], "val/mean_at_k": last_eval.get("val/mean_at_k"),
                        "steps": cfg.train.steps, **{k: v for k, v in compute_now().items()}})
        if cfg.scaling.fit != "none":
            from rlx.scaling import fit_run

            try:
                summary.update(fit_run(run_dir, cfg.scaling))
            except ValueError as e:  # a fit that cannot be made is reported, not hidden
                summary["scaling/error"] = str(e)
                _log(f"[scaling] no fit: {e}")
        exit_code = 0
    except BaseException as e:
        summary.update({"status": "failed", "error": f"{type(e).__name__}: {e}"})
        raise
    finally:
        if progress is not None:
            progress.close()
        summary["wall_s"] = time.time() - t_start
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        logger.summary({k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and v is not None})
        logger.finish(exit_code)
    _log(f"[done] held-out accuracy: SFT base {summary['val/acc_base']:.3f} -> after RL {summary['val/acc']:.3f} "
         f"({cfg.train.steps} steps, {summary['wall_s']:.0f}s) run dir {run_dir}")
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        # In a sweep, one failing arm must not stop the others: its summary.json says "failed"
        # (with the error) and the reports mark it; the traceback goes to the job's log.
        try:
            return float(run(cfg, run_dir)["val/acc"])
        except Exception as e:
            import traceback

            traceback.print_exc()
            summary = run_dir / "summary.json"
            if not summary.exists():  # died while building, before run() could write its summary
                summary.write_text(json.dumps({"status": "failed", "error": f"{type(e).__name__}: {e}"}, indent=2))
            _log(f"[sweep] job {hc.job.num} failed; continuing with the other jobs")
            return float("nan")
    return float(run(cfg, run_dir)["val/acc"])


if __name__ == "__main__":
    main()
