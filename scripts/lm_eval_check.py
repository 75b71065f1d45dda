"""`python -m scripts.lm_eval_check {run,export,compare}`: rlx-eval's GSM8K readings cross-checked against
lm-evaluation-harness (docs/eval.md, "Cross-checked against lm-evaluation-harness").

- `run [RUN/ckpt/step_N] [key=value ...] --out DIR [--batch-size 50] [--jobs 2]` does it all for one model:
  export (DIR/task), for a checkpoint `python -m rlx.eval.merge` (DIR/merged), rlx-eval (DIR/rlx, with
  rollout.eval_chunk = the batch size) and lm-eval's HF backend (DIR/lm_eval, `--model hf`, float32, the
  same batch size, `--log_samples`), then compare (DIR/compare); logs and wall times in DIR.

- `export [RUN | RUN/ckpt/step_N] [key=value ...] --out DIR` writes the exact rows rlx evaluates (the built
  task's eval set, in rlx's order: `question`, the raw `answer` solution, `rlx_key`, `rlx_index`) to
  DIR/<task>.jsonl and an lm-eval task DIR/<task>.yaml over them (`dataset_path: json` with `data_files`):
  its `doc_to_text` is rlx's `task.prompt_template` as Jinja, so it renders rlx's user message (checked on
  every row before anything is written), gsm8k.yaml's `doc_to_target`, two filters and `exact_match`, and
  rlx's greedy budget: `until: ["<|im_end|>"]` (the tokenizer's eos), `max_gen_toks` = the greedy token
  budget, `do_sample: false`. It prints the lm-eval command (`--include_path DIR --apply_chat_template`
  when rlx renders its prompts through the chat template).
- `compare --rlx RLX_OUT/completions.jsonl --lm-eval LM_OUT [--out DIR]` pairs rlx-eval's greedy
  completions with lm-eval's `--log_samples` rows by problem and prints: rendered prompts identical (the
  first mismatch shown), golds identical, identical completions, on those the agreement of each reading
  (extracted answer and pass flag: all must agree), rlx's readings of lm-eval's own completions against
  lm-eval's, and each tool's strict-match / flexible-extract accuracy with the difference in problems.
  Exit status 1 when a check fails: a prompt mismatch, any reading disagreement, or an accuracy difference
  above --max-diff problems (default 2).

The filters and metric below are lm-eval v0.4.13's gsm8k.yaml (tests/scripts/test_lm_eval_check.py compares
them with the installed lm_eval's file). lm-eval itself is needed only to run the harness, not here.
"""

from __future__ import annotations

import argparse
import json
import string
import sys
from pathlib import Path

from rlx.tasks.answers.readings import FLEXIBLE, STRICT, exact_match, read

READINGS = (STRICT, FLEXIBLE)
TASK_NAME = "rlx_gsm8k"

# lm_eval/tasks/gsm8k/gsm8k.yaml (v0.4.13): metric_list and filter_list, verbatim
GSM8K_METRIC_LIST = [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True, "ignore_case": True,
                      "ignore_punctuation": False, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}]
GSM8K_FILTER_LIST = [
    {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                                        {"function": "take_first"}]},
    {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1,
                                             "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                                            {"function": "take_first"}]},
]

EPILOG = """commands (docs/eval.md, "Cross-checked against lm-evaluation-harness"):
  python -m scripts.lm_eval_check run experiment=smollm2_gsm8k model.sft.data=null task.n_eval=200 \\
      rollout.max_new_tokens=512 trainer.dtype=fp32 trainer.threads=1 rollout.engine=hf --out outputs/lmcheck/base --jobs 2
  python -m scripts.lm_eval_check run RUN/ckpt/step_N trainer.threads=1 rollout.engine=hf task.n_eval=200 \\
      --out outputs/lmcheck/step_N --jobs 2
or step by step:
  python -m scripts.lm_eval_check export experiment=smollm2_gsm8k model.sft.data=null trainer.dtype=fp32 --out outputs/lmcheck/task
  python -m rlx.eval --out outputs/lmcheck/rlx_base experiment=smollm2_gsm8k model.sft.data=null rollout=hf trainer.dtype=fp32 trainer.threads=1 rollout.eval_chunk=50
  lm-eval run --model hf --model_args pretrained=MODEL_DIR,dtype=float32 --device cpu --include_path outputs/lmcheck/task \\
      --tasks rlx_gsm8k --apply_chat_template --log_samples --output_path outputs/lmcheck/lm_base --batch_size 50
  python -m scripts.lm_eval_check compare --rlx outputs/lmcheck/rlx_base/completions.jsonl \\
      --lm-eval outputs/lmcheck/lm_base --out outputs/lmcheck/cmp_base"""


