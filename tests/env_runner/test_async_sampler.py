"""The parts of asynchronous sampling that need no Ray: the policy lag, refused arguments, and
the group refusing asynchronous sampling without remote runners."""

import math

import pytest

from cairn.env_runner.async_sampler import AsyncSampler, Fragment, policy_lag
from cairn.env_runner.remote import SampleResult
from cairn.errors import CairnError, ConfigError


def fragment(version: int) -> Fragment:
    return Fragment(worker_index=1, weights_version=version, result=SampleResult({}, [], {}, 0, {}))


def test_policy_lag_is_the_learner_version_minus_each_fragments():
    lag = policy_lag([fragment(3), fragment(5), fragment(5)], learner_version=7)
    assert lag == {"policy_lag_mean": pytest.approx((4 + 2 + 2) / 3), "policy_lag_max": 4.0}
    assert all(math.isnan(v) for v in policy_lag([], learner_version=7).values())


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
