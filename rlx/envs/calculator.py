"""The calculator environment (`env=calculator`): arithmetic on request, for word problems and GSM8K.

Tool format (one a small chat model can learn from the instructions alone):

    policy:       ... 18 - 2 is <calc>18-2</calc>
    environment:  <result>16</result>
    policy:        so Grace has 16 apples.
                  #### 16

A policy turn ends at `</calc>` (the driver cuts it there); the expression is the text between the
last `<calc>` and that `</calc>`, computed by rlx.envs.calc (exact, bounded, never evaluated as code);
an expression it refuses is answered `<result>error: <reason></result>`. A turn without a complete
call ends the episode: it is the answer, which the task's reward (stated_answer on wordproblems and
GSM8K) scores; numbers only the calculator wrote are not in it.
"""

from __future__ import annotations

from rlx.envs.base import Environment, Step
from rlx.envs.calc import calculate

OPEN, CLOSE = "<calc>", "</calc>"
RESULT = "<result>{}</result>"
INSTRUCTIONS = ("You have a calculator: write <calc>expression</calc> (numbers, + - * / ^ and parentheses) and its "
                "value appears as <result>value</result>. Use it for every calculation.")


class CalculatorEnv(Environment):
    stop_strings = (CLOSE,)
    INSTRUCTIONS = INSTRUCTIONS

    def step(self, action_ids: list[int]) -> Step:
        text = self.text(action_ids)
        end = text.find(CLOSE)
        if end < 0:  # no call: this turn is the answer
            return Step(done=True)
        start = text.rfind(OPEN, 0, end)
        if start < 0:
            value, errors = "error: no <calc> before </calc>", 1
        else:
            value = calculate(text[start + len(OPEN): end], self.cfg.calculator)
            errors = int(value.startswith("error"))
        ends_eos = bool(action_ids) and action_ids[-1] == self.tok.eos_token_id
        return Step(self.fmt.reply(RESULT.format(value), after_eos=ends_eos),
                    info={"tool_calls": 1, "tool_errors": errors})
