"""The shared setup of `benchmarks.vs_trl` and rlx's worker process: the random Qwen2 models of the
tiny mode, the rlx overrides both sides are built from, peak-RSS accounting, and rlx's step loop.
TRL's worker is `benchmarks.vs_trl_trl`."""

from __future__ import annotations

import re
import resource
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Qwen2 shapes; head_dim = hidden / heads stays >= 32 (vLLM's CPU attention needs it).
SIZES: dict[str, dict] = {
    "1m": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "10m": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=4),
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PHASES = ("step", "gen", "train")
SEED = 0
# Shared settings per mode: tiny = random Qwen2 + char tokenizer + task=arith (micro None: rlx keeps its
# algo.micro_batch_size default, TRL one batch); real = a pretrained model + chat prompts of
# task=wordproblems (one-step problems, as experiment=smollm2_wordproblems) with equal micro-batches.
MODE_DEFAULTS = {
    "tiny": dict(prompts=16, group=8, max_new="32,128", micro=None, lr=1e-5, lora_r=8, lora_alpha=16,
                 trl_sides="trl_nogc"),
    "real": dict(prompts=4, group=4, max_new="160", micro=4, lr=1e-4, lora_r=16, lora_alpha=32,
                 trl_sides="trl,trl_nogc"),
}
TRL_SIDES = {"trl": None, "trl_nogc": False}  # side -> GRPOConfig(gradient_checkpointing=...); None: TRL's default


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


def compose_rlx(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import rlx.config  # noqa: F401  (registers the schemas)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def model_overrides(model: str | None, model_path: str | None, tiny_dir: str | None, dtype: str | None) -> list[str]:
    """The model and task part: tiny (`tiny_dir`, task=arith), `--model NAME` (conf/model/NAME.yaml) or
    `--model-path DIR` (model=hf), the last two with the chat prompts of one-step word problems."""
    dt = [f"model.dtype={dtype}"] if dtype else []
    if tiny_dir:
        return ["model=hf", f"model.path={tiny_dir}", *dt, "task=arith", "task.n_eval=16"]
    model = [f"model={model}"] if model else ["model=hf", f"model.path={model_path}", "model.chat_prompts=true"]
    # evaluation (rlx's steps 0 and N, untimed) on 4 prompts with a short budget: it only costs wall time
    return [*model, *dt, "task=wordproblems", "task.steps=1", "task.n_eval=4", "rollout.eval_max_new_tokens=16"]


def shared_overrides(base: list[str], s: dict, max_new: int, steps: int, threads: int) -> list[str]:
    """Every setting both sides share (the TRL worker composes the same config and reads them off it);
    `s`: prompts, group, micro, lr, lora_r, lora_alpha. rlx's other defaults stay as shipped."""
    micro = [f"algo.micro_batch_size={s['micro']}"] if s["micro"] else []
    return [
        *base, f"rollout.prompts_per_step={s['prompts']}", f"rollout.group_size={s['group']}",
        f"rollout.max_new_tokens={max_new}", f"model.lora.r={s['lora_r']}", f"model.lora.alpha={s['lora_alpha']}",
        f"algo.lr={s['lr']}", *micro, f"seed={SEED}", f"train.steps={steps}", f"train.eval_every={steps}",
        f"train.ckpt_every={steps}", "logger.mode=disabled", "train.progress=false", "rollout.eval_k=0",
        f"trainer.threads={threads}",
    ]


# ---- peak resident memory ------------------------------------------------------------------------
def _hwm_mib() -> float:
    """The process's peak RSS in MiB: /proc's VmHWM (the counter behind getrusage's ru_maxrss on Linux)."""
    try:
        m = re.search(r"VmHWM:\s+(\d+)\s+kB", Path("/proc/self/status").read_text())
    except OSError:
        m = None
    return int(m.group(1)) / 1024 if m else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_hwm() -> bool:
    """Set the peak RSS back to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class RssPhases:
    """Peak RSS per phase (MiB): at each boundary the peak since the last one goes to the phase that
    ends, and the counter is reset, so the process peak is the max over phases. Without a resettable
    counter only the process peak is known (`peaks` then holds `load` alone)."""

    def __init__(self):
        self.resettable = _reset_hwm()
        self.phase, self.peaks = "load", {}

    def mark(self, next_phase: str) -> None:
        if not self.resettable:
            return
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), _hwm_mib())
        _reset_hwm()
        self.phase = next_phase

    def report(self) -> dict:
        """{"peak_rss_mb": process peak, "<phase>_rss_mb": peak within that phase (max over steps)}."""
        if not self.resettable:
            return {"peak_rss_mb": _hwm_mib()}
        self.mark(self.phase)
        return {"peak_rss_mb": max(self.peaks.values()), **{f"{k}_rss_mb": v for k, v in self.peaks.items()}}


# ---- rlx side ------------------------------------------------------------------------------------
def _timed(fn, out: list, before=None, after=None, record=None):
    """`fn`, appending the process CPU seconds of each call to `out`; `before()` / `after()` run around
    it (RSS phase marks) and `record(args)` sees its arguments."""
    def wrapped(*args, **kwargs):
        if before is not None:
            before()
        if record is not None:
            record(args)
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            out.append(time.process_time() - t0)
            if after is not None:
                after()
    return wrapped


def worker_rlx(spec: dict, work: Path) -> dict:
    """rlx's `train.run` on the spec's overrides (+ its rlx-only extras): per-step times, peak RSS per
    phase and the prompts each step trained on."""
    import rlx.algo
    import rlx.rollout.sampled
    import rlx.train
    from rlx.run.records import read_metrics
    from rlx.run.resume import RunState

    cfg = compose_rlx(spec["overrides"] + spec["rlx_extra"])
    run_dir = work / "rlx_run"
    # Process CPU time per step (the RL step: from its `generate` to its compute count, RunState.count_step;
    # evaluation, logging and checkpoint excluded) and per update (a call of the bound `algo.Update`), in
    # this process only; the wall times come from metrics.jsonl. rlx.train looks `generate` and `score` up
    # at call time (a refill's in rlx.rollout.sampled), and the Update built in `build` calls its class's
    # __call__.
    cpu_step: list[float] = []
    cpu_train: list[float] = []
    prompts: list[list[str]] = []
    rss = RssPhases()
    started: list[float] = []

    def step_start() -> None:
        started.append(time.process_time())
        rss.mark("gen")

    def step_end() -> None:
        cpu_step.append(time.process_time() - started.pop())
        rss.mark("other")

    rlx.train.generate = _timed(rlx.train.generate, [], before=step_start)
    RunState.count_step = _timed(RunState.count_step, [], after=step_end)
    rlx.algo.Update.__call__ = _timed(rlx.algo.Update.__call__, cpu_train, before=lambda: rss.mark("update"),
                                      after=lambda: rss.mark("gen"))  # after the update: weight sync (-> gen, as TRL's)
    rlx.train.score = rlx.rollout.sampled.score = _timed(
        rlx.rollout.sampled.score, [], record=lambda args: prompts.append([e.prompt for e in args[1]]))
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
    if not (len(cpu_step) == len(cpu_train) == len(steps)):
        raise RuntimeError(f"rlx timing: {len(steps)} steps logged, {len(cpu_step)} RL steps and "
                           f"{len(cpu_train)} update calls timed")
    for s, c, t in zip(steps, cpu_step, cpu_train):
        s.update(step_cpu=c, gen_cpu=c - t, train_cpu=t)
    return {"steps": steps, "prompts": prompts, **rss.report()}
