"""The ecosystem environments on every engine and schedule: both example verifiers environments
(examples/envs/wordproblems_vf.py, a SingleTurnEnv; examples/envs/calculator_vf.py, a ToolEnv) and the TRL-style
class (examples/envs/calculator_trl.py) train end to end through rlx.train on colocated vLLM and on a local vLLM
server, in sync and async mode. With the hf runs of test_verifiers.py, test_verifiers_tools.py and
test_trl_env.py (sync) and the follow-up environment's async run, every environment meets every engine and both
modes, and every engine both modes (a pairwise cover: the whole product is 18 runs of 30-60 s each).

The tiny model never writes a tool call, so the tool environments' first replies are scripted
(tests/envs/forced_tools.py), their log-probs teacher-forced on the trainer's policy."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verifiers", reason="verifiers is not installed (the envs extra: pip install -e '.[envs]')")
pytest.importorskip("vllm")

from tests.envs.forced_tools import ForceToolCall, braces, tool_call_text  # noqa: E402
from tests.envs.helpers import spy_updates  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SINGLE = str(ROOT / "examples" / "envs" / "wordproblems_vf.py")
TOOLS = str(ROOT / "examples" / "envs" / "calculator_vf.py")
TRL = f"{ROOT / 'examples' / 'envs' / 'calculator_trl.py'}:WordProblemCalculator"
PLAIN = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
         "{% if add_generation_prompt %}<assistant>{% endif %}")
WITH_TOOLS = ("{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }} {% endfor %}</tools>\n{% endif %}"
              + PLAIN)
# the suite's tiny model at head_dim 32: vLLM's CPU attention needs >= 32 (tests/envs/test_loop.py)
VLLM_MODEL = ["model.hidden_size=64", "model.num_heads=2", "model.num_kv_heads=1", "model.max_position_embeddings=512"]
WORDS = ["task=wordproblems", "task.steps=1", "task.max_operand=9", "task.n_train=8", "task.n_eval=2"]
ENVS = {  # name: (overrides, env.args, chat template, scripted first reply or None)
    "vf-single": (["env=verifiers", f"env.id={SINGLE}", "rollout.max_new_tokens=64", "env.turn_tokens=8"],
                  {"n_train": 24, "n_eval": 4, "steps": 1, "max_operand": 9}, PLAIN, None),
    "vf-tools": (["env=verifiers", f"env.id={TOOLS}", "rollout.max_new_tokens=160", "env.turn_tokens=90",
                  "env.max_turns=3"], {"n_train": 6, "n_eval": 2, "steps": 1, "max_operand": 9, "system_prompt": None},
                 WITH_TOOLS, "calculate"),
    "trl": (WORDS + ["env=trl", f"env.factory={TRL}", "rollout.max_new_tokens=240", "env.turn_tokens=90",
                     "env.max_turns=3"], None, WITH_TOOLS, "submit"),
}
# a local server's start and its adapter syncs make a run ~5x a colocated one (150-170 s at load 6 on 2 cores):
# the server rows are `slow`, run with `-m slow`, to keep the suite inside CI's time
SERVER = pytest.mark.slow
CASES = [pytest.param("vf-single", "vllm", "sync", id="vf-single-vllm-sync"),
         pytest.param("vf-single", "vllm_server", "async", id="vf-single-vllm_server-async", marks=SERVER),
         pytest.param("vf-tools", "vllm", "async", id="vf-tools-vllm-async"),
         pytest.param("vf-tools", "vllm_server", "sync", id="vf-tools-vllm_server-sync", marks=SERVER),
         pytest.param("trl", "vllm", "sync", id="trl-vllm-sync"),
         pytest.param("trl", "vllm_server", "async", id="trl-vllm_server-async", marks=SERVER)]


def _script(kind: str | None):
    """The tool environments' scripted replies: the calculator once (ToolEnv), or submit the gold (TRL), then the
    model's own replies."""
    if kind == "calculate":
        call = tool_call_text("calculate", expression="12*3")
        return lambda context: None if "<tool>" in context else call
    if kind == "submit":
        from rlx.envs.ecosystem.trl_task import _TASKS
        from tests.envs.test_trl_env import submit_script

        scripts = {}
        return lambda context: scripts.setdefault(0, submit_script(_TASKS[TRL]))(context)
    return None


@pytest.mark.integration
@pytest.mark.parametrize("env,engine,mode", CASES)
def test_an_ecosystem_environment_trains_on_each_engine_and_mode(tmp_path, monkeypatch, env, engine, mode):
    """Two steps of rlx.train: finished; every environment and template token is forced and outside the loss, every
    sampled token inside it; the rubric's (or get_reward's) rewards are logged by name; in sync the trainer's
    log-probs are the engine's; with tools, every episode's scripted call ran."""
    import rlx.train
    from rlx.envs.ecosystem.trl_env import Trl
    from rlx.envs.ecosystem.vf_engine import Verifiers
    from tests.conftest import TINY, compose, read_metrics

    overrides, args, template, scripted = ENVS[env]
    cfg = compose(TINY + VLLM_MODEL + overrides + [
        f"rollout={engine}", f"rollout.mode={mode}", "rollout.max_staleness=1", "train.steps=2", "train.eval_every=2",
        "train.ckpt_every=2", "rollout.eval_k=0", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "model.sft.steps=5", f"model.cache_dir={tmp_path / 'cache'}"])
    cfg.env.args = args
    cfg.model.chat_template = template

    policies, build = [], rlx.train.build_engine
    monkeypatch.setattr(rlx.train, "build_engine", lambda c, tok, policy, *a, **k: policies.append(policy)
                        or build(c, tok, policy, *a, **k))
    if scripted:  # the scripted reply's log-probs come from the trainer's policy (vLLM's engines hold none)
        owner = Verifiers if env.startswith("vf") else Trl
        wrap, script = owner.wrap, _script(scripted)

        monkeypatch.setattr(owner, "wrap", staticmethod(
            lambda c, eng, tok: wrap(c, ForceToolCall(eng, tok, script, policy=policies[0]), tok)))
    seen = spy_updates(monkeypatch)
    with braces():  # the tool-calling runs need '{' and '}' in the tiny vocabulary; a cache of the run's own
        assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"

    rows = [r for r in read_metrics(tmp_path / "run") if r["step"] > 0 and "train/reward/mean" in r]
    assert len(seen) == len(rows) == 2
    names = {"vf-single": ["correct_answer", "states_an_answer"], "vf-tools": ["correct_answer", "calculate_calls"],
             "trl": ["stated_answer"]}[env]
    for row in rows:
        for name in names:
            assert f"train/rewards/{name}" in row, sorted(row)
        if mode == "sync":
            assert abs(row["rollout/logprob_diff/mean"]) < 1e-3, row["rollout/logprob_diff/mean"]
        if scripted == "calculate":
            assert row["train/rewards/calculate_calls"] == 1.0
        if scripted == "submit":
            assert row["train/env_reward/mean"] == 1.0
    for batch, mask in seen:
        sampled = batch.completion_mask.bool() & ~batch.forced  # [N, T]
        assert (mask[batch.forced] == 0).all() and (mask[sampled] == 1).all()
        if scripted:
            assert batch.forced.any()
