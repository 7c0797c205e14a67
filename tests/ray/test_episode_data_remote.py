"""Episode getters in a remote Ray env runner: the callbacks built in the actor see what the
env emitted there (tests/callbacks/test_episode_data.py has the local, async and multi-agent
cases)."""

from pathlib import Path

import pytest

from tests.callbacks import expected_episodes as expected
from tests.callbacks.emitting import read_log
from tests.callbacks.test_episode_data import emit_ppo

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_remote_runner_callbacks_see_the_data_the_env_emitted(ray_cluster, tmp_path: Path) -> None:
    algo = emit_ppo(tmp_path, num_env_runners=1).build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    seen = read_log(tmp_path, "callbacks")
    expected.assert_same_episodes(seen, expected.single_agent(read_log(tmp_path, "env")))
    # The per-episode metric came back from the actor with its episodes.
    assert result["custom_metrics"]["reward_sum_max"] == pytest.approx(max(r["reward_sum"] for r in seen))
