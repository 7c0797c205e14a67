"""A remote Ray env runner with a policy mapping drawn per episode: each row goes to the policy
drawn for its episode (:mod:`tests.env_runner.episode_draws`), also across a checkpoint that
gathered the runner's episodes in flight."""

import numpy as np
import pytest

from tests.env_runner import episode_draws as draws

pytestmark = pytest.mark.ray


def _check(batches, env_steps: int) -> None:
    # Each opponent's rows come from the episodes of its parity (observation column 1) only;
    # agent_0 (main) acts at every env step.
    assert set(np.unique(batches["opp_a"]["obs"][:, 1])) == {0}
    assert set(np.unique(batches["opp_b"]["obs"][:, 1])) == {1}
    assert len(batches["main"]) == env_steps


def test_remote_runner_gives_each_row_to_the_policy_drawn_for_its_episode(ray_cluster, tmp_path):
    config = (draws.config(draws.make_duel).training(train_batch_size=64, minibatch_size=32, num_epochs=1)
              .env_runners(num_env_runners=1, rollout_fragment_length=37))
    algo = config.build()
    try:
        batches, _, env_steps = algo.env_runner_group.sample()
        _check(batches, env_steps)
        algo.train()
        path = algo.save(tmp_path / "c")  # an episode in flight, with its mapping
    finally:
        algo.stop()
    restored = type(algo).from_checkpoint(path)
    try:
        batches, _, env_steps = restored.env_runner_group.sample()
        _check(batches, env_steps)
    finally:
        restored.stop()
