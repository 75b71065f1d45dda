"""Per-layer quantization error of a model's base, per format:
`python -m benchmarks.quant_error [key=value ...] [--formats nvfp4,nf4,mxfp4] [--prompts 8] [--out DIR]`.

The model comes from conf/ with Hydra overrides, as `python -m rlx.train` composes it (`model=smollm2`, or
`experiment=smollm2_wordproblems`; default: the tiny model). For every linear layer that `quant=<format>`
would quantize (conf/quant/<format>.yaml: the same targets, nvfp4's shared global scales, nf4's double
quantization; `quant.<key>=...` overrides apply to every format) it reports the relative Frobenius error
||W - Q(W)|| / ||W||, the largest absolute error, and (with --prompts N > 0) the relative output error
||X (W - Q(W))^T|| / ||X W^T|| on the inputs that layer receives from the unquantized model over the
first N training prompts of the task (benchmarks.layer_error). Prints a summary per format (all layers; per layer
type) and writes DIR/quant_error.json (every layer's row, the summary, the command) and DIR/quant_error.md,
each written atomically. Unknown formats and empty quant.targets are refused before any model is built.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rlx.quant.formats import FORMATS


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.quant_error",
                                 description=__doc__.splitlines()[0],
                                 epilog="example: OMP_NUM_THREADS=1 python -m benchmarks.quant_error model=smollm2 "
                                        "trainer.threads=1")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/config.yaml (model=smollm2, ...)")
    ap.add_argument("--formats", default="nvfp4,nf4,mxfp4", help="comma-separated formats (default: all three)")
    ap.add_argument("--prompts", type=int, default=8,
                    help="training prompts whose layer inputs give the output error (0: weights only; default 8)")
    ap.add_argument("--rows", type=int, default=256, help="input rows kept per layer (default 256)")
    ap.add_argument("--out", default=None, help="output directory (default outputs/quant_error/<time>)")
    return ap.parse_args(argv)


def formats_of(text: str) -> list[str]:
    """The --formats list, refused when empty or naming an unknown format."""
    names = [f.strip() for f in text.split(",") if f.strip()]
    if not names:
        raise ValueError("--formats is empty; choose from " + ", ".join(sorted(FORMATS)))
    bad = [f for f in names if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown quant format(s) {bad}; choose from {', '.join(sorted(FORMATS))} "
                         f"('none' has no error to measure)")
    return list(dict.fromkeys(names))


def prepare(argv: list[str] | None = None):
    """Everything refusable, refused before any model is built: (args, cfg, {format: QuantConfig})."""
    from omegaconf import OmegaConf

    from rlx.config.preflight import check
    from rlx.eval.source import base_config
    from rlx.quant.config import QuantConfig

    args = parse_args(argv)
    formats = formats_of(args.formats)
    if args.prompts < 0 or args.rows < 1:
        raise ValueError(f"--prompts must be >= 0 and --rows >= 1, got {args.prompts} and {args.rows}")
    for o in args.overrides:
        if o.lstrip("+~").split("=", 1)[0] == "quant":
            raise ValueError(f"{o!r}: the formats come from --formats; set quant.<key>=... to change how every "
                             f"format quantizes")
    cfg = base_config(args.overrides)
    check(cfg)  # every value (and trainer.threads=N: N torch threads), as rlx.train does first
    configs = {}
    for fmt in formats:
        node = base_config([*args.overrides, f"quant={fmt}"]).quant
        configs[fmt] = QuantConfig(**OmegaConf.to_container(node, resolve=True))
        if not configs[fmt].targets:
            raise ValueError("quant.targets is empty: no layer would be quantized")
    return args, cfg, formats, configs


def layer_inputs(model, tok, task, targets, n_prompts: int, rows: int):
    """X per targeted layer over the first n_prompts training prompts, one prompt per forward (no padding)."""
    import torch

    from benchmarks.layer_error import capture_inputs

    prompts = [e.prompt for e in task.train[:n_prompts]]

    def run():
        with torch.no_grad():
            for p in prompts:
                ids = tok(p, add_special_tokens=False, return_tensors="pt").input_ids
                model(input_ids=ids)

    return capture_inputs(model, targets, run, max_rows=rows), prompts


def main(argv: list[str] | None = None) -> dict:
    try:
        args, cfg, formats, configs = prepare(argv)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"benchmarks.quant_error: error: {e}") from None
    import torch

    from rlx.models import load_base
    from benchmarks.layer_error import markdown, model_errors, summarize
    from rlx.run.logging import write_text_atomic
    from rlx.tasks import build_task

    t0 = time.time()
    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    model, tok = load_base(cfg, task)
    model.eval()
    inputs, prompts = (None, [])
    if args.prompts:
        targets = next(iter(configs.values())).targets
        inputs, prompts = layer_inputs(model, tok, task, targets, args.prompts, args.rows)
    try:
        rows = model_errors(model, configs, inputs)
    except ValueError as e:  # no decoder blocks, or targets that match no linear layer
        raise SystemExit(f"benchmarks.quant_error: error: {e}") from None
    summary = summarize(rows)
    md = markdown(summary)
    weight_dtypes = sorted({str(p.dtype) for p in model.parameters()})
    source = cfg.model.get("gguf_file") if cfg.model.source == "gguf" else (cfg.model.path or cfg.model.source)
    doc = {
        "command": "python -m benchmarks.quant_error " + " ".join(shlex.quote(a) for a in (
            sys.argv[1:] if argv is None else argv)),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "model": {"source": cfg.model.source, "from": source, "dtype": cfg.model.dtype, "weight_dtypes": weight_dtypes},
        "formats": {f: {k: v for k, v in vars(c).items() if k != "kernel"} for f, c in configs.items()},
        "inputs": {"prompts": len(prompts), "rows_per_layer": args.rows if prompts else 0,
                   "task": cfg.task.name, "note": "each layer's inputs in the unquantized model"},
        "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
        "wall_s": round(time.time() - t0, 1),
        "summary": summary,
        "layers": rows,
    }
    out = Path(args.out) if args.out else Path("outputs") / "quant_error" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    header = (f"# Per-layer quantization error: {source} ({cfg.model.dtype}), {len(rows) // len(formats)} layers, "
              f"output error on {len(prompts)} prompts of {cfg.task.name}\n\n")
    write_text_atomic(out / "quant_error.json", json.dumps(doc, indent=2) + "\n")
    write_text_atomic(out / "quant_error.md", header + md)
    print(header + md)
    print(f"saved {out / 'quant_error.json'}, {out / 'quant_error.md'} ({doc['wall_s']} s)")
    return doc


if __name__ == "__main__":
    main()
