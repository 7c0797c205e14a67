"""Adding and removing policies while training: the env runners follow the new mapping."""

from __future__ import annotations

import numpy as np
import pytest

import cairn
from cairn.env_runner import EnvRunner
from cairn.env_runner.remote import RemoteEnvRunner
from cairn.errors import ConfigError
from tests.helpers import (
    readd_after_removal_matches_restore,
    small_ma_dqn,
    small_ma_ppo,
    small_ma_sac,
    small_ma_td3,
    small_ppo,
)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_add_then_remove_policy_on_a_single_agent_env():
    """RLlib's test_add_delete_policy flow on CartPole: the new mapping is followed."""
    algo = small_ppo().build()
    algo.train()
    new = cairn.Policy.from_spec(algo.get_policy().spec, seed=1)
    algo.add_policy("new", new, policy_mapping_fn=lambda aid, **kw: "new")
    new_before = new.get_weights()
    # The episodes in flight end with default_policy (RLlib's rule); the next ones are new's.
    assert "new" in algo.train()["learners"]
    assert not _same(new.get_weights(), new_before)  # "new" sampled and trained
    default_before = algo.get_policy().get_weights()
    result = algo.train()
    assert set(result["learners"]) == {"new"}
    assert _same(algo.get_policy().get_weights(), default_before)  # default_policy did neither
    algo.remove_policy("default_policy", policy_mapping_fn=lambda aid, **kw: "new")
    assert set(algo.policies) == {"new"}
    assert set(algo.train()["learners"]) == {"new"}
    assert set(algo.evaluate()["policy_episode_return_mean"]) == {"new"}
    algo.stop()


def test_runner_starts_new_episodes_only_when_a_policy_in_flight_is_removed():
    algo = small_ppo().build()
    runner = EnvRunner(algo.config, algo.policies)
    runner.sample(5)
    algo.add_policy("other", algo.get_policy().spec, policy_mapping_fn=lambda aid, **kw: "other")
    runner.update_policies(algo.config, algo.policies)
    # The episodes in flight go on with default_policy; the next ones are other's.
    assert not runner.get_state()["needs_reset"]
    assert runner.get_state()["episode_policy_ids"] == ["default_policy"] * runner.num_envs
    assert set(runner.sample(200)) == {"default_policy", "other"}  # every first episode ended
    assert runner.get_state()["episode_policy_ids"] == ["other"] * runner.num_envs
    assert set(runner.sample(5)) == {"other"}
    # default_policy removed while no episode acts with it: nothing restarts.
    config = algo.config.copy().multi_agent(policies={"other": algo.config.policies["other"]})
    runner.update_policies(config, {"other": algo.get_policy("other")})
    assert not runner.get_state()["needs_reset"]


def test_removing_the_policy_of_an_agent_gone_from_the_episode_starts_new_episodes(tmp_path):
    """An episode that mapped a departed agent to the removed policy starts over, as a restore of
    a checkpoint saved after the removal does (its saved mapping names a policy that is gone):
    the live run and the restored one then continue alike."""
    algo = small_ma_ppo(2).build()
    runner = algo.env_runner_group.local
    for _ in range(500):  # until one agent's pole has fallen while the other's stands
        if len(runner.envs[0].agents) == 1:
            break
        runner.sample(1)
    (stays,) = runner.envs[0].agents
    gone_pid = "p1" if stays == "agent_0" else "p0"
    stays_pid = "p0" if gone_pid == "p1" else "p1"
    gone = "agent_1" if stays == "agent_0" else "agent_0"
    assert runner.get_state()["current_obs"][0]["agent_pids"][gone] == gone_pid  # mapped, not in flight
    algo.remove_policy(gone_pid, policy_mapping_fn={"agent_0": stays_pid, "agent_1": stays_pid})
    assert runner.get_state()["needs_reset"]
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    try:
        a, b = runner.sample(20), restored.env_runner_group.local.sample(20)
        assert set(a) == set(b) == {stays_pid}
        for key in a[stays_pid]:
            np.testing.assert_array_equal(a[stays_pid][key], b[stays_pid][key], err_msg=key)
    finally:
        restored.stop()
        algo.stop()


def test_multi_agent_runner_keeps_the_mapping_of_the_episodes_in_flight():
    """RLlib's rule: a new mapping applies from each env's next episode."""
    algo = small_ma_ppo(2).build()
    runner = EnvRunner(algo.config, algo.policies)
    runner.sample(3)
    config = algo.config.copy().multi_agent(policy_mapping_fn={"agent_0": "p0", "agent_1": "p0"})
    runner.update_policies(config, algo.policies)
    assert not runner.get_state()["needs_reset"]
    assert runner.get_state()["current_obs"][0]["agent_pids"] == {"agent_0": "p0", "agent_1": "p1"}
    while runner.get_state()["current_obs"][0]["agent_pids"].get("agent_1") == "p1":
        runner.sample(1)  # until the episode in flight ends
    assert set(runner.sample(20)) == {"p0"}
    # A policy of the episode in flight removed: the envs start over.
    runner.sample(1)
    config = algo.config.copy().multi_agent(policies={"p1"}, policy_mapping_fn=lambda aid, **kw: "p1")
    runner.update_policies(config, {"p1": algo.get_policy("p1")})
    assert runner.get_state()["needs_reset"]
    assert set(runner.sample(5)) == {"p1"}


