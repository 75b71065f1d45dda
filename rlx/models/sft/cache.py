"""Where an SFT result lives: `model.cache_dir/sft-<key>`, the key a hash of data + model + every SFT key that
changes the weights (docs/models.md, "Cache"), known from the config alone, so `rlx.models.base_dir` finds it."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

CACHE_VERSION = 1
# keys that do not change the SFT weights: model.sft's (RL's split, eval cadence, the tiny warm start's) and the
# task's that only score or report
NOT_IN_KEY = ("exclude_from_rl", "eval_every", "batch_size", "demo_prefix", "demo_prefix_frac")
TASK_NOT_IN_KEY = ("rewards", "default_rewards", "reward_timeout_s", "readings", "answer_phrase")


def path_digest(path: str | Path) -> str:
    """Content digest of a file or a directory's files, each read once per process while size and mtime hold."""
    p = Path(path).expanduser().resolve()
    if p.is_file():
        return _file_digest(str(p), *_stamp(p))
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(p)}\0{_file_digest(str(f), *_stamp(f))}\0".encode())
    return h.hexdigest()[:16]


def _stamp(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=1024)  # a sharded checkpoint has many files: keep them all
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _plain(node) -> dict:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)


def base_identity(model_cfg, hf_dir: Path | None) -> dict:
    """What the SFT stage starts from, as a small dict."""
    if model_cfg.source == "tiny":
        from rlx.models.tokenizer import build_char_tokenizer

        arch = {k: model_cfg[k] for k in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                                          "num_kv_heads", "max_position_embeddings")}
        vocab = hashlib.sha256(json.dumps(sorted(build_char_tokenizer().get_vocab().items())).encode()).hexdigest()
        return {"source": "tiny", **arch, "vocab": vocab[:16]}
    if model_cfg.source == "gguf":  # the converted directory is named by the GGUF file's content digest
        return {"source": "gguf", "dir": hf_dir.name}
    return {"source": "hf", "digest": path_digest(hf_dir)}


def _task_identity(task_cfg) -> dict:
    t = {k: v for k, v in _plain(task_cfg).items() if k not in TASK_NOT_IN_KEY}
    if t.get("name") == "file" and (t.get("holdout") or t.get("eval_path")):
        # SFT drops the whole held-out slice, not only the n_eval rows evaluated: n_eval is the same SFT
        t.pop("n_eval", None)
    files = {"train_path": t.get("train_path"), "eval_path": t.get("eval_path"),
             **{f"eval.{n}": (s or {}).get("path") for n, s in (t.get("eval") or {}).items()}}
    t["digests"] = {k: path_digest(v) for k, v in files.items() if v and Path(v).expanduser().exists()}
    return t


def key_inputs(cfg, hf_dir: Path | None) -> dict:
    """Everything the key hashes (written beside the result, so a cache entry says what it is)."""
    m = cfg.model
    sft = {k: v for k, v in _plain(m.sft).items() if k not in NOT_IN_KEY + ("data",)}  # data: by content below
    sft["prompt_template"] = m.sft.prompt_template or cfg.task.prompt_template
    data = "task" if m.sft.data == "task" else path_digest(m.sft.data)
    return {"v": CACHE_VERSION, "base": base_identity(m, hf_dir), "sft": sft, "data": data,
            "render": {"chat_template": m.get("chat_template"), "chat_prompts": bool(m.chat_prompts)},
            "task": _task_identity(cfg.task)}


def sft_dir(cfg, hf_dir: Path | None) -> Path:
    """The SFT result's directory (absolute: adapters record it as their base)."""
    blob = json.dumps(key_inputs(cfg, hf_dir), sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return Path(cfg.model.cache_dir).expanduser().resolve() / f"sft-{key}"
