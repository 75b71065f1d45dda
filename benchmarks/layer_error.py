"""How far each layer of a quantized base is from its full-precision weight, per format.

For every layer `quantize_model` would replace (the same targets, nvfp4's global scale shared per fused
group, nf4's double quantization: `rlx.quant.model.quantized_weights`), with W [N, K] the weight in fp32 and
Q = dequantize(quantize(W)) in fp32:

    rel_fro  = ||W - Q||_F / ||W||_F
    max_abs  = max |W - Q|
    out_rel  = ||X (W - Q)^T||_F / ||X W^T||_F     (X [n, K]: inputs the layer received, when given)

`out_rel` is each layer's own error on real inputs (the unquantized model's), not the error that builds up
through the quantized layers before it. `summarize` pools the rows per format (all layers, and per layer
type: q_proj, k_proj, ...). The command over a model is `python -m benchmarks.quant_error` (docs/quant.md).
"""

from __future__ import annotations

import statistics

import torch
from torch import Tensor, nn

from rlx.quant.config import QuantConfig
from rlx.quant.formats import dequantize
from rlx.quant.model import quantized_weights


@torch.no_grad()
def weight_error(weight: Tensor, deq: Tensor) -> dict[str, float]:
    """rel_fro and max_abs of a dequantized weight `deq` against `weight` (both [N, K], compared in fp32)."""
    w, q = weight.detach().float(), deq.detach().float()
    if w.shape != q.shape:
        raise ValueError(f"weight {tuple(w.shape)} and its dequantized values {tuple(q.shape)} differ in shape")
    diff = w - q
    norm = w.norm()
    return {"rel_fro": float(diff.norm() / norm) if norm > 0 else float(diff.norm() > 0),
            "max_abs": float(diff.abs().max()) if diff.numel() else 0.0}


@torch.no_grad()
def output_error(x: Tensor, weight: Tensor, deq: Tensor) -> float:
    """||x (W - Q)^T||_F / ||x W^T||_F for inputs x [n, K] (no bias: it cancels in the difference)."""
    x = x.detach().float()
    ref = x @ weight.detach().float().T  # [n, N]
    norm = ref.norm()
    diff = (x @ (weight.detach().float() - deq.detach().float()).T).norm()
    return float(diff / norm) if norm > 0 else float(diff > 0)


def layer_type(name: str) -> str:
    """self_attn.q_proj -> q_proj."""
    return name.rsplit(".", 1)[-1]


@torch.no_grad()
def model_errors(model: nn.Module, configs: dict[str, QuantConfig],
                 inputs: dict[str, Tensor] | None = None) -> list[dict]:
    """One row per (format, quantized layer): {"format", "layer" (block.name), "block", "type", "shape",
    "rel_fro", "max_abs", "out_rel" (None without inputs)}. `configs`: format name -> its QuantConfig;
    `inputs`: "block.name" -> X [n, K] (e.g. from `capture_inputs`). The model is not changed."""
    rows = []
    for fmt, cfg in configs.items():
        if cfg.format != fmt:
            raise ValueError(f"configs[{fmt!r}] has quant.format={cfg.format!r}")
        for index, name, linear, qt in quantized_weights(model, cfg):
            key = f"{index}.{name}"
            deq = dequantize(qt, torch.float32)
            row = {"format": fmt, "layer": key, "block": index, "type": layer_type(name),
                   "shape": list(linear.weight.shape), **weight_error(linear.weight, deq), "out_rel": None}
            if inputs is not None and key in inputs:
                row["out_rel"] = output_error(inputs[key], linear.weight, deq)
            rows.append(row)
    return rows


