"""Every `python -m` command of the rlx package is also a console command in pyproject.toml, and each target is
callable. Benchmarks, studies and cross-checks live outside the package (benchmarks/, scripts/) and have none."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
NO_SCRIPT: set[str] = set()  # modules with a __main__ guard that need no console script


def _main_modules() -> set[str]:
    """Modules runnable with `python -m`: a __main__ guard in the file, or a package's __main__.py."""
    out = set()
    for path in (ROOT / "rlx").rglob("*.py"):
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if path.name == "__main__.py":
            out.add(mod.removesuffix(".__main__"))
        elif 'if __name__ == "__main__":' in path.read_text():
            out.add(mod)
    return out


def test_every_python_m_command_has_a_console_script():
    targets = {t.split(":")[0] for t in SCRIPTS.values()}
    covered = {t.removesuffix(".__main__").removesuffix(".cli") for t in targets} | targets
    assert _main_modules() - NO_SCRIPT <= covered
    assert {"rlx-train", "rlx-sweep", "rlx-report", "rlx-fit", "rlx-compare"} <= set(SCRIPTS)


def test_console_scripts_are_package_commands_only():
    """A console script of a module outside rlx/ would be installed by pip but fail to import there."""
    assert {name: t for name, t in SCRIPTS.items() if not t.startswith("rlx.")} == {}
    # the GPU check is a user command (docs/gpu.md), under its name and its earlier one; it and the other
    # benchmarks run from the checkout (rlx.bench)
    assert SCRIPTS["rlx-gpu-check"] == SCRIPTS["rlx-bench-gpu"] == "rlx.bench:gpu_check"
    assert SCRIPTS["rlx-bench"] == "rlx.bench:main"


@pytest.mark.integration
def test_rlx_bench_runs_a_checkout_benchmark_and_names_the_ones_it_has(capsys):
    from rlx.bench import run

    p = subprocess.run([sys.executable, "-m", "rlx.bench", "gpu_check", "--help"], cwd="/", capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "--first-hour" in p.stdout  # from any directory
    with pytest.raises(SystemExit, match="no benchmarks/nope beside .*the benchmarks are: .*generation"):
        run("nope", [])


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script_targets_are_callable(name):
    module, attr = SCRIPTS[name].split(":")
    assert callable(getattr(importlib.import_module(module), attr))


@pytest.mark.integration
@pytest.mark.parametrize("module, words", [("rlx.report", "sweep_dir"), ("rlx.scaling", "fit,compare")])
def test_python_m_still_works(module, words):
    p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert words in p.stdout + p.stderr
