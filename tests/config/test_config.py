import json
from pathlib import Path

import pytest

import cairn
from cairn.errors import ConfigError, MissingCallableError
from tests.helpers import map_by_index, small_ma_ppo


def test_fluent_methods_return_config():
    config = cairn.PPOConfig()
    for result in (
        config.environment("CartPole-v1"),
        config.env_runners(num_envs_per_env_runner=2),
        config.training(lr=1e-3, clip_param=0.1),
        config.evaluation(evaluation_interval=2),
        config.debugging(seed=3),
        config.checkpointing(export_native_model_files=False),
        config.resources(torch_num_threads=1),
    ):
        assert result is config
    assert config.lr == 1e-3 and config.clip_param == 0.1 and config.seed == 3


def test_to_dict_is_json_and_round_trips():
    config = small_ma_ppo(2).training(model={"hidden": [32]})
    data = config.to_dict()
    text = json.dumps(data, allow_nan=False)
    back = cairn.AlgorithmConfig.from_dict(json.loads(text))
    assert isinstance(back, cairn.PPOConfig)
    assert back.to_dict() == data
    assert back.policy_mapping_fn is map_by_index
    assert back.model["hidden"] == [32] and back.model["activation"] == "tanh"


def test_lambda_is_recorded_as_not_storable():
    config = small_ma_ppo(2).multi_agent(policy_mapping_fn=lambda agent_id, **kw: "p0")
    data = config.to_dict()
    assert data["policy_mapping_fn"]["__callable__"] is None
    with pytest.raises(MissingCallableError, match="policy_mapping_fn=..."):
        cairn.AlgorithmConfig.from_dict(data)
    fn = lambda agent_id, **kw: "p1"  # noqa: E731
    assert cairn.AlgorithmConfig.from_dict(data, callables={"policy_mapping_fn": fn}).policy_mapping_fn is fn


def test_copy_is_deep():
    config = cairn.PPOConfig().training(model={"hidden": [8]})
    clone = config.copy()
    clone.model["hidden"].append(9)
    assert config.model["hidden"] == [8]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.training(lr=-1.0), "'lr'=-1.0 is invalid"),
        (lambda c: c.training(gamma=1.5), "'gamma'"),
        (lambda c: c.training(minibatch_size=0), "'minibatch_size'"),
        (lambda c: c.training(lrr=0.1), "Did you mean 'lr'"),
        (lambda c: c.training(model={"hiden": [3]}), "Unknown model keys"),
        (lambda c: c.training(model={"activation": "gelu2"}), "activation"),
        (lambda c: c.env_runners(observation_filter="Mean"), "observation_filter"),
        (lambda c: c.env_runners(num_env_runners=-1), "num_env_runners"),
        (lambda c: c.multi_agent(policies={"../x"}), "policy ID"),
        (lambda c: c.multi_agent(policies={3}), "must be str"),
        (lambda c: c.multi_agent(policy_mapping_fn=42), "policy_mapping_fn"),
        (lambda c: c.multi_agent(policy_mapping_fn=lambda: "p"), "agent_id, \\*\\*kwargs"),
        # Passed, then failed at build() in numpy: "expected non-negative integer".
        (lambda c: c.debugging(seed=-1), "'seed'=-1 is invalid: expected an int >= 0 or None"),
    ],
)
def test_bad_values_raise_config_error_naming_them(call, message):
    with pytest.raises(ConfigError, match=message):
        call(cairn.PPOConfig().environment("CartPole-v1"))


def test_from_dict_rejects_unknown_keys():
    data = cairn.PPOConfig().environment("CartPole-v1").to_dict()
    data["learning_rate"] = 0.1
    with pytest.raises(ConfigError, match="'learning_rate'"):
        cairn.AlgorithmConfig.from_dict(data)
    data = cairn.PPOConfig().environment("CartPole-v1").to_dict()
    data["lr"] = "fast"
    with pytest.raises(ConfigError, match="'lr'='fast'"):
        cairn.AlgorithmConfig.from_dict(data)


