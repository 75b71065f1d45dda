"""The report links the runs' completion tables and shows a few rows of the newest one per arm."""

import json

from rlx.report.tables import completions_section
from rlx.run.records import Run


def _run(root, name, arm, dumps):
    d = root / name
    d.mkdir(parents=True)
    if dumps is not None:
        rows = [{"step": s, "group": g, "prompt": f"{s}+{g}=", "completion": f"ans|{g}", "reward": 1.0 * g,
                 "advantage": 0.5 - g, "passed": bool(g)} for s in dumps for g in range(3)]
        (d / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path=d, name=name, config={}, overrides=[], choices={}, summary={"status": "finished"}, arm=arm)


def test_one_run_per_arm_linked_with_its_newest_rows(tmp_path):
    jobs = [_run(tmp_path, "0", "grpo", [10, 20]), _run(tmp_path, "1", "grpo", [10]), _run(tmp_path, "2", "cispo", None),
            _run(tmp_path, "3", "dapo", [5])]
    lines = completions_section(jobs, tmp_path)
    text = "\n".join(lines)
    assert "## Completions" in text
    assert "- grpo: [0/completions.jsonl](0/completions.jsonl), step 20:" in text
    assert "1/completions.jsonl" not in text  # one run per arm
    assert "cispo" not in text  # no table, no line
    assert "- dapo: [3/completions.jsonl](3/completions.jsonl), step 5:" in text
    assert "`20+0=` -> `ans\\|0` (reward 0.00, advantage +0.50)" in text  # rows 0 and 1 of step 20, '|' escaped
    assert "`20+1=`" in text and "`20+2=`" not in text and "`10+0=`" not in text


def test_no_tables_no_section(tmp_path):
    assert completions_section([_run(tmp_path, "0", "a", None)], tmp_path) == []


def test_a_killed_runs_half_written_row_is_skipped(tmp_path):
    job = _run(tmp_path, "0", "grpo", [10])
    with (job.path / "completions.jsonl").open("a") as f:
        f.write('{"step": 20, "gro')
    text = "\n".join(completions_section([job], tmp_path))
    assert "step 10:" in text and "`10+0=`" in text