@torch.no_grad()
def capture_inputs(model: nn.Module, targets, run, max_rows: int = 256) -> dict[str, Tensor]:
    """The inputs each targeted linear layer of the decoder blocks receives while `run()` runs the model:
    "block.name" -> X [n, K] (fp32, at most `max_rows` rows, evenly spaced over what it saw). `run` is a
    no-argument callable that does the forward passes (it decides which tokens count, e.g. no padding)."""
    from rlx.quant.model import decoder_layers, target_linears

    seen: dict[str, list[Tensor]] = {}
    handles = []
    for index, layer in enumerate(decoder_layers(model)):
        for name, linear in target_linears(layer, targets).items():
            key = f"{index}.{name}"

            def hook(_module, args, _out, key=key):
                seen.setdefault(key, []).append(args[0].detach().reshape(-1, args[0].shape[-1]).float())

            handles.append(linear.register_forward_hook(hook))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    out = {}
    for key, parts in seen.items():
        x = torch.cat(parts)  # [n, K]
        if x.shape[0] > max_rows:
            x = x[torch.linspace(0, x.shape[0] - 1, max_rows).round().long()]
        out[key] = x
    return out


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "median": statistics.median(values), "max": max(values),
            "min": min(values)}


def summarize(rows: list[dict]) -> dict[str, dict]:
    """Per format: {"layers": n, "rel_fro": stats, "max_abs": stats, "out_rel": stats or None, "worst": the row
    with the largest rel_fro, "by_type": {type: {"layers", "rel_fro": stats, "out_rel": stats or None}}};
    stats = mean, median, max, min over layers."""
    out: dict[str, dict] = {}
    for fmt in dict.fromkeys(r["format"] for r in rows):
        mine = [r for r in rows if r["format"] == fmt]
        outs = [r["out_rel"] for r in mine if r["out_rel"] is not None]
        by_type = {}
        for t in dict.fromkeys(r["type"] for r in mine):
            of_t = [r for r in mine if r["type"] == t]
            t_outs = [r["out_rel"] for r in of_t if r["out_rel"] is not None]
            by_type[t] = {"layers": len(of_t), "rel_fro": _stats([r["rel_fro"] for r in of_t]),
                          "out_rel": _stats(t_outs) if t_outs else None}
        worst = max(mine, key=lambda r: r["rel_fro"])
        out[fmt] = {"layers": len(mine), "rel_fro": _stats([r["rel_fro"] for r in mine]),
                    "max_abs": _stats([r["max_abs"] for r in mine]), "out_rel": _stats(outs) if outs else None,
                    "worst": {"layer": worst["layer"], "rel_fro": worst["rel_fro"], "out_rel": worst["out_rel"]},
                    "by_type": by_type}
    return out


def markdown(summary: dict[str, dict]) -> str:
    """Two tables: per format over all layers, then per format and layer type (mean / median / max)."""
    pct = lambda v: "–" if v is None else f"{100 * v:.2f}"  # noqa: E731
    lines = ["| format | layers | rel. Frobenius error %: mean / median / worst (layer) | max abs error (largest) "
             "| rel. output error %: mean / median / max |", "|---|---|---|---|---|"]
    for fmt, s in summary.items():
        o = s["out_rel"]
        lines.append(f"| {fmt} | {s['layers']} | {pct(s['rel_fro']['mean'])} / {pct(s['rel_fro']['median'])} / "
                     f"{pct(s['worst']['rel_fro'])} ({s['worst']['layer']}) | {s['max_abs']['max']:.4g} | "
                     + ("–" if o is None else f"{pct(o['mean'])} / {pct(o['median'])} / {pct(o['max'])}") + " |")
    types = list(dict.fromkeys(t for s in summary.values() for t in s["by_type"]))
    lines += ["", "Relative Frobenius error % by layer type, mean / max over blocks (relative output error % "
              "mean in brackets):", "", "| format | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
    for fmt, s in summary.items():
        cells = []
        for t in types:
            b = s["by_type"].get(t)
            if b is None:
                cells.append("–")
                continue
            extra = "" if b["out_rel"] is None else f" ({pct(b['out_rel']['mean'])})"
            cells.append(f"{pct(b['rel_fro']['mean'])} / {pct(b['rel_fro']['max'])}{extra}")
        lines.append(f"| {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
