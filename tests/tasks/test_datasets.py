"""Datasets as users hold them (jsonl / json / parquet / csv / save_to_disk, chat messages) and several
named eval sets in one run, each logged and fittable."""

import json

import pytest
from omegaconf import OmegaConf

from rlx.tasks.config import TaskConfig
from rlx.tasks import build_task
from tests.conftest import TINY, compose, read_metrics

ROWS = [{"question": "3+4=", "answer": "7", "level": "1"}, {"question": "9-2=", "answer": "7", "level": "2"}]
# a chat template the char tokenizer can spell: "u:3+4=\na:"
TEMPLATE = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}a:{% endif %}")


def write(path, rows):
    """rows -> a file in the format its name says, or a datasets save_to_disk directory (no suffix)."""
    import pandas as pd

    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    elif path.suffix == ".csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        from datasets import Dataset

        Dataset.from_list(rows).save_to_disk(str(path))
    return str(path)


def _cfg(**kw):
    return OmegaConf.merge(OmegaConf.structured(TaskConfig), {"name": "file", "rewards": {"correct": 1.0}}, kw)


@pytest.mark.parametrize("name", ["d.jsonl", "d.json", "d.parquet", "d.csv", "saved"])
def test_every_format_reads_the_same_examples(tmp_path, name):
    path = write(tmp_path / name, ROWS)
    t = build_task(_cfg(train_path=path, eval_path=path, prompt_template="Q {question}"))
    assert [(e.prompt, e.answer, e.columns) for e in t.train] == [
        ("Q 3+4=", "7", {"answer": "7", "level": "1"}), ("Q 9-2=", "7", {"answer": "7", "level": "2"})]


def test_bad_data_is_refused_naming_the_problem(tmp_path):
    path = write(tmp_path / "d.parquet", ROWS)
    with pytest.raises(ValueError, match=r"task.answer_field: column 'gold' is not in row 0 .*level"):
        build_task(_cfg(train_path=path, eval_path=path, answer_field="gold"))
    (tmp_path / "d.txt").write_text("3+4= 7\n")
    with pytest.raises(ValueError, match="unsupported format '.txt'"):
        build_task(_cfg(train_path=str(tmp_path / "d.txt"), eval_path=path))
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train'\]; point the path at one split"):
        build_task(_cfg(train_path=str(tmp_path / "dd"), eval_path=path))
    t = build_task(_cfg(train_path=str(tmp_path / "dd" / "train"), eval_path=path))  # one split: fine
    assert len(t.train) == 2
    bad = write(tmp_path / "b.jsonl", [{"question": [{"role": "user"}], "answer": "1"}])
    with pytest.raises(ValueError, match="neither a string nor a chat messages list"):
        build_task(_cfg(train_path=bad, eval_path=bad))


def test_chat_messages_go_through_the_chat_template(tmp_path):
    from rlx.models import load_tokenizer

    rows = [{"messages": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in ROWS]
    path = write(tmp_path / "chat", rows)
    t = build_task(_cfg(train_path=path, eval_path=path, question_field="messages"))
    cfg = OmegaConf.create({"source": "tiny", "chat_template": None})
    with pytest.raises(ValueError, match="no chat template; set model.chat_template"):
        t.render_chat(load_tokenizer(cfg))
    cfg.chat_template = TEMPLATE
    t.render_chat(load_tokenizer(cfg))
    assert [e.prompt for e in t.train] == ["u:3+4=\na:", "u:9-2=\na:"] and t.eval[0].prompt == "u:3+4=\na:"
    assert "messages" not in t.train[0].columns and t.train[0].messages == rows[0]["messages"]


def test_eval_set_keys_are_typed():
    from hydra.errors import ConfigCompositionException

    cfg = compose(["task.eval={a:{path:x.jsonl,n:3},b:{}}"])
    assert cfg.task.eval.a.n == 3 and cfg.task.eval.b.path is None
    cfg = compose(["task=gsm8k", "task.train_path=a", "task.eval_path=b",  # docs/data.md's example
                   'task.eval={gsm8k:{},math500:{path:math500.jsonl,question_field:problem,answer_regex:""}}'])
    assert cfg.task.eval.math500.answer_regex == "" and cfg.task.eval.gsm8k.answer_regex is None
    with pytest.raises(ConfigCompositionException, match="pth"):
        compose(["task.eval={a:{pth:x.jsonl}}"])


def _arith_rows(split):
    """The arith task's own problems, as chat rows a user would hold."""
    t = build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {"rewards": {"correct": 1.0}},
                                   {"num_terms": 2, "max_operand": 6, "n_train": 60, "n_eval": 24}))
    return [{"messages": [{"role": "user", "content": e.prompt}], "answer": e.answer} for e in getattr(t, split)]


