"""A TRL-style environment class for the tests (loaded by its module path, tests.envs.trl_counter_env:Counter):
reset returns an observation, one sync tool and one async tool, a reward read off the state, and private and
non-tool members that must not become tools."""

from __future__ import annotations


class Counter:
    """Counts what the model adds."""

    instances = 0

    def __init__(self):
        Counter.instances += 1
        self.count = 0

    def reset(self, **row) -> str:
        self.count, self.row = 0, row
        return " Count."

    def increment(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        if by < 0:
            raise ValueError("only counts up")
        self.count += by
        return self.count

    async def peek(self) -> int:
        """The counter's value."""
        return self.count

    def get_reward(self) -> float:
        return float(self.count)

    def _private(self) -> None:
        """Not a tool."""

    @property
    def doubled(self) -> int:  # a property: not a tool (and never evaluated while the tools are listed)
        raise AssertionError("a property was read while the tools were listed")
