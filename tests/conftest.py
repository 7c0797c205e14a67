"""Shared fixtures: small, fast configs and checkpoints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``tests.helpers`` must import in this and in child processes
    sys.path.insert(0, str(ROOT))

from tests.helpers import small_ma_ppo, small_ppo  # noqa: E402


@pytest.fixture
def ppo_algo():
    algo = small_ppo().build()
    yield algo
    algo.stop()


@pytest.fixture
def ma_algo():
    algo = small_ma_ppo(3).build()
    yield algo
    algo.stop()
