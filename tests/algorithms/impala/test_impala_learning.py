"""IMPALA and APPO learn CartPole-v1: greedy return >= 475 within 30k env steps, one seed each
(bench/impala_learning.py runs 3 seeds; docs/impala.md records them), synchronous path; and
IMPALA with an LSTM within 40k."""

from __future__ import annotations

import pytest

from tests.algorithms.impala.small import steps_to_bar
from tests.helpers import learning_seed


@pytest.mark.slow
@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_learns_cartpole_within_30k_steps(algo_name):
    first, points = steps_to_bar(algo_name, learning_seed(0), bar=475.0, budget=30_000, eval_every=2_000)
    assert first is not None, f"{algo_name}: greedy returns {points} never reached 475 in 30k env steps"


@pytest.mark.slow
def test_impala_with_an_lstm_learns_cartpole_within_40k_steps():
    # bench/impala_learning.py --lstm: seeds 0-4 reached 475 at 6,000-20,400 env steps.
    model = {"hidden": [64], "use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 20}
    first, points = steps_to_bar("IMPALA", learning_seed(0), bar=475.0, budget=40_000, eval_every=2_000,
                                 model=model)
    assert first is not None, f"IMPALA, LSTM: greedy returns {points} never reached 475 in 40k env steps"
