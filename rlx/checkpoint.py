"""Atomic checkpoints: `ckpt/step_N/` appears only once complete (written to a temp dir, then renamed)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from rlx.device import rng_state, set_rng_state  # noqa: F401  (RNG of every device, re-exported)

STEP_DIR = re.compile(r"^step_(\d+)$")


class Checkpointer:
    def __init__(self, root: Path, keep_last: int = 2):
        self.root = Path(root)
        self.keep_last = keep_last

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir())

    def latest(self) -> Path | None:
        s = self.steps()
        return self.root / f"step_{s[-1]}" if s else None

    def save(self, step: int, model, state: dict) -> Path:
        """PEFT adapter + `trainer_state.pt` (optimizer, scheduler, RNGs, data position, step, run id, ...)."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step_{step}"
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step_{step}-", dir=self.root))
        try:
            model.save_pretrained(tmp / "adapter")
            torch.save(state, tmp / "trainer_state.pt")
            if final.exists():  # re-saving the same step (e.g. after a resume): replace it whole
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in self.steps()[: -self.keep_last] if self.keep_last > 0 else []:
            shutil.rmtree(self.root / f"step_{old}", ignore_errors=True)
        return final

    @staticmethod
    def load(path: Path, model) -> dict:
        """Load adapter weights into `model` in place and return the trainer state."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = Path(path) / "adapter"
        files = list(adapter.glob("adapter_model.safetensors"))
        if not files:
            raise FileNotFoundError(f"checkpoint {path} has no adapter_model.safetensors")
        res = set_peft_model_state_dict(model, load_file(str(files[0])))
        if getattr(res, "unexpected_keys", None):
            raise RuntimeError(f"checkpoint {path}: unexpected adapter keys {res.unexpected_keys[:5]}")
        return torch.load(Path(path) / "trainer_state.pt", weights_only=False)
