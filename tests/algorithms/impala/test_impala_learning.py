"""IMPALA and APPO learn CartPole-v1: greedy return >= 475 within a budget of env steps, one seed
each (bench/impala_learning.py runs several; docs/impala.md records them), synchronous path; and
IMPALA with an LSTM within 40k.

The budgets come from the seeds measured with the seed streams of cairn.rng (docs/impala.md
"Learning"): IMPALA reached 475 within 22,200 env steps for each of seeds 0-4; APPO's path varies
more (2,400-46,200 over seeds 0-7), so APPO's budget is 60,000: the slowest of the eight with a
margin of a quarter, not a budget one seed happens to meet."""

from __future__ import annotations

import pytest

from tests.algorithms.impala.small import steps_to_bar
from tests.helpers import learning_seed


@pytest.mark.slow
@pytest.mark.parametrize(("algo_name", "budget"), [("IMPALA", 30_000), ("APPO", 60_000)])
def test_learns_cartpole_within_its_budget(algo_name, budget):
    first, points = steps_to_bar(algo_name, learning_seed(0), bar=475.0, budget=budget, eval_every=2_000)
    assert first is not None, f"{algo_name}: greedy returns {points} never reached 475 in {budget} env steps"


@pytest.mark.slow
def test_impala_with_an_lstm_learns_cartpole_within_40k_steps():
    # bench/impala_learning.py --lstm: seeds 0-4 reached 475 at 6,000-20,400 env steps.
    model = {"hidden": [64], "use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 20}
    first, points = steps_to_bar("IMPALA", learning_seed(0), bar=475.0, budget=40_000, eval_every=2_000,
                                 model=model)
    assert first is not None, f"IMPALA, LSTM: greedy returns {points} never reached 475 in 40k env steps"