# ---- export ------------------------------------------------------------------------------------------------
def template_parts(template: str) -> tuple[str, str]:
    """(text before, text after) the one `{question}` field of a str.format prompt template (`{{`, `}}`
    unescaped); refused when the template has another field or none."""
    parts = list(string.Formatter().parse(template))
    fields = [(f, spec, conv) for _, f, spec, conv in parts if f is not None]
    if len(fields) != 1 or fields[0] != ("question", "", None):
        raise ValueError(f"task.prompt_template {template!r}: the cross-check needs exactly one plain '{{question}}' "
                         f"field (got {[f for f, _, _ in fields]})")
    before, after, seen = [], [], False
    for literal, f, _, _ in parts:
        (after if seen else before).append(literal)
        if f is not None:
            seen = True
    return "".join(before), "".join(after)


def _jinja_literal(text: str) -> str:
    """`text` as a Jinja template that renders to itself."""
    if any(s in text for s in ("{{", "{%", "{#", "}}", "%}", "#}")):
        return "{% raw %}" + text + "{% endraw %}"
    return text


def jinja_doc_to_text(template: str) -> str:
    """rlx's str.format prompt template as lm-eval's Jinja doc_to_text."""
    before, after = template_parts(template)
    return _jinja_literal(before) + "{{question}}" + _jinja_literal(after)


def render_jinja(template: str, doc: dict) -> str:
    """What lm-eval's doc_to_text renders (lm_eval.utils.apply_template's environment)."""
    from jinja2 import BaseLoader, Environment, StrictUndefined

    env = Environment(loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True)
    return env.from_string(template).render(**doc)


def task_yaml(name: str, data_file: Path, doc_to_text: str, until: list[str], max_gen_toks: int) -> dict:
    """An lm-eval task over local JSON lines: gsm8k.yaml's target, filters and metric, rlx's prompt and budget."""
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "output_type": "generate_until",
        "test_split": "test",
        "doc_to_text": doc_to_text,
        "doc_to_target": "{{answer}}",
        "metric_list": GSM8K_METRIC_LIST,
        "generation_kwargs": {"until": list(until), "max_gen_toks": int(max_gen_toks), "do_sample": False,
                              "temperature": 0.0},
        "repeats": 1,
        "num_fewshot": 0,
        "filter_list": GSM8K_FILTER_LIST,
        "metadata": {"version": 1.0, "source": "python -m scripts.lm_eval_check export"},
    }


def user_message(example, chat: bool) -> str:
    """The text rlx puts in the prompt's one user message (the whole prompt without chat templates)."""
    if not chat:
        return example.prompt
    msgs = example.messages or []
    if len(msgs) != 1 or msgs[0]["role"] != "user":
        raise ValueError(f"{example.key}: the cross-check needs one user message per prompt, got {msgs!r:.200}")
    return msgs[0]["content"]