@pytest.mark.integration
def test_run_on_parquet_and_saved_dataset_with_two_eval_sets_fitted(tmp_path):
    """Train on a parquet file of chat prompts; evaluate on a parquet set and a save_to_disk set; fit val/ds/acc."""
    from rlx.train import run

    held = _arith_rows("eval")
    train = write(tmp_path / "train.parquet", _arith_rows("train"))
    pq = write(tmp_path / "held.parquet", held[:12])
    ds = write(tmp_path / "held_ds", held[12:])
    cfg = compose([*TINY, "task.name=file", f"task.train_path={train}", f"task.eval_path={pq}",
                   "task.question_field=messages", "task.n_train=0", "task.n_eval=0",
                   f"task.eval={{pq:{{path:'{pq}'}},ds:{{path:'{ds}'}}}}", "model.sft.steps=60", "train.steps=4",
                   "train.eval_every=1", "scaling=sigmoid", "scaling.metric=val/ds/acc", "scaling.compute=steps",
                   "scaling.bootstrap=0"])
    cfg.model.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the arith prompt itself
    summary = run(cfg, tmp_path / "run")
    rows = [r for r in read_metrics(tmp_path / "run") if "val/acc" in r]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for r in rows:
        assert {"val/pq/acc", "val/ds/acc", "val/pq/mean_at_k", "val/ds/mean_at_k"} <= set(r)
        assert r["val/acc"] == pytest.approx((r["val/pq/acc"] + r["val/ds/acc"]) / 2)
    # the end-of-run fit was made on val/ds/acc: a result, or (a 4-step tiny run's curve is mostly noise)
    # the fitter's reason about that curve, never a missing metric
    from rlx.run.records import read_run
    from rlx.scaling import fit_run
    from rlx.scaling.grouping import evaluations

    assert summary["status"] == "finished" and ("scaling/A" in summary or "flat curve" in summary["scaling/error"])
    series = evaluations(read_run(tmp_path / "run"), "val/ds/acc", "steps")
    assert series.reward.tolist() == [r["val/ds/acc"] for r in rows] and series.step.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="no evaluation logs 'val/nope/acc'"):
        fit_run(tmp_path / "run", {**OmegaConf.to_container(cfg.scaling), "metric": "val/nope/acc"})


def test_eval_sets_take_their_own_columns_and_the_own_split(tmp_path):
    train = write(tmp_path / "t.jsonl", ROWS)
    other = write(tmp_path / "o.csv", [{"problem": "2+2=", "sol": "x #### 4"}])
    t = build_task(_cfg(train_path=train, eval_path=train, answer_regex="(.*)", eval={
        "own": {"n": 1}, "other": {"path": other, "question_field": "problem", "answer_field": "sol",
                                    "answer_regex": r"####\s*(.+)"}}))
    assert t.named_eval and list(t.eval_sets) == ["own", "other"]
    assert [e.prompt for e in t.eval_sets["own"]] == ["3+4="]
    assert [(e.prompt, e.answer) for e in t.eval_sets["other"]] == [("2+2=", "4")]
    assert t.eval == t.eval_sets["own"] + t.eval_sets["other"]
    with pytest.raises(ValueError, match="task.eval: set name 'a/b'"):
        build_task(_cfg(train_path=train, eval_path=train, eval={"a/b": {}}))