@pytest.mark.parametrize("multi_agent", [False, True])
def test_runner_refuses_a_mapping_to_a_missing_policy_and_keeps_its_own(multi_agent):
    algo = (small_ma_ppo(2) if multi_agent else small_ppo()).build()
    runner = EnvRunner(algo.config, algo.policies)
    runner.sample(3)
    config = algo.config.copy().multi_agent(policy_mapping_fn=lambda aid, **kw: "gone")
    with pytest.raises(ConfigError, match="to 'gone', which is not one of the policies") as err:
        runner.update_policies(config, algo.policies)
    assert "add the policy first" in str(err.value)
    assert runner.config is algo.config and not runner.get_state()["needs_reset"]
    assert set(runner.sample(3)) <= set(algo.policies)


def test_remote_runner_reset_policies_follows_the_new_mapping():
    """The Ray actor's class, run in this process: it uses EnvRunner.update_policies."""
    algo = small_ppo().build()
    remote = RemoteEnvRunner(algo.config, {p: s.get_state() for p, s in algo.policies.items()}, 1)
    algo.add_policy("new", cairn.PolicySpec(), policy_mapping_fn=lambda aid, **kw: "new")
    broadcast = {pid: {"weights": p.get_weights(), "observation_filter": p.observation_filter.get_state(),
                       "global_timestep": p.global_timestep}
                 for pid, p in algo.policies.items()}
    remote.reset_policies(algo.config, {pid: p.get_state() for pid, p in algo.policies.items()})
    assert set(remote.sample(broadcast).batches) == {"new"}
    algo.stop()


def test_remove_policy_without_new_mapping_fails_before_anything_changes(ma_algo):
    with pytest.raises(ConfigError, match="not one of the policies"):
        ma_algo.remove_policy("p1")
    assert set(ma_algo.policies) == {"p0", "p1", "p2"}
    assert set(ma_algo.train()["learners"]) == {"p0", "p1", "p2"}


class _PolicyThatFailsToBuild(cairn.Policy):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("this policy cannot be built")


def test_add_policy_whose_policy_fails_to_build_changes_nothing():
    """Issue 38 item 3: the new policy is built before the algorithm takes the new config. On
    main the config already named the new policy (and kept it) when building it raised."""
    algo = small_ppo().build()
    try:
        spec = algo.get_policy().spec
        failing = cairn.PolicySpec(_PolicyThatFailsToBuild, spec.observation_space, spec.action_space,
                                   spec.config)
        config_before, weights_before = algo.config.to_dict(), algo.get_policy().get_weights()
        with pytest.raises(RuntimeError, match="cannot be built"):
            algo.add_policy("new", failing, policy_mapping_fn=lambda aid, **kw: "new")
        assert set(algo.policies) == {"default_policy"} and set(algo.config.policies) == {"default_policy"}
        assert algo.config.to_dict() == config_before
        assert _same(algo.get_policy().get_weights(), weights_before)
        assert set(algo.train()["learners"]) == {"default_policy"}  # the old mapping still holds
    finally:
        algo.stop()


def test_add_policy_under_an_id_in_use_is_refused_and_the_trained_policy_kept():
    """add_policy used to replace a policy of the same ID without a word, dropping its trained
    weights and optimizer state (RLlib refuses too). Replacing takes remove_policy first."""
    algo = small_ppo().build()
    try:
        algo.train()
        trained = algo.get_policy()
        weights_before, config_before = trained.get_weights(), algo.config.to_dict()
        with pytest.raises(ConfigError, match=r"already exists.*remove_policy\('default_policy'\)"):
            algo.add_policy("default_policy", trained.spec)
        assert algo.get_policy() is trained and _same(trained.get_weights(), weights_before)
        assert algo.config.to_dict() == config_before
        algo.train()  # still trains the same policy
        assert algo.get_policy() is trained
    finally:
        algo.stop()


