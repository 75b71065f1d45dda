"""Atomic, verified checkpoints (docs/runs.md, "Checkpoints"): `ckpt/step_N/` (weights, `trainer_state.pt`,
`manifest.json` with every file's size and sha256) is written in a temp dir and renamed once complete; loading
verifies the manifest and reads the state through torch's safe unpickler only."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from rlx.run.checkpoint_weights import MODEL, is_lora, load_full, write_weights
from rlx.run.device import rng_state, set_rng_state  # noqa: F401  (RNG of every device, re-exported)

STEP_DIR = re.compile(r"^step_(\d+)$")
TMP_PREFIX = ".tmp-step_"
MANIFEST = "manifest.json"
STATE = "trainer_state.pt"
ADAPTER = "adapter/adapter_model.safetensors"
FORMAT_VERSION = 1
_NDARRAY = "__rlx_ndarray__"  # encode_state's tag for a numpy array stored as a tensor


class NonFiniteError(RuntimeError):
    """A non-finite loss, gradient norm or trainable weight: the update or checkpoint is refused."""


class CheckpointError(RuntimeError):
    """No checkpoint could be resumed from (each one tried is named with its problem)."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint that cannot be trusted: `file` (relative to the step dir) and `reason`."""

    def __init__(self, path: Path, file: str, reason: str):
        self.path, self.file, self.reason = Path(path), file, reason
        super().__init__(f"checkpoint {path}: {file} {reason}")


_SCALARS = (str, int, float, bool, type(None), torch.Size, torch.dtype, torch.device)  # exact types
_CONTAINERS = (list, tuple, set, frozenset)


def encode_state(obj, where: str = "state"):
    """A copy of `obj` that `torch.load(weights_only=True)` reads back; TypeError naming anything else."""
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(f"trainer state: {where} is a numpy array of Python objects; store numbers")
        return {_NDARRAY: torch.from_numpy(np.array(obj, copy=True))}
    if isinstance(obj, np.generic):
        return obj.item()
    if type(obj) in _SCALARS or isinstance(obj, torch.Tensor):
        return obj
    if type(obj) in (dict, OrderedDict):
        if _NDARRAY in obj:
            raise TypeError(f"trainer state: {where} uses the reserved key {_NDARRAY!r}")
        return type(obj)((encode_state(k, f"{where} key"), encode_state(v, f"{where}[{k!r}]")) for k, v in obj.items())
    if type(obj) in _CONTAINERS:
        return type(obj)(encode_state(v, f"{where}[{i}]") for i, v in enumerate(obj))
    raise TypeError(f"trainer state: {where} is a {type(obj).__module__}.{type(obj).__qualname__}, which "
                    f"torch.load(weights_only=True) cannot read; store tensors, numbers, strings and "
                    f"dicts/lists/tuples of them")


def decode_state(obj):
    """Inverse of `encode_state`."""
    if isinstance(obj, dict):
        if len(obj) == 1 and _NDARRAY in obj:
            return obj[_NDARRAY].numpy().copy()
        return type(obj)((k, decode_state(v)) for k, v in obj.items())
    if type(obj) in _CONTAINERS:
        return type(obj)(decode_state(v) for v in obj)
    return obj


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_entries(files: dict, where: str) -> None:
    """A listing's entries are relative paths inside `where` with an int size and a str sha256."""
    for rel, want in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"file {rel!r} is outside the {where}")
        if not (isinstance(want, dict) and isinstance(want.get("size"), int) and isinstance(want.get("sha256"), str)):
            raise ValueError(f"entry of {rel!r} has no size and sha256")


def check_files(path: Path, files: dict, listing: str, error) -> None:
    """Every file `listing` lists under `path` has its size and sha256, else `error(path, file, reason)`."""
    for rel, want in files.items():
        f = path / rel
        if not f.is_file():
            raise error(path, rel, f"is missing (listed in {listing})")
        size = f.stat().st_size
        if size != want["size"]:
            raise error(path, rel, f"is corrupt: {size} bytes, {listing} says {want['size']} (truncated or overwritten)")
        got = _sha256(f)
        if got != want["sha256"]:
            raise error(path, rel, f"is corrupt: sha256 {got[:12]}... does not match {listing} ({want['sha256'][:12]}...)")


def _files(step_dir: Path) -> list[str]:
    return sorted(rel for q in step_dir.rglob("*") if q.is_file() and (rel := q.relative_to(step_dir).as_posix()) != MANIFEST)


