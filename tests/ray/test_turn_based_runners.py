"""A turn-based PettingZoo game (tic-tac-toe self-play) sampled by a remote Ray env runner."""

import pytest

from tests.env_runner.test_turn_based import _ppo, make_tictactoe

pytestmark = pytest.mark.ray


def test_remote_runner_samples_a_turn_based_game(ray_cluster, tmp_path):
    algo = _ppo(make_tictactoe).env_runners(num_env_runners=1).build()
    try:
        assert len(algo.env_runner_group.remote_actors()) == 1
        for _ in range(2):
            result = algo.train()
        assert result["num_healthy_env_runners"] == 1
        assert result["num_episodes"] > 0 and result["num_env_steps_sampled_lifetime"] >= 256
        # The remote runner's state (gathered by the driver) holds the games in flight.
        path = algo.save(tmp_path / "c")
        restored = type(algo).from_checkpoint(path)
        try:
            assert restored.train()["num_episodes"] > 0
        finally:
            restored.stop()
    finally:
        algo.stop()