def test_validate_catches_new_user_mistakes():
    with pytest.raises(ConfigError, match="Unknown environment 'CartPol-v1'.*Did you mean.*CartPole") as info:
        cairn.PPOConfig().environment("CartPol-v1").validate()
    assert str(info.value).count("Did you mean") == 1  # Gymnasium's suggestion, not ours as well
    with pytest.raises(ConfigError, match="Unknown environment 'CartPole-v9'.*Did you mean 'CartPole-v1'"):
        cairn.PPOConfig().environment("CartPole-v9").validate()
    with pytest.raises(ConfigError, match="minibatch_size"):
        (cairn.PPOConfig().environment("CartPole-v1")
         .training(train_batch_size=64, minibatch_size=128).validate())
    with pytest.raises(ConfigError, match="No environment"):
        cairn.PPOConfig().validate()
    with pytest.raises(ConfigError, match="no policy_mapping_fn"):
        cairn.PPOConfig().environment("CartPole-v1").multi_agent(policies={"a", "b"}).validate()
    with pytest.raises(ConfigError, match="policies_to_train names 'c'"):
        small_ma_ppo(2).multi_agent(policies_to_train=["c"]).validate()


def test_build_catches_mapping_and_space_mistakes():
    with pytest.raises(ConfigError, match="maps agent 'agent_1' to 'nope'"):
        small_ma_ppo(2).multi_agent(
            policy_mapping_fn=lambda aid, **kw: "p0" if aid == "agent_0" else "nope").build()
    import gymnasium as gym

    spec = cairn.PolicySpec(observation_space=gym.spaces.Box(-1, 1, (3,)))
    with pytest.raises(ConfigError, match="observation space"):
        small_ma_ppo(2).multi_agent(policies={"p0": spec, "p1": None}).build()
    with pytest.raises(ConfigError, match="no agents mapped"):
        small_ma_ppo(2).multi_agent(policies={"p0", "p1", "p2"}).build()


def test_empty_policies_are_refused_with_the_fix():
    # Found by the checkpoint fuzzer: a stored config whose policies were emptied reached
    # map_agent() and escaped as a bare StopIteration.
    with pytest.raises(ConfigError, match="policies is empty; configure at least one"):
        cairn.PPOConfig().environment("CartPole-v1").multi_agent(policies={})
    config = cairn.PPOConfig().environment("CartPole-v1")
    config.policies = {}
    with pytest.raises(ConfigError, match="policies is empty"):
        config.validate()


def test_sb3_names_suggest_cairns():
    """Issue 25, item 12: SB3 users type learning_starts and got the allowed list alone."""
    with pytest.raises(ConfigError, match="Did you mean 'num_steps_sampled_before_learning_starts' "
                                          r"\(cairn's name for 'learning_starts'\)"):
        cairn.DQNConfig().training(learning_starts=100)
    with pytest.raises(ConfigError, match="Did you mean 'lr'"):
        cairn.AlgorithmConfig.from_dict({**cairn.SACConfig().to_dict(), "learning_rate": 1e-3})
    with pytest.raises(ConfigError) as info:  # PPO has no such setting: no suggestion
        cairn.PPOConfig().training(learning_starts=100)
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize(("make", "message"), [
    # torch starts that many threads twice over (intra- and inter-op): 3000 started 6,000.
    (lambda: cairn.PPOConfig().resources(torch_num_threads=3000), "'torch_num_threads'=3000 .*1,024"),
    # 5e8 rows failed at the first add with numpy's MemoryError, far from the setting.
    (lambda: cairn.DQNConfig().training(replay_buffer_config={"capacity": 500_000_000}),
     "'replay_buffer_config.capacity'=500000000 .*100,000,000"),
    (lambda: cairn.SACConfig().training(replay_buffer_config={"capacity": 10**9}), "capacity"),
])
def test_settings_no_machine_honours_are_refused_with_their_bound(make, message):
    with pytest.raises(ConfigError, match=message):
        make().environment("CartPole-v1").validate()


def test_settings_at_their_bounds_are_accepted():
    cairn.PPOConfig().environment("CartPole-v1").resources(torch_num_threads=1024).validate()
    cairn.DQNConfig().environment("CartPole-v1").training(
        replay_buffer_config={"capacity": 100_000_000}).validate()


def test_max_num_repeated_env_runner_failures_is_checked_round_trips_and_defaults_when_absent():
    """The setting that ends a remote runner's loop on a deterministic error (docs/ray.md):
    at least 1, kept by to_dict/from_dict, and 3 for a config saved before it existed (the
    frozen fixtures' configs have no such key)."""
    for bad in (0, -1, 2.5, True, "3", None):
        with pytest.raises(ConfigError, match=f"'max_num_repeated_env_runner_failures'={bad!r} is invalid"):
            cairn.PPOConfig().fault_tolerance(max_num_repeated_env_runner_failures=bad)
    config = cairn.PPOConfig().environment("CartPole-v1")
    config = config.fault_tolerance(max_num_repeated_env_runner_failures=5)
    data = json.loads(json.dumps(config.to_dict()))
    assert data["max_num_repeated_env_runner_failures"] == 5
    assert cairn.AlgorithmConfig.from_dict(data).max_num_repeated_env_runner_failures == 5
    data["max_num_repeated_env_runner_failures"] = 0
    with pytest.raises(ConfigError, match="'max_num_repeated_env_runner_failures'=0 is invalid"):
        cairn.AlgorithmConfig.from_dict(data)
    fixture = Path(__file__).parents[1] / "fixtures/checkpoints/1/ppo_single/algorithm_state.json"
    old = json.loads(fixture.read_text())["config"]
    assert "max_num_repeated_env_runner_failures" not in old
    assert cairn.AlgorithmConfig.from_dict(old).max_num_repeated_env_runner_failures == 3


