"""`python -m rlx.eval [RUN_DIR | RUN_DIR/ckpt/step_N | EXPORTED_DIR] [key=value ...] [--k 1,4,16] [--out DIR]`
(rlx-eval): training's policy, engine and run_eval, so it reproduces the run's val/* metrics (docs/eval.md)."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from rlx.eval.metrics import parse_ks
from rlx.eval.source import Source, load_config, load_weights, resolve, split_args
from rlx.run.logging import say

EPILOG = """examples:
  rlx-eval outputs/runs/2026-12-01_10-00-00                   # the run's newest intact checkpoint
  rlx-eval outputs/runs/RUN/ckpt/step_20 rollout.eval_k=16     # one checkpoint, 16 samples per prompt
  rlx-eval docs/runs/NAME/final_adapter --out DIR              # an adapter exported by rlx-export
  rlx-eval model=smollm2 task=gsm8k task.train_path=... task.eval_path=... rollout=vllm   # the base alone
sampling: rollout.eval_k (n samples per prompt), rollout.eval_temperature, rollout.eval_top_p,
rollout.eval_top_k, rollout.eval_max_new_tokens; progress per rollout.eval_chunk sequences."""


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="rlx-eval", description="Evaluate a run, a checkpoint, an exported adapter or "
                                 "the base model on the task's eval sets: greedy accuracy, mean@n, pass@k, maj@k.",
                                 epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*", help="a run directory, RUN/ckpt/step_N or an exported adapter directory "
                    "(rlx-export; none: the base model), then "
                    "key=value overrides (Hydra overrides, config groups included, for the base)")
    ap.add_argument("--k", default=None, help="comma-separated k of pass@k and maj@k, each <= rollout.eval_k "
                    "(default: 1, 2, 4, ... and n)")
    ap.add_argument("--out", default=None, help="output directory (default: RUN/eval/step_N, EXPORTED_DIR/eval/step_N, "
                    "or outputs/eval/<time> for the base)")
    return ap.parse_args(argv)


def out_dir(src: Source, given: str | None) -> Path:
    if given:
        return Path(given)
    if src.run_dir is not None and src.run_dir.is_dir():
        return src.run_dir / "eval" / src.label
    return Path("outputs") / "eval" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def build(cfg, src: Source, trainer):
    """(task, policy, engine) as rlx.train.build makes them, the policy holding the checkpoint's weights."""
    from rlx.run.device import seed_everything
    from rlx.models import base_dir, build_policy
    from rlx.rollout import build_engine, max_sequence_len
    from rlx.tasks import build_task
    from rlx.envs import env_task

    seed_everything(cfg.seed)
    task = env_task(cfg.env, cfg.seed, cfg.task) or build_task(cfg.task)  # env=verifiers: its eval dataset
    task.set_seed(cfg.seed)
    policy, tok = build_policy(cfg, task, say, trainer.device)
    seed_everything(cfg.seed)
    if src.checkpoint is not None:
        load_weights(src, policy)  # verified again; the adapter into the policy
        say(f"[rlx-eval] loaded {src.checkpoint} (step {src.step})")
    probe = [e.prompt for e in task.train[:64]] + [e.prompt for ex in task.eval_sets.values() for e in ex[:64]]
    engine = build_engine(cfg.rollout, tok, policy, trainer, fp32_head=cfg.algo.fp32_lm_head, base_dir=base_dir(cfg),
                          seed=cfg.seed, max_len=max_sequence_len(cfg.rollout, tok, probe), quant_format=cfg.quant.format)
    engine.sync(policy, src.step)
    return task, policy, engine


def prepare(argv: list[str] | None = None):
    """Everything that can be refused, refused before any model is built: (args, source, cfg, ks, trainer)."""
    from rlx.config.preflight import check

    args = parse_args(argv)
    path, overrides = split_args(args.args)
    src = resolve(path)
    cfg = load_config(src, overrides)
    n = cfg.rollout.eval_k
    if n == 0 and args.k is not None:
        raise ValueError(f"--k {args.k}: rollout.eval_k=0 draws no samples; set rollout.eval_k=N (N >= every k)")
    ks = parse_ks(args.k, n) if n else []
    trainer = check(cfg)  # every group's values, rollout.eval_* among them; trainer.threads=N: N torch threads
    if cfg.trainer.threads == -1:  # one per free core, as rlx.train.run does; evaluation keeps the first count
        from rlx.run.threads import ThreadGovernor

        ThreadGovernor.started()
    return args, src, cfg, ks, trainer


def main(argv: list[str] | None = None) -> dict:
    """The command: a refused input exits with its message before any model is built."""
    try:
        prepared = prepare(argv)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"rlx-eval: error: {e}") from None
    return evaluate(*prepared)


def evaluate(args, src: Source, cfg, ks: list[int], trainer) -> dict:
    """Build, generate, score, write; returns the report (what results.json holds)."""
    from omegaconf import OmegaConf

    from rlx.eval.report import markdown, summarize, write
    from rlx.eval.evaluate import eval_generator, eval_sampling, run_eval, val_metrics

    out = out_dir(src, args.out)
    t0 = time.time()
    task, policy, engine = build(cfg, src, trainer)
    try:
        t_eval = time.time()
        results = run_eval(engine, task, cfg.rollout, eval_generator(cfg.seed, src.step),
                           label=f"[rlx-eval] {src.label}")
        wall_eval = time.time() - t_eval
    finally:
        engine.close()
    greedy, sampled = eval_sampling(cfg.rollout)
    report = {
        "source": {"kind": src.kind, "path": str(src.path) if src.path else None, "checkpoint": str(src.checkpoint)
                   if src.checkpoint else None, "step": src.step, "label": src.label},
        "task": cfg.task.name, "model": cfg.model.path or cfg.model.get("gguf_file") or cfg.model.source,
        "engine": cfg.rollout.engine, "seed": cfg.seed, "ks": ks,
        "sampling": {"n": cfg.rollout.eval_k, "greedy": asdict(greedy),
                     "samples": asdict(sampled) if sampled else None},
        "sets": summarize(results, ks),
        "val": val_metrics(results, task.named_eval),  # exactly what training logs as val/*
        "wall_s": {"eval": wall_eval, "total": time.time() - t0},
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    paths = write(out, report, results)
    print(markdown(report), flush=True)
    say(f"[rlx-eval] {paths['json']}, {paths['md']}, {paths['jsonl']} ({wall_eval:.1f}s evaluating)")
    return report


if __name__ == "__main__":
    main()
