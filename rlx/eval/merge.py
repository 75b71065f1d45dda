"""`python -m rlx.eval.merge RUN[/ckpt/step_N] [key=value ...] --out DIR`: a checkpoint as a plain HF model.

The policy is built as rlx-eval builds it, its LoRA merged into the base (PEFT's `merge_and_unload`) and saved
with its tokenizer as a safetensors HF directory (a temp directory, renamed); DIR/rlx_merge.json says whence.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from rlx.run.logging import say


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="python -m rlx.eval.merge", description="Merge a checkpoint's LoRA adapter into "
                                 "its base and save a plain HF model directory (safetensors + tokenizer).")
    ap.add_argument("args", nargs="*", help="a run directory (its newest intact checkpoint) or RUN/ckpt/step_N, then "
                    "key=value overrides of the run's keys (as rlx-eval)")
    ap.add_argument("--out", required=True, help="the directory to write (must not exist, unless --force)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    return ap.parse_args(argv)


def prepare(argv: list[str] | None = None):
    """Everything that can be refused, refused before any model is built: (args, source, cfg, out)."""
    from rlx.eval.source import load_config, resolve, split_args
    from rlx.config.preflight import check

    args = parse_args(argv)
    path, overrides = split_args(args.args)
    if path is None:
        raise ValueError("no checkpoint given: merge takes RUN or RUN/ckpt/step_N (the base model needs no merge: "
                         "its HF directory is rlx.models.base_dir, printed by rlx-eval as '[model] loaded ...')")
    src = resolve(path)  # a run (its newest intact checkpoint) or one verified checkpoint
    cfg = load_config(src, overrides)
    if cfg.quant.format != "none":
        raise ValueError(f"quant.format={cfg.quant.format}: the base is quantized, and LoRA merged into packed "
                         f"quantized weights is no plain HF model; merge a run trained with quant.format=none")
    out = Path(args.out)
    if out.exists() and not args.force:
        raise FileExistsError(f"--out {out} already exists; remove it or pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a directory")
    check(cfg)  # every value rlx-eval would refuse; trainer.threads=N: N torch threads
    return args, src, cfg, out


def merged_model(cfg, src):
    """(plain causal LM with the adapter merged, tokenizer, the LoRA policy's config summary)."""
    from rlx.models import build_policy, has_lora
    from rlx.eval.source import load_weights
    from rlx.run.device import seed_everything
    from rlx.tasks import build_task

    seed_everything(cfg.seed)
    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    policy, tok = build_policy(cfg, task, say, "cpu")
    load_weights(src, policy)  # verified again; the adapter (a checkpoint's or an exported one) into the policy
    say(f"[merge] loaded {src.checkpoint} (step {src.step})")
    policy.eval()
    lora = has_lora(policy)
    model = policy.merge_and_unload() if lora else policy
    model.config.use_cache = True  # gradient checkpointing turns it off for training forwards
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.use_cache = True
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), tok, lora


def save(model, tok, out: Path, info: dict, force: bool = False) -> Path:
    """model + tokenizer + rlx_merge.json into a temp dir beside `out`, then renamed to `out`."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "rlx_merge.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
        old = None
        if out.exists():
            if not force:
                raise FileExistsError(f"--out {out} appeared while merging; nothing replaced (the merge is in {tmp})")
            old = out.parent / f".old-{out.name}-{os.getpid()}"
            os.rename(out, old)
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def merge(args, src, cfg, out: Path) -> Path:
    from omegaconf import OmegaConf

    from rlx.models import base_dir
    from rlx.run.logging import git_sha

    t0 = time.time()
    model, tok, lora = merged_model(cfg, src)
    info = {"checkpoint": str(src.checkpoint), "step": src.step, "run_dir": str(src.run_dir),
            "base": str(base_dir(cfg)), "finetune": cfg.model.finetune, "lora_merged": lora,
            "lora": OmegaConf.to_container(cfg.model.lora, resolve=True) if lora else None, "dtype": str(next(model.parameters()).dtype),
            "git_sha": git_sha(), "written": time.strftime("%Y-%m-%d %H:%M:%S")}
    save(model, tok, out, info, force=args.force)
    say(f"[merge] {'LoRA merged into the base' if lora else 'full model'}, saved to {out} ({time.time() - t0:.1f}s)")
    return out


def main(argv: list[str] | None = None) -> Path:
    try:
        prepared = prepare(argv)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise SystemExit(f"merge: error: {e}") from None
    return merge(*prepared)


if __name__ == "__main__":
    main()
