"""Small pieces the benchmarks share."""

from __future__ import annotations

import tempfile
from pathlib import Path


def work_dir(path: str | None, prefix: str) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """(`path`, created) when given, else a temporary directory (and its handle, to clean up)."""
    if path:
        work = Path(path)
        work.mkdir(parents=True, exist_ok=True)
        return work, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return Path(tmp.name), tmp
