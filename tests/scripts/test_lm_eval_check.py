"""python -m scripts.lm_eval_check: rlx's GSM8K readings against lm-eval's own filters and exact_match on
hand-written completions, the exported task YAML as lm-eval loads it, and `compare` on small hand-made files.
The lm-eval parts need lm_eval (a dev dependency, pinned to the version whose gsm8k.yaml is copied here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import lm_eval_check as lec
from rlx.tasks.answers.readings import FLEXIBLE, STRICT, exact_match, flexible_extract, strict_match

# completions written to hit the filters' corners: the space after ####, $ and thousands commas, a final
# full stop, two #### lines (strict takes the first), prose answers (flexible takes the last number-like run),
# signs, decimals, no number at all, markdown, fractions, units
COMPLETIONS = [
    "#### 16", "#### $1,000.", "####16", "#### 16\n#### 17", "The answer is 16.", "#### -3", "The answer is -3.5",
    "#### 2.50", "no number here", "", "#### 16.", "$16", "16 apples and 3 pears.", "#### 1,000,000",
    "#### 16\nThe answer is 17", "**#### 16**", "#### **16**", "####  16", "the answer: .5", "#### 0.5", "- 5",
    "#### 16 dollars", "#### 3/4", "1.2.3", "#### 1e3", "Answer: 16\n", "#### 16\n\n", "16,", "#### ,", "#### 5, 6",
    "#### -1,234.5", "So 4 * 4 = 16\n#### 16\nThe answer is: 16", "It costs $1,000.00.", "#### .", "1 2 3 4",
    "x = -7.", "#### 16.\n", "#### 16\r\n", "The total is 16 + 2 = 18 dollars.", "#### $ 16", "#### 16$", "-16",
    "-$16", "#### 00016", "16.0", "#### 16.0", "#### 1.000", "The answer is 1 000.", "#### 2,5", "-.",
]
GOLDS = ["16", "1000", "-3", "2.5", "0.5", "1000000", "17", "5", "18", "-1234.5", "1", "-16"]


def _lm_eval_readings(completions: list[str], filter_list: list[dict]) -> dict[str, list[str]]:
    """lm-eval's own filter pipeline (get_filter on each component of a filter_list), one response per doc."""
    import lm_eval.filters  # noqa: F401  (registers the filters)
    from lm_eval.api.registry import get_filter

    out = {}
    for spec in filter_list:
        resps = [[c] for c in completions]
        for comp in spec["filter"]:
            kwargs = {k: v for k, v in comp.items() if k != "function"}
            resps = list(get_filter(comp["function"])(**kwargs).apply(resps, [None] * len(completions)))
        out[spec["name"]] = resps
    return out


def _lm_eval_exact_match(predictions: list[str], references: list[str]) -> list[bool]:
    import lm_eval.api.metrics  # noqa: F401  (registers the metrics)
    from lm_eval.api.registry import get_metric

    fn = get_metric("exact_match")
    kwargs = {k: v for k, v in lec.GSM8K_METRIC_LIST[0].items() if k not in ("metric", "aggregation", "higher_is_better")}
    return [fn(predictions=[p], references=[r], **kwargs)["exact_match"] == 1.0 for p, r in zip(predictions, references)]


