"""A learnt policy that gives an action the behaviour policy took a log-probability of -inf makes
IMPALA's loss NaN (V-trace's ratio 0 times log pi = -inf) and APPO's KL estimate infinite. The
NonFiniteLossError said the environment was the likely cause; it now says which network calls
which taken action impossible, and the fix."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from cairn.algorithms.impala.fragments import join_fragments
from cairn.algorithms.impala.learn import vtrace_learn
from cairn.errors import NonFiniteLossError
from cairn.learners import LOCAL_SYNC
from tests.algorithms.impala.small import small

LSTM = {"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 7}


@pytest.mark.parametrize("lstm", [False, True])
@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_a_taken_action_of_log_probability_minus_inf_is_named(algo_name: str, lstm: bool) -> None:
    training: dict[str, object] = {"train_batch_size": 120, **({"model": LSTM} if lstm else {})}
    if algo_name == "APPO":
        training["use_kl_loss"] = True  # its KL estimate is infinite there (without it the loss stays finite)
    algo = small(algo_name, **training).build()
    try:
        fragments = algo.sample_fragments()
        batch = join_fragments(fragments, "default_policy")
        assert (batch["actions"] == 0).any() and np.isfinite(batch["action_logp"]).all()
        policy = algo.get_policy()
        bias = dict(policy.model.named_parameters())["action_head.bias"]
        with torch.no_grad():
            bias[0] = -float("inf")  # the learnt network: action 0 is impossible
        before = {k: v.copy() for k, v in policy.get_weights().items()}
        with pytest.raises(NonFiniteLossError) as info:
            algo.learn_on_fragments(fragments)
        message = str(info.value)
        assert "policy 'default_policy'" in message
        assert "The network being learnt gives the action taken in" in message
        assert "first: action 0)" in message
        assert "log-probability of -inf" in message and "the environment is not at fault" in message
        assert "from the environment" not in message  # the old message's likely cause
        after = policy.get_weights()
        assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)  # not applied
        again = pickle.loads(pickle.dumps(info.value))  # as a DDP learner sends it
        assert str(again) == message and again.detail == info.value.detail
        with torch.no_grad():
            bias[0] = 0.0
        algo.learn_on_fragments(algo.sample_fragments())  # and the next step works
    finally:
        algo.stop()


def test_a_nan_loss_with_finite_log_probabilities_keeps_the_general_message() -> None:
    algo = small("IMPALA", train_batch_size=120).build()
    try:
        batch = join_fragments(algo.sample_fragments(), "default_policy")
        batch["rewards"][3] = np.nan
        with pytest.raises(NonFiniteLossError, match="from the environment"):
            vtrace_learn(algo.config, algo.get_policy(), LOCAL_SYNC, batch=batch,
                         permutations=[np.arange(len(batch))], appo=False)
    finally:
        algo.stop()
