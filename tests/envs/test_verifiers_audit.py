"""rlx-audit on a verifiers environment's rubric: the hack classes of rlx.tasks.hacks scored by the rubric itself
(in its spawn worker), as they are for rlx's own reward sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verifiers", reason="verifiers is not installed (the envs extra: pip install -e '.[envs]')")

ROOT = Path(__file__).resolve().parents[2]
# a rubric as it is often written: the last '#### N' anywhere in the reply
LOOSE = '''
import re
import verifiers as vf
from datasets import Dataset


def last_number(text):
    found = re.findall(r"####\\s*(-?\\d+)", text or "")
    return found[-1] if found else None


def correct(completion, answer, parser, **kwargs):
    return 1.0 if parser.parse_answer(completion) == str(answer) else 0.0


def load_environment():
    rows = [{"question": f"What is {a} + {a}? Write the final answer as '#### N'.", "answer": str(2 * a)}
            for a in range(1, 13)]
    parser = vf.Parser(extract_fn=last_number)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), parser=parser,
                            rubric=vf.Rubric(funcs=[correct], weights=[1.0], parser=parser))
'''


@pytest.mark.integration
def test_the_audit_reads_a_rubric_and_names_what_it_pays(tmp_path):
    from rlx.eval.audit import main

    (tmp_path / "loose_env.py").write_text(LOOSE)
    loose, strict = tmp_path / "loose.json", tmp_path / "strict.json"
    assert main(["env=verifiers", f"env.id={tmp_path / 'loose_env.py'}", "--n", "6", "--json", str(loose)]) == 1
    paid = set(json.loads(loose.read_text())["paid"])
    assert {"expression", "multiple_answers", "negation", "qualifier"} <= paid, paid
    example = ROOT / "examples" / "envs" / "wordproblems_vf.py"
    assert main(["env=verifiers", f"env.id={example}", "env.args={n_train:20,n_eval:6}", "--n", "6",
                 "--json", str(strict)]) == 0
    result = json.loads(strict.read_text())
    assert result["rewards"]["correct_answer"] == 1.0 and result["control"]["verdict"] == "ok"
    assert result["task"] == f"verifiers:{example}"


@pytest.mark.parametrize("reading", ["strict", "last_number"])
def test_the_trl_reward_pays_what_the_environments_rubric_pays(reading):
    """rlx's own task trains beside the environment on examples/envs/wordproblems_reward.py: the same rule, so a
    paired difference between the two runs is the integration's, not the reward's."""
    import examples.envs.wordproblems_reward as trl_reward
    from examples.envs.wordproblems_vf import load_environment

    env = load_environment(n_train=4, n_eval=2, steps=1, reading=reading)
    texts = ["Grace has 18 - 2 = 16.", "#### 16", "It is 16.\n#### 16", "#### 15\n#### 16", "#### 1,6", "16 or 17",
             "The answer is 16, so 16 + 0 = 16.\n", "#### 16.0", "no number", ""]
    gold = ["16"] * len(texts)
    funcs = {f.__name__: f for rubric in env.rubric.rubrics for f in rubric.funcs}  # a RubricGroup in 0.1.10
    rubric = [funcs["correct_answer"](completion=[{"role": "assistant", "content": t}], answer=a, parser=env.parser)
              for t, a in zip(texts, gold)]
    trl = getattr(trl_reward, f"{reading}_correct")(completions=texts, answer=gold)
    assert trl == rubric
    # hand-read: strict pays a last line '#### 16' alone; last_number pays any reply whose last number is 16;
    # both drop commas as thousands separators, as lm-eval does, so '1,6' reads 16
    expected = {"strict": [0, 1, 1, 0, 1, 0, 0, 1, 0, 0], "last_number": [1, 1, 1, 1, 1, 0, 1, 1, 0, 0]}[reading]
    assert trl == [float(x) for x in expected]