def export_rows(cfg, set_name: str | None = None, log=print) -> tuple[list[dict], dict]:
    """The rows rlx evaluates (no model weights are loaded, only the tokenizer) and what the YAML needs."""
    from rlx.models import load_tokenizer
    from rlx.eval.evaluate import eval_sampling
    from rlx.tasks import FILE_TASKS, build_task

    if cfg.task.name not in FILE_TASKS:
        raise ValueError(f"task.name={cfg.task.name}: the lm-eval cross-check exports a file task's rows (task=gsm8k)")
    task = build_task(cfg.task)
    tok = load_tokenizer(cfg.model, log)
    task.render_chat(tok, all_prompts=cfg.model.chat_prompts)
    names = list(task.eval_sets)
    name = set_name or names[0]
    if set_name is None and len(names) > 1:
        raise ValueError(f"several eval sets {names}: name one with --set")
    if name not in task.eval_sets:
        raise ValueError(f"--set {name}: no such eval set (have {names})")
    spec = (cfg.task.get("eval") or {}).get(name) if task.named_eval else None
    template = (spec.prompt_template if spec is not None and spec.prompt_template else None) or cfg.task.prompt_template
    doc_to_text = jinja_doc_to_text(template)
    before, after = template_parts(template)
    chat = bool(task.chat)
    rows = []
    for i, e in enumerate(task.eval_sets[name]):
        msg = user_message(e, chat)
        if not (msg.startswith(before) and msg.endswith(after) and len(msg) >= len(before) + len(after)):
            raise ValueError(f"{e.key}: its prompt {msg!r:.200} is not task.prompt_template {template!r} filled in")
        question = msg[len(before): len(msg) - len(after)]
        row = {"question": question, "answer": e.solution, "rlx_key": e.key, "rlx_index": i, "rlx_gold": e.answer}
        rendered = render_jinja(doc_to_text, row)
        if rendered != msg:
            raise ValueError(f"{e.key}: the Jinja doc_to_text renders {rendered!r:.200}, rlx's prompt is {msg!r:.200}")
        rows.append(row)
    greedy, _ = eval_sampling(cfg.rollout)
    eos = tok.convert_ids_to_tokens(tok.eos_token_id) if tok.eos_token_id is not None else None
    stops = [eos] if eos else []
    if chat and "<|im_end|>" in tok.get_vocab() and "<|im_end|>" not in stops:
        stops.append("<|im_end|>")
    for t in greedy.stop_token_ids:
        s = tok.convert_ids_to_tokens(int(t))
        if s not in stops:
            stops.append(s)
    meta = {"set": name, "doc_to_text": doc_to_text, "until": stops, "max_gen_toks": greedy.max_tokens, "chat": chat,
            "prompt_template": template, "rows": len(rows)}
    return rows, meta


