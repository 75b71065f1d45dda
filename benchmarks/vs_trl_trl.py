"""TRL's side of `benchmarks.vs_trl`: GRPOTrainer built from the same composed rlx config as rlx's run
(model directory, tokenizer, rendered prompts in rlx's sampling order, LoRA, batch, micro-batch, lr, loss),
timed per phase, with peak RSS per phase."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.vs_trl_sides import TRL_SIDES, RssPhases, compose_rlx


def planned_prompts(cfg, tok, steps: int) -> tuple[object, list[list]]:
    """(task, per-step examples): the training prompts rlx's run samples, rendered as rlx renders them
    (`task.render_chat` with model.chat_prompts) and drawn in its seeded order (`rlx.train.build`)."""
    from rlx.tasks import build_task

    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    task.render_chat(tok, all_prompts=cfg.model.chat_prompts)
    return task, [task.sample(cfg.rollout.prompts_per_step) for _ in range(steps)]


def check_prompt_ids(tok, prompts: list[str]) -> None:
    """TRL tokenizes a string prompt as `tok(text=...)` (special tokens added) and applies no chat
    template; rlx's engines use `add_special_tokens=False` on the rendered text. They must agree."""
    for p in prompts:
        ours, theirs = tok(p, add_special_tokens=False).input_ids, tok(text=[p])["input_ids"][0]
        if list(ours) != list(theirs):
            raise ValueError(f"TRL would tokenize a prompt differently from rlx ({len(theirs)} vs {len(ours)} ids; "
                             f"the tokenizer adds special tokens): {p[:80]!r}")


def check_mappable(cfg) -> None:
    """rlx settings that have a TRL counterpart in this bench (else the two sides would differ)."""
    want = {"algo.loss": "ppo_clip", "algo.aggregation": "sample", "algo.adv_norm": "group", "algo.mu": 1,
            "algo.tis_cap": 0.0, "algo.dynamic_sampling": False, "algo.zero_variance_filter": False,
            "algo.overlong_shaping": False, "algo.mask_truncated": False, "rollout.mode": "sync"}
    bad = {k: cfg[k.split(".")[0]][k.split(".")[1]] for k in want}
    bad = {k: v for k, v in bad.items() if v != want[k]}
    if cfg.rollout.stop_token_ids:
        bad["rollout.stop_token_ids"] = list(cfg.rollout.stop_token_ids)
    if bad:
        raise ValueError(f"vs_trl: rlx settings without a TRL counterpart here: {bad} (expected {want})")


def grpo_args(cfg, work: Path, steps: int, micro: int | None, trl_vllm: bool, gc: bool | None):
    """GRPOConfig mirroring rlx's composed config; `gc` None keeps TRL's gradient_checkpointing default."""
    from trl import GRPOConfig

    a, r = cfg.algo, cfg.rollout
    n = r.prompts_per_step * r.group_size
    per_device = micro or n
    if n % per_device:
        raise ValueError(f"--micro {micro}: {n} sequences per step are not a whole number of micro-batches")
    kwargs = {} if gc is None else {"gradient_checkpointing": gc}
    return GRPOConfig(
        output_dir=str(work / "trl_out"), use_cpu=True, bf16=cfg.trainer.dtype == "bf16", fp16=False,
        # micro-batch = per_device_train_batch_size; the accumulation makes one optimizer step per batch,
        # and generation_batch_size = the whole batch makes one generate call per step, as in rlx
        per_device_train_batch_size=per_device, gradient_accumulation_steps=n // per_device,
        generation_batch_size=n, num_generations=r.group_size, num_iterations=1, shuffle_dataset=False,
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k or 0,
        beta=a.beta, loss_type="grpo", scale_rewards="group", epsilon=a.eps_low, epsilon_high=a.eps_high,
        learning_rate=a.lr, weight_decay=a.weight_decay, max_grad_norm=a.grad_clip, warmup_steps=a.warmup_steps,
        lr_scheduler_type="constant_with_warmup" if a.warmup_steps else "constant",
        max_steps=steps, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        log_completions=False, seed=cfg.seed, dataloader_num_workers=0, use_vllm=trl_vllm, vllm_mode="colocate",
        **kwargs,
    )