def test_add_policy_of_an_object_already_in_the_algorithm_is_refused():
    """add_policy("frozen", algo.get_policy("p0")) used to register the one object under two
    IDs: the "frozen" opponent kept learning (p0's optimizer steps changed its weights, p0's
    sampling fed its observation filter) and a checkpoint saved it twice, so a restored run
    (two objects) acted differently from the live one. Nothing changes when it is refused."""
    algo = small_ma_ppo(2).env_runners(observation_filter="MeanStdFilter").build()
    try:
        algo.train()
        config_before, policies_before = algo.config.to_dict(), dict(algo.policies)
        with pytest.raises(ConfigError, match=r"add_policy\('frozen', \.\.\.\).*already this algorithm's "
                                              r"policy 'p0'.*Policy\.from_state"):
            algo.add_policy("frozen", algo.get_policy("p0"), policies_to_train=["p0", "p1"])
        assert algo.config.to_dict() == config_before and algo.policies == policies_before
        copy = cairn.Policy.from_state(algo.get_policy("p0").get_state())
        algo.add_policy("frozen", copy, policies_to_train=["p0", "p1"])  # a copy is the way
        filter_before, weights_before = copy.observation_filter.get_state(), copy.get_weights()
        algo.train()
        assert copy.observation_filter.count == filter_before["count"]
        assert _same(copy.get_weights(), weights_before)
    finally:
        algo.stop()


def _map_to_p0(agent_id, **kwargs):
    return "p0"


@pytest.mark.parametrize("change", ["add", "remove"])
def test_a_policy_change_the_env_runner_refuses_leaves_the_algorithm_as_before(change, monkeypatch):
    """An add or removal whose env runner update raises (after the new policy was built) leaves
    the algorithm exactly as an untouched twin: same policies in the algorithm, its config and
    its runner, and the next train() learns the same weights. On main the algorithm kept the
    new policy set and config while its runner kept the old ones."""
    from tests.fault_injection import InjectedError
    from tests.helpers import weights_digest

    algo, twin = small_ma_ppo(3).build(), small_ma_ppo(3).build()
    try:
        algo.train()
        twin.train()
        runner = algo.env_runner_group.local
        real = runner.update_policies
        calls = []

        def refuse_once(config, policies):
            calls.append(sorted(policies))
            if len(calls) == 1:
                raise InjectedError("the env runner refused the new policy set")
            real(config, policies)

        monkeypatch.setattr(runner, "update_policies", refuse_once)
        with pytest.raises(InjectedError):
            if change == "add":
                algo.add_policy("p3", algo.get_policy("p0").spec, policy_mapping_fn=_map_to_p0)
            else:
                algo.remove_policy("p2", policy_mapping_fn=_map_to_p0)
        assert set(algo.policies) == set(algo.config.policies) == set(runner.policies) == {"p0", "p1", "p2"}
        assert algo.env_runner_group.policies is algo.policies  # still shared, in place
        assert algo.config.to_dict() == twin.config.to_dict()
        assert set(algo.train()["learners"]) == set(twin.train()["learners"]) == {"p0", "p1", "p2"}
        assert weights_digest(algo) == weights_digest(twin)
    finally:
        algo.stop()
        twin.stop()


@pytest.mark.parametrize("make_config", [
    pytest.param(lambda: small_ma_ppo(2, normalize_rewards=True, model={"hidden": [16]}).env_runners(
        observation_filter="MeanStdFilter"), id="PPO", marks=pytest.mark.slow),
    pytest.param(small_ma_dqn, id="DQN"),
    pytest.param(small_ma_sac, id="SAC"),
    pytest.param(small_ma_td3, id="TD3"),
])
def test_a_policy_removed_and_added_again_starts_new(make_config, tmp_path):
    """What the algorithm keeps for a policy beside it (PPO's reward normaliser; the off-policy
    algorithms' replay buffer, held-back n-step rows and replay credit) goes with the policy:
    a new policy under a removed one's ID learns as in an algorithm restored from a checkpoint
    taken after the removal, which never saw the old one, and the state holds nothing of it.
    SAC and TD3 run it with n-step rows held back across fragments (n_step=2), TD3 also with a
    fractional replay credit (training_intensity); DQN with a 1-step buffer. Everything else
    SAC and TD3 keep per policy (alpha and its optimizer, target networks, the noise
    generator, TD3's delay counter ``num_grad_updates``) lives in the policy's own state,
    which a re-added policy brings new."""
    readd_after_removal_matches_restore(make_config(), str(tmp_path / "removed"))


@pytest.mark.parametrize("config_class, env", [
    (cairn.DQNConfig, "CartPole-v1"), (cairn.SACConfig, "Pendulum-v1"), (cairn.TD3Config, "Pendulum-v1"),
])
def test_an_off_policy_algorithm_refuses_to_build_with_a_policy_of_another_class(config_class, env):
    algo_name = config_class.algo_class_name
    config = config_class().environment(env).multi_agent(
        policies={"p": cairn.PolicySpec(cairn.Policy)}, policy_mapping_fn=lambda agent, *args, **kwargs: "p")
    with pytest.raises(TypeError, match=rf"{algo_name} trains {algo_name}Policy policies; 'p' is a Policy\. "
                                        rf"Add it with PolicySpec\({algo_name}Policy, \.\.\.\)"):
        config.build()
