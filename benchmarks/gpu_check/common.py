"""The GPU check's shared pieces: shapes, the PASS / FAIL / SKIP recorder, the time budget, model and device helpers."""

from __future__ import annotations

import gc
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_TAG = "RLX_ENGINE_RESULT "
PARTS = {"0": "toolchain", "5": "nccl", "1": "vllm", "2": "triton", "3": "rl", "4": "hf"}
# most basic first: a failure early says why the later parts fail; part 1 (7B checkpoints) is the expensive one
ORDER = ("0", "5", "2", "3", "1", "4")

# Qwen2-7B's shapes (random weights, no hub). rope/eps as in the released config.
QWEN2_7B = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
    num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=4096,
    tie_word_embeddings=False, rope_theta=1_000_000.0, rms_norm_eps=1e-6, initializer_range=0.02,
)
# --smoke: head_dim 64 (vLLM's CPU attention needs >= 32); widths multiples of 128 (NVFP4 / Marlin)
TINY = dict(
    vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    tie_word_embeddings=False, rope_theta=10_000.0, rms_norm_eps=1e-6, initializer_range=0.02,
)


# ----------------------------------------------------------------------------------------------
# results


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    figures: dict = field(default_factory=dict)
    reason: str = ""


class Recorder:
    """Collects checks, prints one line each, rewrites the JSON after every part."""

    def __init__(self, out_path: Path, meta: dict):
        self.out_path = out_path
        self.meta = meta
        self.checks: list[Check] = []
        self.start = time.time()

    def add(self, name: str, status: str, figures: dict | None = None, reason: str = "") -> Check:
        check = Check(name, status, figures or {}, reason)
        self.checks.append(check)
        shown = " ".join(
            f"{k}={_fmt(v)}" for k, v in check.figures.items()
            if not isinstance(v, (list, dict)) and not (isinstance(v, str) and len(v) > 80)
        )
        tail = f" -- {reason}" if reason else ""
        print(f"[{status}] {name}: {shown}{tail}", flush=True)
        return check

    def passed(self, name, figures=None, reason=""):
        return self.add(name, "PASS", figures, reason)

    def failed(self, name, figures=None, reason=""):
        return self.add(name, "FAIL", figures, reason)

    def skipped(self, name, reason, figures=None):
        return self.add(name, "SKIP", figures, reason)

    def summary(self) -> dict:
        counts = {s: sum(c.status == s for c in self.checks) for s in ("PASS", "FAIL", "SKIP")}
        return dict(counts, wall_s=round(time.time() - self.start, 1))

    def write(self) -> None:
        data = {**self.meta, "summary": self.summary(), "checks": [asdict(c) for c in self.checks]}
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(self.out_path)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Budget:
    """Wall-clock budget for the whole script: every child process gets at most what is left."""

    def __init__(self, seconds: float):
        self.deadline = time.time() + seconds

    def left(self) -> float:
        return self.deadline - time.time()

    def timeout(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.left()))


def _tail(text: str, n: int = 1500) -> str:
    return text[-n:] if text else ""


# ----------------------------------------------------------------------------------------------
# model building (parts 1 and 4)


def _qwen2_config(shape: dict):
    from transformers import Qwen2Config

    return Qwen2Config(**shape)


def build_random_qwen2(shape: dict, device: str, seed: int = 0):
    """A Qwen2ForCausalLM with random weights (normal, std initializer_range), built on `device` in bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(_qwen2_config(shape), dtype=torch.bfloat16)
    return model.eval()


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _free_cuda() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover - best effort
        pass


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False



def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None