def test_readings_equal_lm_evals_own_filters_and_exact_match():
    pytest.importorskip("lm_eval")
    lm = _lm_eval_readings(COMPLETIONS, lec.GSM8K_FILTER_LIST)
    assert lm[STRICT] == [strict_match(c) for c in COMPLETIONS]
    assert lm[FLEXIBLE] == [flexible_extract(c) for c in COMPLETIONS]
    # spot checks of what lm-eval reads (so a change on either side shows here, not only as a mismatch)
    assert [strict_match(c) for c in ["#### 16", "####16", "#### 16\n#### 17", "#### $1,000.", "**#### 16**"]] == [
        "16", "[invalid]", "16", "[invalid]", "16"]
    assert [flexible_extract(c) for c in ["The answer is 16.", "no number here", "-$16", "#### 16\nThe answer is 17"]] == [
        "16.", "[invalid]", "-$16", "17"]
    # exact_match: rlx against the extracted gold, lm-eval against the whole solution ("... #### gold")
    answers = sorted(set(lm[STRICT] + lm[FLEXIBLE] + ["$1,000", "1,000,000.", "16.", "-3.5", "[INVALID]"]))
    pairs = [(a, g) for a in answers for g in GOLDS]
    lm_pass = _lm_eval_exact_match([a for a, _ in pairs], [f"She has 4 * 4 = <<4*4=16>>16.\n#### {g}" for _, g in pairs])
    assert [exact_match(a, g) for a, g in pairs] == lm_pass
    assert sum(lm_pass) >= 10  # the pairs include passes, not only failures
    assert exact_match("$1,000.", "1000") and exact_match("16.", "16") and not exact_match("16.0", "16")


def test_filter_and_metric_lists_are_the_installed_gsm8k_yamls():
    lm_eval = pytest.importorskip("lm_eval")
    import yaml

    spec = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    assert spec["filter_list"] == lec.GSM8K_FILTER_LIST
    assert spec["metric_list"] == lec.GSM8K_METRIC_LIST
    assert spec["doc_to_target"] == "{{answer}}"


@pytest.mark.parametrize("template", [
    "{question}\nSolve the problem step by step, then write the final answer on the last line as '#### <number>'.",
    "Question: {question}\nAnswer:", "{question}", "Q {{literal}} {{% raw %}} {question} {{#x}} }}",
])
def test_jinja_doc_to_text_renders_rlxs_prompt(template):
    q = "Tom has {3} apples, costs $2.50 {{ each }}; #### what?\n  "
    doc_to_text = lec.jinja_doc_to_text(template)
    assert lec.render_jinja(doc_to_text, {"question": q}) == template.format(question=q)
    before, after = lec.template_parts(template)
    assert before + q + after == template.format(question=q)
    try:
        from lm_eval.utils import apply_template
    except ImportError:
        return
    assert apply_template(doc_to_text, {"question": q}) == template.format(question=q)


@pytest.mark.parametrize("template", ["{q}", "no field", "{question} {question}", "{question!r}", "{question:>5}", "{question} {n}"])
def test_templates_without_one_plain_question_field_are_refused(template):
    with pytest.raises(ValueError, match="exactly one plain"):
        lec.template_parts(template)


