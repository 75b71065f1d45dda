"""A repository that clones fast: no tracked file over 5 MB unless docs/runs/README.md lists it as a
deliverable ("## Deliverables", one backquoted path or glob per item), and .gitignore keeps
checkpoints (docs/runs/**/ckpt/, trainer_state.pt) out of history."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

LIMIT = 5 * 1024 * 1024  # bytes
README = ROOT / "docs" / "runs" / "README.md"

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs a git checkout")


def deliverables(text: str) -> list[str]:
    """The backquoted pattern that opens each item of the '## Deliverables' section."""
    m = re.search(r"^## Deliverables\s*$(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"{README} has no '## Deliverables' section"
    return re.findall(r"^[-*] `([^`]+)`", m.group(1), re.M)


def glob_regex(pattern: str) -> re.Pattern:
    """`**` any run of path parts (also none), `*` within one part, `?` one character of a part."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out + r"\Z")


def oversized(sizes: dict[str, int], patterns: list[str], limit: int = LIMIT) -> list[str]:
    """'path (N MB)' of every file over `limit` that no pattern matches."""
    rx = [glob_regex(p) for p in patterns]
    return [f"{path} ({size / 2**20:.1f} MB)" for path, size in sorted(sizes.items())
            if size > limit and not any(r.match(path) for r in rx)]


def tracked_sizes() -> dict[str, int]:
    """Size of every tracked file as committed to the index (`git ls-files -s` + `git cat-file --batch-check`)."""
    ls = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    entries = [e.split(b"\t", 1) for e in ls.split(b"\0") if e]
    objects = [meta.split()[1] for meta, _ in entries]
    if not objects:
        return {}
    out = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=ROOT, input=b"\n".join(objects) + b"\n",
                         capture_output=True, check=True).stdout.split()
    return {path.decode(): int(size) for (_, path), size in zip(entries, out)}


def test_no_tracked_file_over_5_mb_that_the_docs_do_not_list_as_a_deliverable():
    sizes = tracked_sizes()
    assert sizes and "README.md" in sizes
    big = oversized(sizes, deliverables(README.read_text()))
    assert not big, (f"tracked files over {LIMIT >> 20} MB that docs/runs/README.md ('## Deliverables') does not "
                     f"list: {big}. Keep them out of git (checkpoints: docs/runs/README.md says how a run moves "
                     f"between machines), or list them there as a deliverable")


def test_the_check_catches_a_big_file_and_reads_the_list():
    pats = deliverables(README.read_text())
    assert "docs/runs/**/final_adapter/*" in pats
    sizes = {"docs/runs/a/ckpt/step_2/trainer_state.pt": 6 << 20, "docs/runs/a/b/final_adapter/x.safetensors": 9 << 20,
             "docs/img/plot.png": 300 << 10, "docs/runs/a/final_adapter/sub/x.bin": 6 << 20}
    assert oversized(sizes, pats) == ["docs/runs/a/ckpt/step_2/trainer_state.pt (6.0 MB)",
                                      "docs/runs/a/final_adapter/sub/x.bin (6.0 MB)"]  # `*` stays in one folder
    assert deliverables("# x\n## Deliverables\n\n- `a/**`: why\n  more `b` text\n* `c?.bin`\n## Next\n- `d`\n") == [
        "a/**", "c?.bin"]
    assert glob_regex("**/ckpt/*").match("ckpt/x") and glob_regex("**/ckpt/*").match("a/b/ckpt/x")


@pytest.mark.parametrize("path", ["docs/runs/smollm2_qerl/fp32_vllm/seed0/0/ckpt/step_20/adapter/adapter_model.safetensors",
                                  "docs/runs/x/ckpt/step_2/manifest.json", "docs/runs/x/trainer_state.pt",
                                  "outputs/runs/r/ckpt/step_2/trainer_state.pt"])
def test_gitignore_refuses_checkpoints(path):
    r = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT)
    assert r.returncode == 0, f"{path} is not ignored by .gitignore"


def test_gitignore_keeps_run_records():
    r = subprocess.run(["git", "check-ignore", "--no-index", "-q", "docs/runs/x/metrics.jsonl"], cwd=ROOT)
    assert r.returncode == 1
