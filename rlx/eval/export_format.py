"""The exported-adapter directory of `rlx-export` (rlx/eval/export.py; docs/eval.md, "Exported adapters"): WEIGHTS
(bf16), PEFT_CONFIG, CONFIG and INFO, whose sizes and sha256 are checked before any model is built."""

from __future__ import annotations

import json
from pathlib import Path

import torch

FORMAT = "rlx-export"
VERSION = 1
INFO = "export.json"
WEIGHTS = "adapter_model.safetensors"
PEFT_CONFIG = "adapter_config.json"
CONFIG = "config.yaml"
DTYPE = torch.bfloat16


class ExportError(ValueError):
    """An exported directory that cannot be trusted: `file` (relative to it) and `reason`."""

    def __init__(self, path: Path, file: str, reason: str):
        self.path, self.file, self.reason = Path(path), file, reason
        super().__init__(f"exported adapter {path}: {file} {reason}")


def is_export(path: Path) -> bool:
    return (Path(path) / INFO).is_file()


def verify_export(path: Path) -> dict:
    """export.json of `path` after checking every file it lists; ExportError names the first bad one."""
    from rlx.run.checkpoint import check_entries, check_files

    path = Path(path)
    try:
        info = json.loads((path / INFO).read_text())
        files = info["files"]
        if info.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError(f"not an {FORMAT} file")
        if info.get("version") != VERSION:
            raise ValueError(f"version {info.get('version')!r}; this rlx reads version {VERSION}")
        int(info["step"])
        check_entries(files, "directory")
        for need in (WEIGHTS, CONFIG):
            if need not in files:
                raise ValueError(f"it does not list {need}")
    except FileNotFoundError:
        raise ExportError(path, INFO, "is missing") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ExportError(path, INFO, f"is corrupt: {e}") from None
    check_files(path, files, INFO, ExportError)
    return info


@torch.no_grad()
def load_export(path: Path, policy) -> dict:
    """Verify `path` and load its adapter into the LoRA `policy` in place, each tensor cast to its parameter's
    dtype (bf16 -> fp32 is exact), every name and shape checked before the first copy; returns export.json."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    from rlx.models import has_lora
    from rlx.run.checkpoint import non_finite_params

    if not has_lora(policy):
        raise ValueError(f"exported adapter {path}: the policy is not a LoRA model (model.finetune=full?); an "
                         f"exported adapter loads into the LoRA policy of its own config.yaml")
    info = verify_export(path)
    try:
        weights = load_file(str(Path(path) / WEIGHTS))
    except Exception as e:  # SafetensorError: bad header, ... (a file that matched its sha256 when written)
        raise ExportError(path, WEIGHTS, f"is corrupt: unreadable safetensors ({type(e).__name__}: {e})") from None
    bad = non_finite_params(None, weights)
    if bad:
        raise ExportError(path, WEIGHTS, f"holds non-finite weights: {bad[0][0]} has {bad[0][1]} nan/inf value(s)")
    want = get_peft_model_state_dict(policy)  # the names save_pretrained gives (the checkpoint's)
    missing, unexpected = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
    wrong = sorted(n for n in set(want) & set(weights) if want[n].shape != weights[n].shape)
    if missing or unexpected or wrong:
        raise ValueError(f"exported adapter {path}: {WEIGHTS} is not of this policy's adapter (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}, other shapes {wrong[:3]}); load it with its own config.yaml")
    res = set_peft_model_state_dict(policy, {n: w.to(want[n].dtype) for n, w in weights.items()})
    if getattr(res, "unexpected_keys", None):
        raise RuntimeError(f"exported adapter {path}: unexpected adapter keys {res.unexpected_keys[:5]}")
    return info