# ---- export, loaded by lm-eval ---------------------------------------------------------------------------
def _gsm8k_files(tmp_path: Path) -> list[str]:
    rows = [{"question": f"Tom has {i} apples and buys {i + 1} more. How many now?",
             "answer": f"He has {i}+{i + 1}=<<{i}+{i + 1}={2 * i + 1}>>{2 * i + 1}\n#### {2 * i + 1}"} for i in range(12)]
    for name, part in (("train", rows[:8]), ("test", rows[8:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return ["task=gsm8k", f"task.train_path={tmp_path / 'train.jsonl'}", f"task.eval_path={tmp_path / 'test.jsonl'}",
            "rollout.max_new_tokens=32", "trainer.threads=1"]


def test_export_writes_rlxs_rows_and_a_task_lm_eval_loads(tmp_path):
    from rlx.eval.source import Source, load_config

    overrides = _gsm8k_files(tmp_path)
    out = tmp_path / "task"
    meta = lec.export(overrides + ["--out", str(out)])
    rows = [json.loads(line) for line in (out / "rlx_gsm8k.jsonl").read_text().splitlines()]
    assert [r["rlx_index"] for r in rows] == [0, 1, 2, 3] and rows[0]["rlx_key"] == "test.jsonl:0"
    assert rows[0]["question"] == "Tom has 8 apples and buys 9 more. How many now?" and rows[0]["rlx_gold"] == "17"
    assert rows[0]["answer"].endswith("#### 17")
    assert meta["max_gen_toks"] == 32 and meta["until"] == ["<eos>"] and meta["chat"] is False
    cfg = load_config(Source("base"), overrides)
    assert [r["question"] for r in rows] == [r["question"] for r in lec.export_rows(cfg)[0]]

    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    task = TaskManager(include_path=str(out), include_defaults=False).load(["rlx_gsm8k"])["tasks"]["rlx_gsm8k"]
    docs = list(task.test_docs())
    assert len(docs) == 4
    from rlx.tasks import build_task

    examples = build_task(cfg.task).eval
    assert [task.doc_to_text(d) for d in docs] == [e.prompt for e in examples]  # the whole prompt (no chat here)
    assert [task.doc_to_target(d) for d in docs] == [e.solution for e in examples]
    gen = task.config.generation_kwargs
    assert gen["until"] == ["<eos>"] and gen["max_gen_toks"] == 32 and gen["do_sample"] is False
    assert task.config.num_fewshot == 0


# ---- compare on hand-made files --------------------------------------------------------------------------
PROMPT = "<|im_start|>user\nQ{i}<|im_end|>\n<|im_start|>assistant\n"


def _write(tmp_path: Path, rlx_completions: list[str], lm_completions: list[str], golds: list[str],
           lm_prompt=None, with_readings: bool = True) -> tuple[Path, Path]:
    from rlx.tasks.answers.readings import read

    rlx_rows = []
    for i, (c, g) in enumerate(zip(rlx_completions, golds)):
        row = {"set": "default", "index": i, "kind": "greedy", "sample": 0, "key": f"t.jsonl:{i}",
               "prompt": PROMPT.format(i=i), "completion": c, "gold": g}
        if with_readings:
            row["readings"] = {k: v[0] for k, v in read([STRICT, FLEXIBLE], [c], [g]).items()}
        rlx_rows.append(row)
    rlx_file = tmp_path / "completions.jsonl"
    rlx_file.write_text("".join(json.dumps(r) + "\n" for r in rlx_rows))
    lines = []
    for i, (c, g) in enumerate(zip(lm_completions, golds)):
        doc = {"question": f"Q{i}", "answer": f"steps\n#### {g}", "rlx_key": f"t.jsonl:{i}", "rlx_index": i}
        for name, fn in ((STRICT, strict_match), (FLEXIBLE, flexible_extract)):
            ans = fn(c)
            lines.append({"doc_id": i, "doc": doc, "target": doc["answer"],
                          "arguments": {"gen_args_0": {"arg_0": (lm_prompt or PROMPT).format(i=i), "arg_1": {"until": ["<|im_end|>"]}}},
                          "resps": [[c]], "filtered_resps": [ans], "filter": name, "metrics": ["exact_match"],
                          "exact_match": float(exact_match(ans, g))})
    lm_dir = tmp_path / "lm" / "model"
    lm_dir.mkdir(parents=True)
    lm_file = lm_dir / "samples_rlx_gsm8k_2026-01-01T00-00-00.jsonl"
    lm_file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return rlx_file, tmp_path / "lm"


def test_compare_counts_identical_completions_agreement_and_accuracy(tmp_path, capsys):
    golds = ["16", "5", "7", "2"]
    rlx_c = ["#### 16", "so 5.", "#### 8\nThe answer is 7", "I do not know"]
    lm_c = ["#### 16", "so 5.", "#### 7", "I do not know"]  # problem 2 differs: rlx strict fails, lm-eval's passes
    rlx_file, lm_dir = _write(tmp_path, rlx_c, lm_c, golds)
    out = tmp_path / "cmp"
    assert lec.main(["compare", "--rlx", str(rlx_file), "--lm-eval", str(lm_dir), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "identical completions: 3/4" in text and "rendered prompts identical: 4/4" in text
    assert "strict-match      answers agree 3/3, pass flags agree 3/3" in text
    s = json.loads((out / "comparison.json").read_text())
    assert s["ok"] and s["identical_completions"] == 3 and s["differing"] == [2]
    assert s["accuracy"][STRICT] == {"rlx": 0.25, "lm_eval": 0.5, "rlx_passed": 1, "lm_eval_passed": 2, "diff_problems": -1}
    assert s["accuracy"][FLEXIBLE]["rlx_passed"] == 3 and s["accuracy"][FLEXIBLE]["lm_eval_passed"] == 3
    problems = [json.loads(line) for line in (out / "problems.jsonl").read_text().splitlines()]
    assert problems[2]["identical"] is False and problems[2]["first_difference"] == 5
    assert problems[2]["rlx"][STRICT] == {"answer": "8", "passed": False}
    assert problems[2]["lm_eval"][STRICT] == {"answer": "7", "passed": True}
    assert "rlx_completion" not in problems[0]
    # a tighter tolerance fails the same files (exit status 1)
    assert lec.main(["compare", "--rlx", str(rlx_file), "--lm-eval", str(lm_dir), "--max-diff", "0"]) == 1


def test_compare_reads_completions_without_readings_and_flags_a_prompt_mismatch(tmp_path, capsys):
    golds = ["16", "5"]
    rlx_file, lm_dir = _write(tmp_path, ["#### 16", "x"], ["#### 16", "x"], golds,
                              lm_prompt="<|im_start|>user\nQ{i} <|im_end|>\n<|im_start|>assistant\n", with_readings=False)
    assert lec.main(["compare", "--rlx", str(rlx_file.parent), "--lm-eval", str(lm_dir)]) == 1
    text = capsys.readouterr().out
    assert "rendered prompts identical: 0/2" in text and "first mismatch, problem 0" in text
    assert "at char 19" in text and "FAIL: prompts identical" in text
    assert "identical completions: 2/2" in text and "strict-match      answers agree 2/2" in text


def test_compare_flags_a_reading_disagreement(tmp_path, capsys):
    rlx_file, lm_dir = _write(tmp_path, ["#### 16"], ["#### 16"], ["16"])
    f = next(lm_dir.rglob("samples_*.jsonl"))
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    rows[0]["filtered_resps"], rows[0]["exact_match"] = ["[invalid]"], 0.0  # as if lm-eval read it otherwise
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert lec.main(["compare", "--rlx", str(rlx_file), "--lm-eval", str(f)]) == 1
    text = capsys.readouterr().out
    assert "READING DISAGREEMENT problem 0" in text and "readings agree on identical completions" in text


def test_compare_refuses_missing_files(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        lec.main(["compare", "--rlx", str(tmp_path / "none.jsonl"), "--lm-eval", str(tmp_path)])
    (tmp_path / "completions.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no samples_"):
        lec.main(["compare", "--rlx", str(tmp_path), "--lm-eval", str(tmp_path)])


def test_run_refuses_a_non_fp32_dtype_before_anything_runs(tmp_path):
    with pytest.raises(SystemExit, match="trainer.dtype=bf16 computes in bf16"):
        lec.main(["run", "trainer.dtype=bf16", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


@pytest.mark.integration
def test_side_by_side_steps_get_their_own_wall_times(tmp_path):
    """--jobs 2: the step that ends first gets its own time, not the other's (they were waited on in turn)."""
    import sys
    import time

    t0, walls, procs = {}, {}, []
    for name, secs in (("slow", 2.0), ("fast", 0.2)):
        t0[name] = time.time()
        procs.append(lec._step(name, [sys.executable, "-c", f"import time; time.sleep({secs})"], tmp_path / f"{name}.log"))
    lec._wait(procs, ["slow", "fast"], t0, walls)
    assert walls["fast"] < 1.5 <= walls["slow"]
