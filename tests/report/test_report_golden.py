"""Reports on tiny real sweeps render exactly as the code of 9f0f992 rendered them (tests/data/sweeps)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "sweeps"
SWEEPS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
SCALING_SWEEPS = [s for s in SWEEPS if (DATA / s / "compare.md").is_file()]
GOLDEN = ("report.md", "compare.md", "fit.txt")
# tables added after 9f0f992 (the analysis-only numbers of rlx/bench/aqn_entropy.py and next_steps.py)
NEW_SECTIONS = ("### AQN's effect per seed", "### Steps to reach, per seed", "### Arm against arm, seed by seed")


def _copy(name: str, tmp_path: Path) -> Path:
    """The sweep's run directories, without the golden outputs, in a fresh directory."""
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst, ignore=shutil.ignore_patterns(*GOLDEN))
    return dst


def _as_rendered_in_place(text: str, copy: Path, name: str) -> str:
    """The golden files were rendered on tests/data/sweeps/<name>: put that path back."""
    return text.replace(str(copy), f"tests/data/sweeps/{name}")


def without_new_sections(md: str) -> str:
    """The report less the sections NEW_SECTIONS (each from its header to the next header)."""
    lines = md.split("\n")
    for title in NEW_SECTIONS:
        while (start := next((i for i, ln in enumerate(lines) if ln.startswith(title)), None)) is not None:
            end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))
            del lines[start - 1 : end - 1]  # from the blank line before the header to the one before the next
    return "\n".join(lines)


def test_every_sweep_file_has_a_golden_sweep():
    # the mini_* sweeps (calibrated testbeds) render through the layouts of their paper's golden sweep
    # (rlx.report.build.LAYOUTS; tests/report/test_report_papers.py); their numbers are in docs/results.md
    # smollm2_wordproblems needs the smollm2 extra and about an hour; its tables are tested on hand-made jobs
    # (tests/report/test_report_analysis.py) and its numbers are in docs/models.md; so are smollm2_tune's
    # (an arm per setting, the same tables)
    assert SWEEPS == sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml")
                            if not p.stem.startswith(("mini_", "smollm2_")))


@pytest.mark.parametrize("name", SWEEPS)
def test_report_renders_as_before(name, tmp_path):
    from rlx.report import build_report

    copy = _copy(name, tmp_path)
    md, pngs = build_report(copy)
    assert without_new_sections(_as_rendered_in_place(md, copy, name)) == (DATA / name / "report.md").read_text()
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.parametrize("name", SCALING_SWEEPS)
def test_compare_renders_as_before(name, tmp_path, capsys):
    from rlx.scaling.__main__ import compare_main as main

    copy = _copy(name, tmp_path)
    assert main([str(copy), "--bootstrap", "20"]) == 0
    out = (copy / "compare.md").read_text()
    assert _as_rendered_in_place(out, copy, name) == (DATA / name / "compare.md").read_text()


@pytest.mark.parametrize("name", SCALING_SWEEPS)
def test_fit_command_prints_as_before(name, tmp_path, capsys):
    from rlx.scaling.__main__ import fit_main

    copy = _copy(name, tmp_path)
    out = tmp_path / "FIT_OUT"
    fit_main([str(copy), "--bootstrap", "20", "--out", str(out / "scaling_fit.png")])
    printed = _as_rendered_in_place(capsys.readouterr().out, copy, name).replace(str(out), "FIT_OUT")
    assert printed == (DATA / name / "fit.txt").read_text()
