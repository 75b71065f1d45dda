"""Fixtures for the noise tests (helpers live in noise_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from tests.noise.noise_helpers import VOCAB


@pytest.fixture
def prompt_ids() -> torch.Tensor:  # [4, 6]
    return torch.randint(0, VOCAB, (4, 6), generator=torch.Generator().manual_seed(7))