def write_manifest(step_dir: Path, step: int) -> None:
    """Size and sha256 of every file in `step_dir` (fsynced), in `step_dir/manifest.json`."""
    step_dir = Path(step_dir)
    files = {}
    for rel in _files(step_dir):
        _fsync(step_dir / rel)
        files[rel] = {"size": (step_dir / rel).stat().st_size, "sha256": _sha256(step_dir / rel)}
    with open(step_dir / MANIFEST, "w") as f:
        json.dump({"format": "rlx-checkpoint", "version": FORMAT_VERSION, "step": step, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    for d in [step_dir, *(q for q in step_dir.rglob("*") if q.is_dir())]:
        _fsync(d)


def verify(path: Path) -> dict:
    """Check `path` against its manifest; raises CorruptCheckpointError naming the first bad file."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptCheckpointError(path, "(the step dir)", "is missing")
    mf = path / MANIFEST
    if not mf.is_file():
        raise CorruptCheckpointError(
            path, MANIFEST, "is missing: refusing a checkpoint whose files cannot be verified (written by an rlx "
            "before checksums, or by an interrupted copy). Move it aside; its run resumes from an older intact "
            "checkpoint, or starts over once none is left")
    try:
        manifest = json.loads(mf.read_text())
        files = manifest["files"]
        if manifest.get("format") != "rlx-checkpoint" or not isinstance(files, dict):
            raise ValueError("not an rlx checkpoint manifest")
        check_entries(files, "checkpoint")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(path, MANIFEST, f"is corrupt: {e}") from None
    for need in (STATE, ADAPTER if MODEL not in files else MODEL):
        if need not in files:
            raise CorruptCheckpointError(path, MANIFEST, f"is corrupt: it does not list {need}")
    check_files(path, files, MANIFEST, CorruptCheckpointError)
    return manifest


def _refusal(e: Exception) -> str:
    """The informative line of torch's weights_only refusal (which global it would not load)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    hit = next((ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln), lines[-1] if lines else type(e).__name__)
    return hit[:300]


def read_state(path: Path) -> dict:
    """`trainer_state.pt` of a verified step dir, through the safe unpickler, onto the CPU: a GPU run's optimizer
    state would otherwise go back to the GPU it was saved from (cuda:0 on every rank under torchrun). Whoever
    takes a part moves it (Optimizer.load_state_dict casts moments to their parameter's device)."""
    f = Path(path) / STATE
    try:
        raw = torch.load(f, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise CorruptCheckpointError(path, STATE, "is unsafe or corrupt: torch.load(weights_only=True) refused it "
                                                  f"({_refusal(e)}); it was not loaded") from None
    except Exception as e:  # truncated zip, bad magic number, ...
        raise CorruptCheckpointError(path, STATE, f"is corrupt: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(raw, dict):
        raise CorruptCheckpointError(path, STATE, f"is corrupt: holds a {type(raw).__name__}, not a dict")
    return decode_state(raw)


def read_adapter(path: Path, rel: str = ADAPTER) -> dict:
    """The tensors of the safetensors file `rel` of a step dir (the adapter, or MODEL for a full model)."""
    from safetensors.torch import load_file

    f = Path(path) / rel
    if not f.is_file():
        raise CorruptCheckpointError(path, rel, "is missing")
    try:
        weights = load_file(str(f))
    except Exception as e:  # SafetensorError: bad header, truncated data, ...
        raise CorruptCheckpointError(path, rel, f"is corrupt: unreadable safetensors ({type(e).__name__}: {e})") from None
    bad = non_finite_params(None, weights)
    if bad:  # a tampered file, or one an older rlx wrote: treated like a checksum failure (never loaded)
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CorruptCheckpointError(path, rel, f"holds non-finite weights: {bad[0][0]} has {bad[0][1]} nan/inf "
                                                f"value(s){more}")
    return weights


def non_finite_params(model, weights: dict | None = None) -> list[tuple[str, int]]:
    """(name, count) of every trainable parameter (or of `weights`) holding nan or inf."""
    named = weights.items() if weights is not None else ((n, p) for n, p in model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        counts = [(name, int((~torch.isfinite(p)).sum())) for name, p in named]
    return [(name, n) for name, n in counts if n]


def out_of_space(e: BaseException, root: Path) -> bool:
    """A failed write a full disk explains: ENOSPC, or torch's zip writer failing on a (nearly) full disk."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    if isinstance(e, RuntimeError) and ("enforce fail" in str(e) or "file write failed" in str(e)):
        try:
            return shutil.disk_usage(root).free < (64 << 20)
        except OSError:
            return False
    return False


class Checkpointer:
    def __init__(self, root: Path, keep_last: int = 2):
        self.root, self.keep_last = Path(root), keep_last

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir())

    def latest(self) -> Path | None:
        s = self.steps()
        return self.root / f"step_{s[-1]}" if s else None

    def remove_stale_tmp(self, log=None) -> list[Path]:
        """Remove `.tmp-step_*` folders a killed save left behind (never checkpoints)."""
        stale = [q for q in self.root.iterdir() if q.name.startswith(TMP_PREFIX)] if self.root.is_dir() else []
        for q in stale:  # one writer per run dir: any temp dir here is an interrupted save, not a live one
            if q.is_dir():
                shutil.rmtree(q, ignore_errors=True)
            else:
                q.unlink(missing_ok=True)
        if stale and log is not None:
            log(f"[ckpt] removed {len(stale)} unfinished save(s) left by an interrupted run: "
                f"{', '.join(q.name for q in stale)}")
        return stale

    def save(self, step: int, model, state: dict, log=None, weights: dict | None = None) -> Path:
        """Weights, trainer state and manifest, atomically; never non-finite weights (`weights`: FSDP's, whole)."""
        bad = non_finite_params(model, weights)
        if bad:
            name, n = bad[0]
            more = f" (and {len(bad) - 1} more: {', '.join(b[0] for b in bad[1:4])})" if len(bad) > 1 else ""
            raise NonFiniteError(f"step {step}: trainable parameter {name} has {n} non-finite value(s) (nan/inf){more}; "
                                 f"refusing to checkpoint it, the previous checkpoint ({self.latest() or 'none'}) is "
                                 f"left intact")
        encoded = encode_state(state)  # refuses what weights_only could not read, before anything is written
        self.root.mkdir(parents=True, exist_ok=True)
        self.remove_stale_tmp(log)
        final = self.root / f"step_{step}"
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{step}-", dir=self.root))
        try:
            write_weights(tmp, model, weights)
            torch.save(encoded, tmp / STATE)
            write_manifest(tmp, step)
            if final.exists():  # re-saving the same step (e.g. after a resume): replace it whole
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync(self.root)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if out_of_space(e, self.root):
                raise OSError(errno.ENOSPC, f"no space left on device while writing checkpoint step_{step} in "
                                            f"{self.root} ({shutil.disk_usage(self.root).free} bytes free): nothing "
                                            f"was written, the previous checkpoint ({self.latest() or 'none'}) is "
                                            f"intact; free some space and rerun the same command to resume") from e
            raise
        for old in self.steps()[: -self.keep_last] if self.keep_last > 0 else []:
            shutil.rmtree(self.root / f"step_{old}", ignore_errors=True)
        return final

    @staticmethod
    def load(path: Path, model) -> dict:
        """Verify `path`, load its weights into `model`, return its trainer state (model untouched on error)."""
        from peft import set_peft_model_state_dict

        path = Path(path)
        files = verify(path)["files"]
        full = MODEL in files
        if full == is_lora(model):
            held, want = ("the full model", "lora") if full else ("a LoRA adapter", "full")
            raise ValueError(f"checkpoint {path} holds {held} but this run trains model.finetune={want}: "
                             f"resume it with the model.finetune it was written with, or start a new run")
        state = read_state(path)
        weights = read_adapter(path, MODEL if full else ADAPTER)
        if full:
            load_full(path, model, weights)
            return state
        res = set_peft_model_state_dict(model, weights)
        if getattr(res, "unexpected_keys", None):
            raise RuntimeError(f"checkpoint {path}: unexpected adapter keys {res.unexpected_keys[:5]}")
        return state

    def load_latest(self, model, log=print) -> tuple[Path, dict] | None:
        """The newest intact checkpoint, loaded, bad ones skipped; CheckpointError if none is intact."""
        problems = []
        for step in reversed(self.steps()):
            path = self.root / f"step_{step}"
            try:
                state = self.load(path, model)
            except CorruptCheckpointError as e:
                problems.append(e)
                log(f"[resume] skipping {e}")
                continue
            if problems:
                log(f"[resume] {path} is intact; resuming from it (step {step}) instead of "
                    f"{', '.join(e.path.name for e in problems)}")
            return path, state
        if problems:
            tried = "; ".join(f"{e.path.name}: {e.file} {e.reason}" for e in problems)
            raise CheckpointError(f"no intact checkpoint in {self.root} (tried {len(problems)}: {tried}). Refusing to "
                                  f"start from scratch over existing checkpoints: move {self.root} aside to start over")
        return None