def export(argv: list[str]) -> dict:
    import yaml

    from rlx.eval.source import load_config, resolve, split_args

    ap = argparse.ArgumentParser(prog="python -m scripts.lm_eval_check export",
                                 description="Write rlx's eval rows and an lm-eval task YAML over them.")
    ap.add_argument("args", nargs="*", help="RUN | RUN/ckpt/step_N (none: the base), then key=value overrides, as rlx-eval")
    ap.add_argument("--out", required=True, help="output directory (the lm-eval --include_path)")
    ap.add_argument("--task-name", default=TASK_NAME, help=f"lm-eval task name (default {TASK_NAME})")
    ap.add_argument("--set", default=None, help="the eval set (task.eval name) when there are several")
    args = ap.parse_args(argv)
    path, overrides = split_args(args.args)
    src = resolve(path)
    cfg = load_config(src, overrides)
    rows, meta = export_rows(cfg, args.set)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = (out / f"{args.task_name}.jsonl").resolve()
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    spec = task_yaml(args.task_name, data, meta["doc_to_text"], meta["until"], meta["max_gen_toks"])
    (out / f"{args.task_name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=10**6))
    (out / "export.json").write_text(json.dumps({**meta, "source": str(src.path) if src.path else "base",
                                                 "overrides": overrides}, indent=2) + "\n")
    from rlx.models import base_dir

    model = "MERGED_DIR (python -m rlx.eval.merge CKPT --out MERGED_DIR)" if src.checkpoint else str(base_dir(cfg))
    print(f"[lm_eval_check] {len(rows)} rows of set '{meta['set']}' -> {data}\n[lm_eval_check] task {args.task_name}: "
          f"{out / (args.task_name + '.yaml')} (until {meta['until']}, max_gen_toks {meta['max_gen_toks']}, greedy)\n"
          f"run lm-eval:\n  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 lm-eval run --model hf --model_args "
          f"pretrained={model},dtype=float32 --device cpu --include_path {out} --tasks {args.task_name}"
          f"{' --apply_chat_template' if meta['chat'] else ''} --log_samples --output_path OUT --batch_size 50",
          flush=True)
    return meta


# ---- compare -----------------------------------------------------------------------------------------------
def _unwrap(v):
    """lm-eval's per-sample lists ([["text"]], ["16"]) down to the one string."""
    while isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ValueError(f"expected one response per request (repeats 1), got {v!r:.200}")
        v = v[0]
    return v


def find_samples(path: Path, task_name: str | None = None) -> Path:
    """lm-eval's samples_<task>_<date>.jsonl: the file given, or the newest under a directory."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"--lm-eval {path}: no such file or directory (lm-eval's --output_path)")
    found = sorted(path.rglob(f"samples_{task_name or '*'}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no samples_*.jsonl under {path}: run lm-eval with --log_samples --output_path {path}")
    if len(found) > 1:
        print(f"[lm_eval_check] {len(found)} samples files under {path}; using the newest, {found[-1]}", flush=True)
    return found[-1]


def load_lm_eval(path: Path) -> dict[int, dict]:
    """{doc_id: {doc, context, completion, target, readings: {filter: {answer, passed}}}} from --log_samples."""
    out: dict[int, dict] = {}
    for n, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        s = json.loads(line)
        d = out.setdefault(int(s["doc_id"]), {"doc": s["doc"], "target": s.get("target"), "readings": {}})
        args = s["arguments"]
        first = args["gen_args_0"] if isinstance(args, dict) else args[0]
        context = first["arg_0"] if isinstance(first, dict) else first[0]
        completion = _unwrap(s["resps"])
        for key, value in (("context", context), ("completion", completion)):
            if d.get(key, value) != value:
                raise ValueError(f"{path} line {n + 1}: doc {s['doc_id']} has two different {key}s across filters")
            d[key] = value
        d["readings"][s["filter"]] = {"answer": _unwrap(s["filtered_resps"]), "passed": bool(s["exact_match"])}
    return out


def load_rlx(path: Path, set_name: str | None = None) -> dict[int, dict]:
    """{index: row} of rlx-eval's greedy completions of one set, each with its readings (computed here with
    rlx.tasks.answers.readings when the file has none)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("kind", "greedy") == "greedy"]
    names = list(dict.fromkeys(r.get("set", "default") for r in rows))
    if set_name is None and len(names) > 1:
        raise ValueError(f"{path} holds several eval sets {names}: name one with --set")
    name = set_name or (names[0] if names else "default")
    rows = [r for r in rows if r.get("set", "default") == name]
    if not rows:
        raise ValueError(f"{path}: no greedy completions of set '{name}'")
    out = {}
    for r in rows:
        have = r.get("readings") or {}
        if not all(k in have for k in READINGS):
            have = {k: v[0] for k, v in read(list(READINGS), [r["completion"]], [r["gold"]]).items()}
        r["readings"] = have
        out[int(r["index"])] = r
    return out


