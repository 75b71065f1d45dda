"""`rlx-bench NAME [args]` and `rlx-gpu-check [args]`: a benchmark of the checkout's benchmarks/ folder, as
`python -m benchmarks.NAME [args]` (`rlx-gpu-check` is `benchmarks.gpu_check`, docs/gpu.md), run from the checkout
rlx is installed from (`pip install -e .`; pip installs no benchmarks), in the current directory, where outputs land."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def run(name: str, argv: list[str]) -> int:
    where = CHECKOUT / "benchmarks"
    if not (where / f"{name}.py").is_file() and not (where / name / "__main__.py").is_file():
        have = sorted(p.stem for p in where.glob("*.py") if p.stem != "__init__") + sorted(
            p.parent.name for p in where.glob("*/__main__.py")) if where.is_dir() else []
        sys.exit(f"rlx-bench {name}: no benchmarks/{name} beside {CHECKOUT / 'rlx'}" + (
            f"; the benchmarks are: {', '.join(have)}" if have else
            ": benchmarks run from a checkout (git clone, then pip install -e .)"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))}
    return subprocess.call([sys.executable, "-m", f"benchmarks.{name}", *argv], env=env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0])
        return 0 if argv else 2
    return run(argv[0], argv[1:])


def gpu_check(argv: list[str] | None = None) -> int:
    return run("gpu_check", sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    raise SystemExit(main())
