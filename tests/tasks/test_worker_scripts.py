"""Reward workers from a user's script: no `if __name__ == "__main__":` guard needed, and no math-verify
timeout notices in its output (rlx.tasks.workers._main_not_reimported, rlx.tasks.verify._NoTimeoutNotice)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    from rlx.tasks.base import Example
    from rlx.tasks.rewards import math_verify_batch, stated_answer_batch
    from rlx.tasks.user_rewards import UserRewards

    print("started")  # an unguarded script: a re-import in a worker would print this again
    mv = math_verify_batch(["#### 18 - 2", "#### 15"], [Example("a", "p", "16")] * 2)
    sa = stated_answer_batch(["\\\\boxed{\\\\frac{2}{4}}", "#### 16"], [Example("b", "p", "\\\\frac12"), Example("c", "p", "16")])
    user = UserRewards(["tests.tasks.reward_fns:short"], 5.0)
    got = user("tests.tasks.reward_fns:short", {"completions": ["abc", "abcd"], "prompts": ["p", "p"]})
    print("scores", mv, sa, got)
''')


def test_a_script_without_a_main_guard_scores_rewards_quietly(tmp_path):
    script = tmp_path / "train_my_way.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # math_verify pays for the expression (why stated_answer exists); stated_answer for the equal fraction
    assert "scores [1.0, 0.0] [1.0, 1.0] [1.0, 0.0]" in out.stdout, text
    assert out.stdout.count("started") == 1, text  # never re-run in a worker
    assert "Timeout is disabled" not in text
