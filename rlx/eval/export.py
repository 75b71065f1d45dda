"""`python -m rlx.eval.export RUN_OR_CHECKPOINT OUT_DIR` (rlx-export): a LoRA checkpoint as a small directory
that anyone can evaluate again (`rlx-eval OUT_DIR`; rlx/eval/export_format.py; docs/eval.md, "Exported adapters").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from rlx.eval.export_format import CONFIG, DTYPE, FORMAT, INFO, PEFT_CONFIG, VERSION, WEIGHTS, is_export
from rlx.run.logging import say


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="rlx-export", description="Export a LoRA checkpoint's adapter in bf16 with "
                                 "its run's config, for `rlx-eval OUT_DIR` (no optimizer state).")
    ap.add_argument("source", help="a run directory (its newest intact checkpoint) or RUN/ckpt/step_N")
    ap.add_argument("out", help="the directory to write (absent or empty)")
    return ap.parse_args(argv)


def _refuse_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"OUT_DIR {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise FileExistsError(f"OUT_DIR {out} already exists and is not empty; remove it or name another directory")


def prepare(argv: list[str] | None = None):
    """Everything that can be refused, refused before anything is read or written: (source, cfg, out)."""
    from rlx.eval.source import load_config, resolve
    from rlx.run.checkpoint import MODEL, verify

    args = parse_args(argv)
    out = Path(args.out)
    _refuse_out(out)
    if is_export(Path(args.source)):
        raise ValueError(f"{args.source} is already an exported adapter ({INFO}); copy it as it is")
    src = resolve(args.source)  # a run's newest intact checkpoint, or one checkpoint verified (bad file named)
    if MODEL in verify(src.checkpoint)["files"]:
        raise ValueError(f"{src.checkpoint} is a full fine-tuning checkpoint (model.finetune=full: {MODEL}); only a "
                         f"LoRA adapter is exported (the whole model is hundreds of MB, no file for the repository: "
                         f"rlx-merge {src.checkpoint} --out DIR writes it as an HF model directory)")
    cfg = load_config(src, [])
    return src, cfg, out


def export(src, cfg, out: Path) -> dict:
    """Write the export of `src` (a verified LoRA checkpoint) to `out`; returns export.json."""
    import torch
    from omegaconf import OmegaConf
    from safetensors.torch import save_file

    from rlx.models import base_dir
    from rlx.run.checkpoint import ADAPTER, _fsync, _sha256, read_adapter, verify
    from rlx.run.logging import git_sha

    manifest = verify(src.checkpoint)  # again: the files read below are the ones checked
    weights = read_adapter(src.checkpoint)  # refuses non-finite tensors, naming the file
    peft_config = src.checkpoint / Path(ADAPTER).parent / PEFT_CONFIG
    cast = {n: (w.to(DTYPE) if w.is_floating_point() else w).contiguous() for n, w in weights.items()}
    info = {
        "format": FORMAT, "version": VERSION, "source": str(src.path), "checkpoint": str(src.checkpoint),
        "step": src.step, "dtype": str(DTYPE).removeprefix("torch."),
        "source_dtypes": sorted({str(w.dtype).removeprefix("torch.") for w in weights.values()}),
        "source_sha256": manifest["files"][ADAPTER]["sha256"], "tensors": len(cast),
        "parameters": sum(w.numel() for w in cast.values()),
        "base_dir": base_dir(cfg).name,  # the base (or SFT) weights the adapter goes on, under model.cache_dir
        "model": cfg.model.path or cfg.model.get("gguf_file") or cfg.model.source,
        "lora": OmegaConf.to_container(cfg.model.lora, resolve=True),
        "git_sha": git_sha(), "written": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_file(cast, str(tmp / WEIGHTS), metadata={"format": "pt"})
        if peft_config.is_file():
            shutil.copyfile(peft_config, tmp / PEFT_CONFIG)
        OmegaConf.save(cfg, tmp / CONFIG, resolve=False)
        info["files"] = {}
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # safetensors writes 0600: an export is for others to read
        for rel in sorted(p.name for p in tmp.iterdir()):
            os.chmod(tmp / rel, mode)
            _fsync(tmp / rel)
            info["files"][rel] = {"size": (tmp / rel).stat().st_size, "sha256": _sha256(tmp / rel)}
        (tmp / INFO).write_text(json.dumps(info, indent=1) + "\n")
        _fsync(tmp / INFO)
        _refuse_out(out)  # nothing appeared there meanwhile
        if out.is_dir():
            out.rmdir()  # empty
        os.rename(tmp, out)
        _fsync(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = info["files"][WEIGHTS]["size"]
    say(f"[export] {src.checkpoint} (step {src.step}): {len(cast)} tensors, {info['parameters']:,} parameters in "
        f"{info['dtype']} ({size / 2**20:.1f} MB) -> {out}; base {info['base_dir']}")
    return info


def main(argv: list[str] | None = None) -> dict:
    try:
        prepared = prepare(argv)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise SystemExit(f"rlx-export: error: {e}") from None
    from rlx.run.checkpoint import CheckpointError

    try:
        return export(*prepared)
    except (ValueError, FileNotFoundError, FileExistsError, CheckpointError) as e:  # changed since prepare verified it
        raise SystemExit(f"rlx-export: error: {e}") from None


if __name__ == "__main__":
    main()