def first_difference(a: str, b: str) -> int | None:
    """The first character offset where a and b differ (None: identical)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _show(a: str, b: str, at: int, width: int = 60) -> str:
    lo = max(0, at - width)
    return f"at char {at}:\n    rlx:     ...{a[lo: at + width]!r}\n    lm-eval: ...{b[lo: at + width]!r}"


def compare(rlx: dict[int, dict], lm: dict[int, dict], max_diff: int = 2) -> tuple[dict, list[dict], str]:
    """(summary, per-problem rows, printout) of the cross-check; summary["ok"]: every check passed."""
    lines = []
    pair = {}
    unmatched = []
    for doc_id, d in lm.items():  # by the exported key when lm-eval's doc carries it, else doc_id = rlx index
        idx = d["doc"].get("rlx_index", doc_id)
        r = rlx.get(idx)
        if r is None or ("rlx_key" in d["doc"] and r.get("key") not in (None, d["doc"]["rlx_key"])):
            unmatched.append(doc_id)
            continue
        pair[idx] = (r, d)
    missing = sorted(set(rlx) - set(pair))
    lines.append(f"problems paired: {len(pair)} (rlx {len(rlx)}, lm-eval {len(lm)}; rlx only {len(missing)}, "
                 f"lm-eval only {len(unmatched)})")
    order = sorted(pair)
    prompt_bad = [i for i in order if pair[i][0]["prompt"] != pair[i][1]["context"]]
    lines.append(f"rendered prompts identical: {len(order) - len(prompt_bad)}/{len(order)}")
    if prompt_bad:
        i = prompt_bad[0]
        a, b = pair[i][0]["prompt"], pair[i][1]["context"]
        lines.append(f"  first mismatch, problem {i} ({pair[i][0].get('key')}) {_show(a, b, first_difference(a, b))}")
    gold_bad = [i for i in order if not exact_match(pair[i][0]["gold"], str(pair[i][1]["target"]))]
    lines.append(f"golds identical after exact_match's normalization: {len(order) - len(gold_bad)}/{len(order)}")
    same = [i for i in order if pair[i][0]["completion"] == pair[i][1]["completion"]]
    differ = [i for i in order if i not in set(same)]
    lines.append(f"identical completions: {len(same)}/{len(order)}")
    problems, agree, own = [], {}, {}
    for name in READINGS:
        ans = sum(pair[i][0]["readings"][name]["answer"] == pair[i][1]["readings"][name]["answer"] for i in same)
        ok = sum(pair[i][0]["readings"][name]["passed"] == pair[i][1]["readings"][name]["passed"] for i in same)
        agree[name] = {"answer": ans, "passed": ok, "of": len(same)}
        # rlx's reading applied to lm-eval's own completion, against lm-eval's reading of it (every problem)
        mine = read([name], [pair[i][1]["completion"] for i in order], [pair[i][0]["gold"] for i in order])[name]
        own[name] = sum(m["answer"] == pair[i][1]["readings"][name]["answer"] and
                        m["passed"] == pair[i][1]["readings"][name]["passed"] for m, i in zip(mine, order))
    lines.append("readings on the identical completions (extracted answer, pass flag):")
    for name in READINGS:
        a = agree[name]
        lines.append(f"  {name:17s} answers agree {a['answer']}/{a['of']}, pass flags agree {a['passed']}/{a['of']}")
    lines.append("rlx's readings of lm-eval's own completions vs lm-eval's (every problem): " +
                 ", ".join(f"{n} {own[n]}/{len(order)}" for n in READINGS))
    acc = {}
    lines.append(f"{'accuracy':19s} {'rlx':>14s} {'lm-eval':>14s}  difference (problems)")
    for name in READINGS:
        r_pass = sum(pair[i][0]["readings"][name]["passed"] for i in order)
        l_pass = sum(pair[i][1]["readings"][name]["passed"] for i in order)
        n = max(len(order), 1)
        acc[name] = {"rlx": r_pass / n, "lm_eval": l_pass / n, "rlx_passed": r_pass, "lm_eval_passed": l_pass,
                     "diff_problems": r_pass - l_pass}
        lines.append(f"  {name:17s} {r_pass / n:8.4f} ({r_pass:3d}) {l_pass / n:8.4f} ({l_pass:3d})  {r_pass - l_pass:+d}")
    for i in order:
        r, d = pair[i]
        at = first_difference(r["completion"], d["completion"])
        row = {"index": i, "key": r.get("key"), "gold": r["gold"], "identical": at is None,
               "rlx": {n: r["readings"][n] for n in READINGS}, "lm_eval": {n: d["readings"][n] for n in READINGS}}
        if at is not None:
            row.update(first_difference=at, rlx_completion=r["completion"], lm_eval_completion=d["completion"])
        problems.append(row)
    if differ:
        i = differ[0]
        a, b = pair[i][0]["completion"], pair[i][1]["completion"]
        lines.append(f"first differing completion, problem {i} ({pair[i][0].get('key')}) {_show(a, b, first_difference(a, b))}")
    disagree = [p for p in problems if p["identical"] and any(
        p["rlx"][n]["answer"] != p["lm_eval"][n]["answer"] or p["rlx"][n]["passed"] != p["lm_eval"][n]["passed"]
        for n in READINGS)]
    for p in disagree[:5]:
        lines.append(f"  READING DISAGREEMENT problem {p['index']}: rlx {p['rlx']} lm-eval {p['lm_eval']}")
    checks = {
        "all paired": not missing and not unmatched and bool(order),
        "prompts identical": not prompt_bad,
        "golds identical": not gold_bad,
        "readings agree on identical completions": not disagree,
        "rlx's readings of lm-eval's completions agree": all(own[n] == len(order) for n in READINGS),
        f"accuracies within {max_diff} problems": all(abs(a["diff_problems"]) <= max_diff for a in acc.values()),
    }
    failed = [k for k, v in checks.items() if not v]
    lines.append("verdict: " + ("PASS (" + "; ".join(checks) + ")" if not failed else "FAIL: " + "; ".join(failed)))
    summary = {"ok": not failed, "checks": checks, "paired": len(order), "rlx_only": missing, "lm_eval_only": unmatched,
               "prompts_identical": len(order) - len(prompt_bad), "golds_identical": len(order) - len(gold_bad),
               "identical_completions": len(same), "differing": differ, "agreement_on_identical": agree,
               "rlx_readings_of_lm_eval_completions": own, "accuracy": acc}
    return summary, problems, "\n".join(lines) + "\n"


def compare_main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m scripts.lm_eval_check compare",
                                 description="Pair rlx-eval's and lm-eval's completions and readings problem by problem.")
    ap.add_argument("--rlx", required=True, help="rlx-eval's completions.jsonl (or its --out directory)")
    ap.add_argument("--lm-eval", dest="lm_eval", required=True,
                    help="lm-eval's --log_samples file samples_<task>_<date>.jsonl, or its --output_path (the newest)")
    ap.add_argument("--task-name", default=None, help="lm-eval task name to look for under --lm-eval (default: any)")
    ap.add_argument("--set", default=None, help="rlx's eval set (when completions.jsonl holds several)")
    ap.add_argument("--max-diff", type=int, default=2, help="largest accuracy difference in problems that passes (2)")
    ap.add_argument("--out", default=None, help="write comparison.txt, comparison.json and problems.jsonl here")
    args = ap.parse_args(argv)
    rlx_path = Path(args.rlx)
    if rlx_path.is_dir():
        rlx_path = rlx_path / "completions.jsonl"
    if not rlx_path.is_file():
        raise FileNotFoundError(f"--rlx {rlx_path}: no such file (rlx-eval writes completions.jsonl in its --out)")
    lm_path = find_samples(Path(args.lm_eval), args.task_name)
    summary, problems, text = compare(load_rlx(rlx_path, args.set), load_lm_eval(lm_path), args.max_diff)
    text = f"lm-eval cross-check\n  rlx:     {rlx_path}\n  lm-eval: {lm_path}\n" + text
    print(text, end="", flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "comparison.txt").write_text(text)
        (out / "comparison.json").write_text(json.dumps({"rlx": str(rlx_path), "lm_eval": str(lm_path), **summary},
                                                        indent=2) + "\n")
        (out / "problems.jsonl").write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in problems))
    return summary


# ---- run: every step, one command ----------------------------------------------------------------------------
def _step(name: str, cmd: list[str], log: Path, env: dict | None = None):
    import subprocess

    say_cmd = " ".join(cmd)
    print(f"[lm_eval_check] {name}: {say_cmd}\n[lm_eval_check]   log: {log}", flush=True)
    f = open(log, "w")
    return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f


def _wait(procs: list, names: list[str], t0: dict, walls: dict) -> None:
    import time

    pending = dict(zip(names, procs))
    while pending:  # each step's wall time when it ends, whichever ends first
        for name, (p, f) in list(pending.items()):
            rc = p.poll()
            if rc is None:
                continue
            f.close()
            del pending[name]
            walls[name] = round(time.time() - t0[name], 1)
            if rc != 0:
                raise RuntimeError(f"{name} failed (exit status {rc}); see {f.name}")
            print(f"[lm_eval_check] {name} done in {walls[name]:.0f}s", flush=True)
        if pending:
            time.sleep(1.0)


def run(argv: list[str]) -> dict:
    """export, [merge,] rlx-eval and lm-eval (one after the other, or side by side with --jobs 2), compare."""
    import os
    import time

    from rlx.eval.source import load_config, resolve, split_args

    ap = argparse.ArgumentParser(prog="python -m scripts.lm_eval_check run",
                                 description="The whole cross-check of one model: the base (Hydra overrides) or a "
                                 "checkpoint (RUN/ckpt/step_N, merged into an HF directory for lm-eval).")
    ap.add_argument("args", nargs="*", help="RUN | RUN/ckpt/step_N (none: the base), then key=value overrides, as rlx-eval")
    ap.add_argument("--out", required=True, help="output directory: task/, rlx/, [merged/,] lm_eval/, compare/, logs")
    ap.add_argument("--batch-size", type=int, default=50, help="lm-eval's --batch_size and rlx's rollout.eval_chunk (50)")
    ap.add_argument("--jobs", type=int, default=1, choices=(1, 2), help="2: rlx-eval and lm-eval side by side")
    ap.add_argument("--max-diff", type=int, default=2, help="largest accuracy difference in problems that passes (2)")
    ap.add_argument("--reuse", action="store_true", help="keep a step's output that is already there (rlx/, "
                    "merged/, lm_eval/) instead of running it again")
    args = ap.parse_args(argv)
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        raise ValueError("lm_eval is not installed: pip install 'lm_eval[hf]' (the cross-check ran with 0.4.13)")
    path, overrides = split_args(args.args)
    src = resolve(path)
    cfg = load_config(src, overrides)
    from rlx.config.preflight import check

    asked = cfg.trainer.dtype
    spec = check(cfg)  # what rlx-eval refuses, refused here; trainer.dtype=auto resolved as rlx-eval resolves it
    if spec.dtype_name != "fp32":
        raise ValueError(f"trainer.dtype={asked} computes in {spec.dtype_name}: the cross-check runs both tools in "
                         f"fp32 (lm-eval's dtype=float32); add trainer.dtype=fp32")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    walls: dict = {}
    t = time.time()
    meta = export([*args.args, "--out", str(out / "task")])
    walls["export"] = round(time.time() - t, 1)
    py = sys.executable
    threads = int(cfg.trainer.threads) if int(cfg.trainer.threads) > 0 else (os.cpu_count() or 1)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    if src.checkpoint is not None:
        merged = out / "merged"
        if not (args.reuse and (merged / "config.json").is_file()):
            t = time.time()
            p = _step("merge", [py, "-m", "rlx.eval.merge", str(src.checkpoint), *overrides, "--out", str(merged),
                                "--force"], out / "merge.log", env)
            _wait([p], ["merge"], {"merge": t}, walls)
        model_dir = merged.resolve()
    else:
        from rlx.models import base_dir

        model_dir = base_dir(cfg)
    procs, names, t0 = [], [], {}
    rlx_cmd = [py, "-m", "rlx.eval", *args.args, f"rollout.eval_chunk={args.batch_size}", "--out", str(out / "rlx")]
    lm_cmd = [py, "-m", "lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32", "--device",
              "cpu", "--include_path", str(out / "task"), "--tasks", TASK_NAME, *(["--apply_chat_template"] if meta["chat"]
                                                                                    else []),
              "--log_samples", "--output_path", str(out / "lm_eval"), "--batch_size", str(args.batch_size)]
    for name, cmd, done in (("rlx-eval", rlx_cmd, out / "rlx" / "completions.jsonl"),
                            ("lm-eval", lm_cmd, out / "lm_eval")):
        if args.reuse and done.exists() and (done.is_file() or any(done.rglob(f"samples_{TASK_NAME}_*.jsonl"))):
            print(f"[lm_eval_check] {name}: reusing {done}", flush=True)
            continue
        t0[name] = time.time()
        procs.append(_step(name, cmd, out / f"{name}.log", env))
        names.append(name)
        if args.jobs == 1:
            _wait(procs[-1:], names[-1:], t0, walls)
    if args.jobs == 2:
        _wait(procs, names, t0, walls)
    summary = compare_main(["--rlx", str(out / "rlx"), "--lm-eval", str(out / "lm_eval"), "--task-name", TASK_NAME,
                            "--max-diff", str(args.max_diff), "--out", str(out / "compare")])
    (out / "wall_s.json").write_text(json.dumps(walls, indent=2) + "\n")
    print(f"[lm_eval_check] wall times (s): {walls}", flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in ("export", "compare", "run"):
        print(__doc__ + "\n" + EPILOG)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        if argv[0] == "export":
            export(argv[1:])
            return 0
        if argv[0] == "run":
            return 0 if run(argv[1:])["ok"] else 1
        return 0 if compare_main(argv[1:])["ok"] else 1
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        raise SystemExit(f"lm_eval_check: error: {e}") from None


if __name__ == "__main__":
    sys.exit(main())