def test_multi_agent_keeps_copies_of_the_dicts_it_is_given():
    """multi_agent() kept the caller's mapping dict and PolicySpecs themselves: a mapping edited to
    build a second config changed the first one's agents with no error (every other section
    keeps a copy)."""
    mapping = {"agent_0": "p0", "agent_1": "p1"}
    policies = {"p0": cairn.PolicySpec(config={"lr": 0.1}), "p1": cairn.PolicySpec()}
    first = cairn.PPOConfig().environment("CartPole-v1").multi_agent(policies=policies,
                                                                     policy_mapping_fn=mapping)
    mapping["agent_1"] = "p0"
    policies["p0"].config["lr"] = 0.5
    second = cairn.PPOConfig().environment("CartPole-v1").multi_agent(policies=policies,
                                                                      policy_mapping_fn=mapping)
    assert first.map_agent("agent_1") == "p1" and first.policy_config("p0")["lr"] == 0.1
    assert second.map_agent("agent_1") == "p0" and second.policy_config("p0")["lr"] == 0.5


def test_policies_to_train_as_a_string_is_refused_by_from_dict():
    """multi_agent() refuses policies_to_train="ab", but from_dict (a YAML file, --config
    policies_to_train=ab) took it and iterated its letters: policies "a" and "b" learned and the
    user's intent (one policy, or a typo) was lost with no error."""
    data = (cairn.PPOConfig().environment("CartPole-v1")
            .multi_agent(policies={"a", "b", "c"}, policy_mapping_fn={"agent_0": "a"}).to_dict())
    data["policies_to_train"] = "ab"
    with pytest.raises(ConfigError, match="policies_to_train must be a list of policy IDs or None, got 'ab'"):
        cairn.AlgorithmConfig.from_dict(data).validate()
    data["policies_to_train"] = ["a", "b"]
    assert cairn.AlgorithmConfig.from_dict(data).policies_to_train == ["a", "b"]


@pytest.mark.parametrize("call", [
    lambda c: c.training(lr=0.1, gamma=2.0),
    lambda c: c.training(model={"hidden": [8]}, lr=-1.0),
    lambda c: c.training(lr=0.1, model={"activation": "gelu2"}),
    lambda c: c.env_runners(num_env_runners=2, observation_filter="x"),
    lambda c: c.callbacks("a:b:c"),
])
def test_a_fluent_call_with_a_bad_value_changes_nothing(call):
    """training(lr=0.1, gamma=2.0) raised for gamma but had set lr (and a model given with a bad
    lr stayed set): a caller that caught the error went on with half of the call applied."""
    config = cairn.PPOConfig().environment("CartPole-v1").callbacks("package.module:Callbacks")
    before = config.to_dict()
    with pytest.raises(cairn.errors.CairnError):
        call(config)
    assert config.to_dict() == before
    assert config.training(lr=0.1).lr == 0.1  # the next call works


@pytest.mark.parametrize("mapping, message", [
    ({0: "p0", "0": "p1"}, "has the agent IDs 0 and '0', which a checkpoint stores as the one key '0'"),
    ({("team", 1): "p0"}, r"has the agent ID \('team', 1\) \(tuple\)"),
    ({True: "p0"}, r"has the agent ID True \(bool\)"),
])
def test_a_mapping_dict_whose_keys_a_checkpoint_cannot_keep_is_refused(mapping, message):
    """{0: "p0", "0": "p1"} was stored as {"0": "p1"}: after a restore agent 0 acted with p1, no
    error. A tuple key failed the save (after training) with TypeError; a bool key was stored
    as "true" and no longer found."""
    config = cairn.PPOConfig().environment("CartPole-v1")
    with pytest.raises(ConfigError, match=message):
        config.multi_agent(policies={"p0", "p1"}, policy_mapping_fn=mapping)
    assert config.policy_mapping_fn is None
    # int keys survive: looked up again by str(agent_id) after the JSON round trip.
    config.multi_agent(policies={"p0", "p1"}, policy_mapping_fn={0: "p0", 1: "p1"})
    back = cairn.AlgorithmConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert [back.map_agent(0), back.map_agent(1)] == ["p0", "p1"]


