"""The two sides of `rlx.bench.vs_trl`: the shared random Qwen2 model, rlx's and TRL's worker processes (one step loop each)."""

from __future__ import annotations

import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"

# Qwen2 shapes; head_dim = hidden / heads stays >= 32 (vLLM's CPU attention needs it).
SIZES: dict[str, dict] = {
    "1m": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "10m": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=4),
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS_PER_STEP, GROUP_SIZE, LORA_R, LORA_ALPHA, LR, SEED = 16, 8, 8, 16, 1e-5, 0
PHASES = ("step", "gen", "train")


# ---- model ---------------------------------------------------------------------------------------
def build_model_dir(size: str, out_dir: Path) -> int:
    """Random-init Qwen2 of `size` + the char tokenizer saved to `out_dir`; returns the parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    shape = SIZES[size]
    if shape["hidden_size"] // shape["num_attention_heads"] < 32:
        raise ValueError(f"size {size}: head_dim < 32")
    config = Qwen2Config(
        vocab_size=len(tok), max_position_embeddings=512, tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **shape,
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters())


# ---- rlx side ------------------------------------------------------------------------------------
def compose_rlx(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import rlx.config  # noqa: F401  (registers the schemas)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def rlx_overrides(model_dir: str, max_new: int, steps: int, engine: str, dtype: str, threads: int) -> list[str]:
    return [
        f"rollout={engine}", "model=hf", f"model.path={model_dir}", f"model.dtype={dtype}", "task=arith",
        f"rollout.prompts_per_step={PROMPTS_PER_STEP}", f"rollout.group_size={GROUP_SIZE}",
        f"rollout.max_new_tokens={max_new}", f"model.lora.r={LORA_R}", f"model.lora.alpha={LORA_ALPHA}",
        f"algo.lr={LR}", f"seed={SEED}", f"train.steps={steps}", f"train.eval_every={steps}",
        f"train.ckpt_every={steps}", "logger.mode=disabled", "train.progress=false", "rollout.eval_k=0",
        "task.n_eval=16", f"trainer.threads={threads}",
    ]


def _cpu_timed(fn, out: list):
    """`fn`, appending the process CPU seconds of each call to `out`."""
    def wrapped(*args, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            out.append(time.process_time() - t0)
    return wrapped


def worker_rlx(a) -> dict:
    import rlx.algo
    import rlx.train
    from rlx.runs import read_metrics

    cfg = compose_rlx(rlx_overrides(a.model_dir, a.max_new, a.steps, a.engine, a.dtype, a.threads) + list(a.rlx_override))
    run_dir = Path(a.work) / "rlx_run"
    # Process CPU time per step (`rl_step`, evaluation excluded) and per update (`algo.update`), in this
    # process only; the wall times come from metrics.jsonl. Skipped where the loop has no such functions.
    cpu_step: list[float] = []
    cpu_train: list[float] = []
    if callable(getattr(rlx.train, "rl_step", None)) and callable(getattr(rlx.algo, "update", None)):
        rlx.train.rl_step = _cpu_timed(rlx.train.rl_step, cpu_step)
        rlx.algo.update = _cpu_timed(rlx.algo.update, cpu_train)
    rlx.train.run(cfg, run_dir)
    rows = [r for r in read_metrics(run_dir) if r.get("step", 0) >= 1 and "timing_s/step" in r]
    steps = [{
        "step": r["step"],
        "step_s": r["timing_s/step"] - (r.get("timing_s/eval") or 0.0),  # evaluation excluded
        # + the weight sync to the engine (vLLM), which TRL does inside its generation phase
        "gen_s": r["timing_s/gen"] + (r.get("timing_s/sync") or 0.0),
        "train_s": r["timing_s/train"],
        "mean_len": r["response_length/mean"],
    } for r in rows]
    if len(cpu_step) == len(cpu_train) == len(steps):
        for s, c, t in zip(steps, cpu_step, cpu_train):
            s.update(step_cpu=c, gen_cpu=c - t, train_cpu=t)
    return {"steps": steps}


# ---- TRL side ------------------------------------------------------------------------------------
def worker_trl(a) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlx.models import DTYPES
    from rlx.tasks import build_task

    torch.set_num_threads(a.threads)
    # the same arith train split as the rlx run (same task config)
    task = build_task(compose_rlx(["task=arith", "task.n_eval=16"]).task)
    by_prompt = {e.prompt: e for e in task.train}

    def arith_reward(prompts, completions, **_):
        """rlx's task scoring (parses text) for TRL's reward-function interface."""
        return task.total_reward(task.score([by_prompt[p] for p in prompts], completions))

    gen_s: list[tuple[float, float]] = []  # (wall, process CPU) seconds
    lens: list[float] = []
    step_s: list[tuple[float, float]] = []

    class TimedGRPOTrainer(GRPOTrainer):
        """Times its own generation phase (sampling + rewards + advantages) by calling the parent's."""

        def _generate_and_score_completions(self, inputs):
            t0, c0 = time.perf_counter(), time.process_time()
            out = super()._generate_and_score_completions(inputs)
            if self.model.training:
                gen_s.append((time.perf_counter() - t0, time.process_time() - c0))
                lens.append(out["completion_mask"].sum(1).float().mean().item())
            return out

    class StepTimer(TrainerCallback):
        """One optimizer step: generation, loss, backward, clip, optimizer and scheduler step."""

        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            step_s.append((time.perf_counter() - self.t0, time.process_time() - self.c0))

    tok = AutoTokenizer.from_pretrained(a.model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=DTYPES[a.dtype], local_files_only=True)
    n = PROMPTS_PER_STEP * GROUP_SIZE
    args = GRPOConfig(
        output_dir=str(Path(a.work) / "trl_out"), use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False, per_device_train_batch_size=n, gradient_accumulation_steps=1,
        num_generations=GROUP_SIZE, generation_batch_size=n, num_iterations=1, max_completion_length=a.max_new,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="grpo", scale_rewards="group",
        epsilon=0.2, learning_rate=LR, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        max_steps=a.steps, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        log_completions=False, seed=SEED, dataloader_num_workers=0,
        use_vllm=a.trl_vllm, vllm_mode="colocate",
    )
    trainer = TimedGRPOTrainer(
        model=model, reward_funcs=arith_reward, args=args, processing_class=tok,
        train_dataset=Dataset.from_dict({"prompt": [e.prompt for e in task.train]}),
        peft_config=LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
                               task_type="CAUSAL_LM"),
        callbacks=[StepTimer()],
    )
    trainer.train()
    if not (len(step_s) == len(gen_s) == a.steps):
        raise RuntimeError(f"TRL timing: {len(step_s)} steps, {len(gen_s)} generations, expected {a.steps}")
    steps = [{"step": i + 1, "step_s": s, "gen_s": g, "train_s": s - g, "mean_len": n_,
              "step_cpu": sc, "gen_cpu": gc, "train_cpu": sc - gc}
             for i, ((s, sc), (g, gc), n_) in enumerate(zip(step_s, gen_s, lens))]
    return {"steps": steps}