class Timing:
    """Per-step (wall, process CPU) seconds of TRL's steps and generation phases, completion lengths,
    and RSS phase marks at their boundaries."""

    def __init__(self):
        self.rss = RssPhases()
        self.gen: list[tuple[float, float]] = []
        self.step: list[tuple[float, float]] = []
        self.lens: list[float] = []

    def steps(self) -> list[dict]:
        return [{"step": i + 1, "step_s": s, "gen_s": g, "train_s": s - g, "mean_len": n,
                 "step_cpu": sc, "gen_cpu": gc, "train_cpu": sc - gc}
                for i, ((s, sc), (g, gc), n) in enumerate(zip(self.step, self.gen, self.lens))]


def timed_trainer(timing: Timing):
    """(GRPOTrainer subclass timing its generation phase, callback timing each optimizer step)."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        """Times its own generation phase (sampling + rewards + advantages) by calling the parent's."""

        def _generate_and_score_completions(self, inputs):
            timing.rss.mark("gen")
            t0, c0 = time.perf_counter(), time.process_time()
            out = super()._generate_and_score_completions(inputs)
            if self.model.training:
                timing.gen.append((time.perf_counter() - t0, time.process_time() - c0))
                timing.lens.append(out["completion_mask"].sum(1).float().mean().item())
            timing.rss.mark("update")  # the micro-batches' forward/backward and the optimizer step follow
            return out

    class StepTimer(TrainerCallback):
        """One optimizer step: generation, loss, backward, clip, optimizer and scheduler step."""

        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            timing.step.append((time.perf_counter() - self.t0, time.process_time() - self.c0))
            timing.rss.mark("other")

    return TimedGRPOTrainer, StepTimer()


def worker_trl(spec: dict, work: Path, side: str) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    from rlx.models import DTYPES, base_dir, load_tokenizer

    torch.set_num_threads(spec["threads"])
    timing = Timing()
    cfg = compose_rlx(spec["overrides"])  # the shared settings only: --rlx-override extras are rlx's alone
    check_mappable(cfg)
    tok = load_tokenizer(cfg.model)
    task, plan = planned_prompts(cfg, tok, spec["steps"])
    by_prompt = {e.prompt: e for e in task.train}
    check_prompt_ids(tok, [e.prompt for step in plan for e in step])
    seen: list[list[str]] = []  # distinct prompts scored per generation call, in order

    def rlx_reward(prompts, completions, **_):
        """rlx's task scoring (parses text) for TRL's reward-function interface."""
        seen.append(list(dict.fromkeys(prompts)))
        return task.total_reward(task.score([by_prompt[p] for p in prompts], completions))

    model = AutoModelForCausalLM.from_pretrained(base_dir(cfg), dtype=DTYPES[cfg.model.dtype], local_files_only=True)
    args = grpo_args(cfg, work, spec["steps"], spec["micro"], spec["trl_vllm"], TRL_SIDES[side])
    lora = cfg.model.lora
    trainer_cls, step_timer = timed_trainer(timing)
    trainer = trainer_cls(
        model=model, reward_funcs=rlx_reward, args=args, processing_class=tok,
        train_dataset=Dataset.from_dict({"prompt": [e.prompt for step in plan for e in step]}),
        peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                               target_modules=list(lora.target_modules), task_type="CAUSAL_LM"),
        callbacks=[step_timer],
    )
    trainer.train()
    if not (len(timing.step) == len(timing.gen) == spec["steps"]):
        raise RuntimeError(f"TRL timing: {len(timing.step)} steps, {len(timing.gen)} generations, "
                           f"expected {spec['steps']}")
    return {"steps": timing.steps(), "prompts": seen, "gradient_checkpointing": bool(args.gradient_checkpointing),
            **timing.rss.report()}
