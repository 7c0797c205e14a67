"""cairn.Callbacks in remote Ray env runners: built there from the config's reference, their
episode hooks run in the runner's process and their custom metrics come back with the episodes."""

import pytest

from tests.callbacks.hooks import CALLS, CountingCallbacks
from tests.helpers import small_ppo

pytestmark = pytest.mark.ray


def test_hooks_run_in_remote_env_runners(ray_cluster) -> None:
    CALLS.clear()
    algo = small_ppo().env_runners(num_env_runners=1).callbacks(CountingCallbacks).build()
    try:
        result = algo.train()
        # The episode hooks ran in the runner's process (this process saw none of them); their
        # custom metrics came back with the episodes.
        assert CALLS["on_episode_step"] == 0 and CALLS["on_train_result"] == 1
        assert result["custom_metrics"]["length_mean"] == pytest.approx(result["episode_len_mean"])
    finally:
        algo.stop()