def test_a_mapping_dict_with_int_agent_ids_is_saved_and_restored(tmp_path):
    """The int keys a mapping dict may have (above) are stored as the JSON strings map_agent
    looks up after a restore (docs/multi-agent.md); the checkpoint writer, which takes only str
    keys, refused them: such a run trained and failed at its first save."""
    algo = small_ma_ppo().multi_agent(policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", 7: "p1"}).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        assert algo.config.to_dict()["policy_mapping_fn"] == {"agent_0": "p0", "agent_1": "p1", "7": "p1"}
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        assert [restored.config.map_agent(a) for a in ("agent_0", "agent_1", 7)] == ["p0", "p1", "p1"]
        restored.train()
    finally:
        restored.stop()


def test_copy_and_build_share_callable_objects():
    """copy() promised to share callables, but deep-copied callable objects: build() copies its
    config, so the algorithm mapped agents with a copy of a stateful mapping object and the
    user's later changes to it had no effect, with no error."""
    class Mapper:
        def __init__(self):
            self.target = "p0"

        def __call__(self, agent_id, **kwargs):
            return self.target

    import gymnasium as gym

    mapper, env = Mapper(), gym.make("CartPole-v1")
    spec = cairn.PolicySpec(observation_space=env.observation_space, action_space=env.action_space)
    config = (cairn.PPOConfig().environment("CartPole-v1")
              .training(train_batch_size=32, minibatch_size=16, num_epochs=1, model={"hidden": [8]})
              .multi_agent(policies={"p0": spec, "p1": spec}, policy_mapping_fn=mapper))
    clone = config.copy()
    assert clone.policy_mapping_fn is mapper and clone.policies is not config.policies
    algo = config.build()
    try:
        mapper.target = "p1"
        assert algo.config.map_agent("default_agent") == "p1"
    finally:
        algo.stop()


def test_numpy_scalars_are_taken_as_the_python_numbers_they_hold():
    """np.int64(64) (np.arange, a grid of settings) was refused as "'train_batch_size'=np.int64(64)
    is invalid: expected an int >= 1", a value in range; np.float32 for lr likewise."""
    import numpy as np

    config = cairn.PPOConfig().environment("CartPole-v1").training(
        train_batch_size=np.int64(64), lr=np.float32(0.5), normalize_advantages=np.bool_(False))
    config.debugging(seed=np.int64(3))
    keys = ("train_batch_size", "lr", "normalize_advantages", "seed")
    assert [getattr(config, k) for k in keys] == [64, 0.5, False, 3]
    assert [type(getattr(config, k)) for k in keys] == [int, float, bool, int]
    assert json.loads(json.dumps(config.to_dict()))["train_batch_size"] == 64
    with pytest.raises(ConfigError, match="'train_batch_size'=64.0 is invalid: expected an int"):
        config.training(train_batch_size=np.float64(64))


@pytest.mark.parametrize(("make", "wanted", "not_wanted"), [
    # SB3's value clip is PPO's vf_clip_param; its spelling is closest to clip_param, the policy's
    # surrogate clip, which a user following the hint would have set instead, silently.
    (lambda: cairn.PPOConfig().training(clip_range_vf=0.2),
     "Did you mean 'vf_clip_param' (cairn's name for 'clip_range_vf')?", "'clip_param'?"),
    (lambda: cairn.PPOConfig().training(num_sgd_iter=4),
     "Did you mean 'num_epochs' (cairn's name for 'num_sgd_iter')?", None),
    # RLlib's KL penalty weight is not a value-loss weight.
    (lambda: cairn.PPOConfig().training(kl_coeff=0.2), "no KL penalty", "'vf_coeff'?"),
    (lambda: cairn.IMPALAConfig().training(kl_coeff=0.2), "no KL penalty", "'vf_loss_coeff'?"),
    # APPO clips no value prediction: neither name is its surrogate clip.
    (lambda: cairn.APPOConfig().training(vf_clip_param=10.0), "value clipping", "'clip_param'?"),
    (lambda: cairn.APPOConfig().training(clip_range_vf=0.2), "Unknown training() setting", "'clip_param'?"),
])
def test_other_libraries_names_never_suggest_a_setting_of_another_meaning(make, wanted, not_wanted):
    with pytest.raises(ConfigError) as info:
        make()
    assert wanted in str(info.value)
    if not_wanted is not None:
        assert not_wanted not in str(info.value)
