"""`python -m benchmarks.studies.eval_sets_fit [--steps 60]`: one run on user-format data with two named eval sets, fitted per set.

Writes the default arithmetic task as a user would hold it (parquet of chat `messages` for training;
the held-out split as a parquet file and a `datasets.save_to_disk` directory, 100 rows each), trains
the default experiment on it (`task.name=file`, a chat template that renders the message text), and
fits ScaleRL's sigmoid to `val/pq/acc` and to `val/ds/acc`. The figures in docs/data.md come from it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--work", default=None, help="directory for the data and the run (default: a temp dir)")
    a = ap.parse_args(argv)
    import pandas as pd
    from datasets import Dataset
    from omegaconf import OmegaConf

    from benchmarks.vs_trl_sides import compose_rlx
    from rlx.scaling import fit_run
    from rlx.tasks import build_task
    from rlx.train import run

    out = Path(a.work or tempfile.mkdtemp(prefix="rlx-eval-sets-"))
    out.mkdir(parents=True, exist_ok=True)
    task = build_task(compose_rlx([]).task)
    task.set_seed(0)
    def chat(e):
        return {"messages": [{"role": "user", "content": e.prompt}], "answer": e.answer}

    pd.DataFrame([chat(e) for e in task.train]).to_parquet(out / "train.parquet")
    held = [chat(e) for e in task.eval]
    pd.DataFrame(held[:100]).to_parquet(out / "held.parquet")
    Dataset.from_list(held[100:200]).save_to_disk(str(out / "held_ds"))
    cfg = compose_rlx([
        "task.name=file", f"task.train_path={out / 'train.parquet'}", f"task.eval_path={out / 'held.parquet'}",
        "task.question_field=messages", "task.n_train=0", "task.n_eval=0",
        f"task.eval={{pq:{{path:'{out / 'held.parquet'}'}},ds:{{path:'{out / 'held_ds'}'}}}}",
        f"train.steps={a.steps}", f"train.eval_every={a.eval_every}", "scaling=sigmoid", "logger=disabled",
        "trainer.threads=1", "train.progress=false"])
    cfg.model.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the prompt text itself
    summary = run(cfg, out / "run")
    fits = {}
    for metric in ("val/pq/acc", "val/ds/acc"):
        try:
            f = fit_run(out / "run", {**OmegaConf.to_container(cfg.scaling), "metric": metric})
            fits[metric] = {k.split("/")[-1]: round(f[f"scaling/{k.split('/')[-1]}"], 4) for k in ("A", "A_lo", "A_hi", "B", "R0")}
        except ValueError as e:
            fits[metric] = {"error": str(e)}
    result = {"run": str(out / "run"), "val/acc_base": summary["val/acc_base"], "val/acc": summary["val/acc"],
              "wall_s": round(summary["wall_s"], 1), "fits": fits}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
