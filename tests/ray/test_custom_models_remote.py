"""A user's model and action masks in remote Ray env runners: the runner rebuilds the policy
from its state (the model class resolved by reference in the worker) and never acts illegally."""

import numpy as np
import pytest

import cairn
from tests.models.masked_env import make_pick_legal
from tests.models.nets import MaskAware

pytestmark = pytest.mark.ray


def test_remote_runners_act_with_a_custom_masked_model(ray_cluster):
    config = (cairn.PPOConfig().environment(make_pick_legal)
              .training(train_batch_size=256, minibatch_size=64, num_epochs=1,
                        model={"custom_model": MaskAware})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2).debugging(seed=0))
    algo = config.build()
    try:
        for _ in range(2):
            result = algo.train()
        assert result["num_healthy_env_runners"] == 1 and result["num_env_steps_sampled_lifetime"] >= 512
        # The remote runner rebuilt the policy (the user's class, resolved by reference in the
        # worker) and the env counted no illegal action.
        import ray

        runner_state = ray.get(algo.env_runner_group.remote_actors()[0].get_state.remote())
        env_states = [env["state"] for env in runner_state["envs"]]
        assert sum(s["steps"] for s in env_states) >= 512
        assert sum(s["illegal"] for s in env_states) == 0
    finally:
        algo.stop()
    assert np.isfinite(result["episode_return_mean"])
