"""The parts of asynchronous sampling that need no Ray: refused arguments, and the group
refusing asynchronous sampling without remote runners."""

import pytest

from cairn.env_runner.async_sampler import AsyncSampler
from cairn.errors import CairnError, ConfigError


def test_the_sampler_refuses_no_requests_and_a_get_before_any_weights():
    with pytest.raises(ConfigError, match="requests_in_flight must be an int >= 1, got 0"):
        AsyncSampler(runners=None, requests_in_flight=0)  # type: ignore[arg-type]
    with pytest.raises(CairnError, match=r"before set_weights\(\)"):
        AsyncSampler(runners=None).get()  # type: ignore[arg-type]


def test_asynchronous_sampling_needs_remote_runners(ppo_algo):
    with pytest.raises(ConfigError, match="needs remote env runners, but num_env_runners=0"):
        ppo_algo.env_runner_group.broadcast_weights(0)
    with pytest.raises(CairnError, match=r"before broadcast_weights\(version\)"):
        ppo_algo.env_runner_group.sample_async()
