"""A content-addressed store of fitted NExt predictors: a fit is looked up by everything it is computed from.

A fit is a pure function of its inputs and the arithmetic, so runs whose records agree up to a jump share it
(docs/extrapolation.md, `fit_cache`). An entry `<sha256>.pt` is written to a temp file and renamed."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch

from rlx.extrapolation.predictor import PredictorFit, train_predictor

FORMAT = 1  # bump when the predictor, its training or this file's layout changes


def arithmetic() -> str:
    """What decides a fit's bits beyond its inputs: torch, the CPU's kernels, the thread count."""
    return f"torch {torch.__version__}; cpu {torch.backends.cpu.get_cpu_capability()}; threads {torch.get_num_threads()}"


def fit_key(global_x: torch.Tensor, local_x: torch.Tensor, targets: torch.Tensor, settings: dict) -> str:
    """sha256 over the format, the arithmetic, the settings and every input tensor's dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(f"rlx next fit v{FORMAT}; {arithmetic()}; {sorted(settings.items())}".encode())
    for t in (global_x, local_x, targets):
        if t.device.type != "cpu":
            h.update(f"device {t.device}".encode())
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype} {tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def train_or_load(cache_dir: Path, global_x, local_x, targets, **settings) -> tuple[PredictorFit, bool]:
    """`train_predictor(global_x, local_x, targets, **settings)`, or its stored result: (fit, was it stored)."""
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{fit_key(global_x, local_x, targets, settings)}.pt"
    if path.exists():
        try:
            # read onto the CPU whatever device wrote it (from_state builds a CPU net), then move the net
            fit = PredictorFit.from_state(torch.load(path, weights_only=True, map_location="cpu"), global_x.shape[1])
        except Exception as e:  # noqa: BLE001 -- any unreadable entry is reported with its path
            raise RuntimeError(f"extrapolation.fit_cache: cannot read {path} ({type(e).__name__}: {e}); "
                               f"delete it to fit again") from e
        fit.net.to(global_x.device)
        return fit, True
    fit = train_predictor(global_x, local_x, targets, **settings)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # a unique temp name: two runs may fit the same key at once (run/logging.py's write_text_atomic uses a fixed one)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".pt")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(fit.state(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return fit, False
