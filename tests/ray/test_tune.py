"""cairn.tune.trainable: a Tune grid whose checkpoints are cairn checkpoints."""

import os

import pytest

import cairn
import cairn.tune
from cairn.errors import ConfigError
from cairn.tune import apply_param_space
from tests.helpers import small_ma_ppo, small_ppo
from tests.ray.envs import make_flaky_cartpole

pytestmark = pytest.mark.ray


def test_param_space_keys_set_config_fields_by_name_and_dotted_path():
    config = small_ppo()
    tuned = apply_param_space(config, {"lr": 1e-3, "model.hidden": [16], "num_env_runners": 1})
    assert (tuned.lr, tuned.model["hidden"], tuned.num_env_runners) == (1e-3, [16], 1)
    assert tuned.model["activation"] == config.model["activation"]  # the rest of the dict stays
    assert config.lr == 3e-4  # the given config is not changed
    with pytest.raises(ConfigError, match=r"'lrr' names no config field.*Did you mean 'lr'"):
        apply_param_space(config, {"lrr": 1e-3})
    with pytest.raises(ConfigError, match=r"'lr.x' goes into 'lr'"):
        apply_param_space(config, {"lr.x": 1e-3})
    with pytest.raises(ConfigError, match=r"'gamma'=2"):
        apply_param_space(config, {"gamma": 2})


def test_a_nested_param_space_dict_merges_into_model_as_training_does():
    # Tune resolves {"model": {"hidden": tune.grid_search(...)}} into the trial config
    # {"model": {"hidden": [16]}}: the base config's other model keys must stay, as
    # config.training(model=...) and from_checkpoint's config_overrides keep them.
    config = small_ppo(model={"activation": "relu", "hidden": [8, 8]})
    tuned = apply_param_space(config, {"model": {"hidden": [16]}})
    assert tuned.model == {**config.model, "hidden": [16]}
    assert tuned.model["activation"] == "relu"
    assert tuned.policy_config("default_policy")["model"]["activation"] == "relu"
    assert config.model["hidden"] == [8, 8]  # the given config is not changed
    # The same trial config, whichever form Tune's param_space had.
    assert apply_param_space(config, {"model.hidden": [16]}).model == tuned.model
    with pytest.raises(ConfigError, match=r"model"):
        apply_param_space(config, {"model": {"activation": "nope"}})


def test_a_nested_dict_inside_model_in_param_space_replaces_the_configs_whole():
    """{"model": {"custom_model_config": {"heads": 4}}} gave the trial {"width": 32, "heads": 4}
    (a recursive merge) where config.training(model=...) and RLlib give {"heads": 4}; a dotted
    key sets that one key, so "model.custom_model_config.heads" keeps the width."""
    from tests.models.nets import TwoHeads

    config = small_ppo(model={"custom_model": TwoHeads, "custom_model_config": {"width": 32}})
    given = {"custom_model_config": {"heads": 4}}
    assert apply_param_space(config, {"model": given}).model == config.copy().training(model=given).model
    assert apply_param_space(config, {"model": given}).model["custom_model_config"] == {"heads": 4}
    assert apply_param_space(config, {"model.custom_model_config": {"heads": 4}}).model == \
        apply_param_space(config, {"model": given}).model
    dotted = apply_param_space(config, {"model.custom_model_config.heads": 4})
    assert dotted.model["custom_model_config"] == {"width": 32, "heads": 4}
    assert dotted.model["custom_model"] == config.model["custom_model"]
    env = config.copy().environment("CartPole-v1", env_config={"size": 5, "opts": {"a": 1}})
    nested = apply_param_space(env, {"env_config": {"opts": {"b": 2}}})
    assert nested.env_config == {"size": 5, "opts": {"b": 2}}
    dotted_env = apply_param_space(env, {"env_config.opts.b": 2})
    assert dotted_env.env_config == {"size": 5, "opts": {"a": 1, "b": 2}}
    assert config.model["custom_model_config"] == {"width": 32}  # the given config is not changed


def test_a_nested_param_space_dict_sets_only_its_keys_of_env_config():
    # {"env_config": {"difficulty": tune.grid_search([1, 2])}} varies one key: the base
    # env_config's others (its size) must reach the trial's env, as with "env_config.difficulty".
    config = small_ppo().environment("CartPole-v1", env_config={"size": 5, "difficulty": 0})
    tuned = apply_param_space(config, {"env_config": {"difficulty": 2}})
    assert tuned.env_config == {"size": 5, "difficulty": 2}
    assert tuned.env_config == apply_param_space(config, {"env_config.difficulty": 2}).env_config
    assert config.env_config == {"size": 5, "difficulty": 0}  # the given config is not changed
    # policies names the whole set of policies: a dict there still replaces it.
    two = apply_param_space(config, {"policies": {"a": cairn.PolicySpec(), "b": cairn.PolicySpec()}})
    assert sorted(two.policies) == ["a", "b"]


def test_a_model_class_in_param_space_is_stored_by_reference_in_either_form():
    # config.training(model={"custom_model": TwoHeads}) stores the class's reference; a
    # dotted param_space key held the class itself, so the trial's save_checkpoint failed.
    from tests.models.nets import TwoHeads

    for params in ({"model.custom_model": TwoHeads}, {"model": {"custom_model": TwoHeads}}):
        tuned = apply_param_space(small_ppo(), {**params, "model.custom_model_config": {"width": 8}})
        assert tuned.model["custom_model"] == "tests.models.nets:TwoHeads", params
        assert tuned.to_dict()["model"] == tuned.model  # JSON-safe, as a checkpoint stores it


def test_a_callbacks_class_in_param_space_is_stored_by_reference():
    # As config.callbacks(cls) and from_checkpoint's config_overrides take it: a grid over
    # callbacks classes needs no reference strings.
    from tests.callbacks.hooks import CountingCallbacks

    tuned = apply_param_space(small_ppo(), {"callbacks_class": CountingCallbacks})
    assert tuned.callbacks_class == small_ppo().callbacks(CountingCallbacks).callbacks_class
    assert tuned.callbacks_class == "tests.callbacks.hooks:CountingCallbacks"
    with pytest.raises(ConfigError, match="subclass of cairn.Callbacks"):
        apply_param_space(small_ppo(), {"callbacks_class": dict})


def test_multi_agent_param_space_keys_are_normalised_as_multi_agent_does():
    # A str for policies_to_train was kept and read letter by letter at build ("names 'p'").
    config = small_ma_ppo(2)
    with pytest.raises(ConfigError, match=r"policies_to_train must be a list of policy IDs.*got 'p0'"):
        apply_param_space(config, {"policies_to_train": "p0"})
    assert apply_param_space(config, {"policies_to_train": {"p1", "p0"}}).policies_to_train == ["p0", "p1"]
    for policies in (["p0", "p1"], {"p1", "p0"}):
        assert (apply_param_space(config, {"policies": policies}).policies
                == config.copy().multi_agent(policies=policies).policies)


def test_a_trial_reserves_its_env_runners_and_learners():
    # Tune's placement group holds every actor a trial starts: the driver, one CPU per env
    # runner, and each DDP learner's CPUs and GPUs (a learner that cannot be placed would wait).
    trainable = cairn.tune.trainable(small_ppo().env_runners(num_env_runners=1))
    bundles = trainable.default_resource_request({"num_learners": 2, "num_cpus_per_learner": 2}).bundles
    assert bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 2.0}, {"CPU": 2.0}]
    gpu_driver = trainable.default_resource_request({"num_gpus_per_learner": 1}).bundles
    assert gpu_driver == [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0}]


def test_a_tune_grid_keeps_checkpoints_and_its_best_restores_with_the_trial_lr(ray_cluster, tmp_path):
    from ray import tune

    tuner = tune.Tuner(
        cairn.tune.trainable(small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1)),
        param_space={"lr": tune.grid_search([1e-3, 1e-4])},
        tune_config=tune.TuneConfig(metric="episode_return_mean", mode="max"),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), name="grid", stop={"training_iteration": 2}, verbose=0,
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=1, checkpoint_frequency=1, checkpoint_score_attribute="training_iteration")),
    )
    grid = tuner.fit()
    assert len(grid) == 2 and not grid.errors
    for result in grid:
        assert result.metrics["training_iteration"] == 2
        assert len(result.best_checkpoints) == 1  # num_to_keep=1 of the two written
        kept = [d for d in os.listdir(result.path) if d.startswith("checkpoint_")]
        assert len(kept) == 1, kept
    best = grid.get_best_result()
    algo = cairn.Algorithm.from_checkpoint(best.checkpoint)
    try:
        assert algo.config.lr == best.config["lr"]
        assert algo.iteration == 2
        assert algo.train()["training_iteration"] == 3
    finally:
        algo.stop()


def test_tuner_restore_resumes_an_interrupted_experiment_from_its_cairn_checkpoint(ray_cluster, tmp_path):
    from ray import tune

    marker = tmp_path / "failed"
    # The env raises once, in the second iteration (after the first checkpoint).
    config = small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).environment(
        make_flaky_cartpole, env_config={"fail_marker": str(marker), "fail_after_steps": 100})
    trainable = cairn.tune.trainable(config)
    run_config = tune.RunConfig(
        storage_path=str(tmp_path), name="resume", stop={"training_iteration": 3}, verbose=0,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1))
    first = tune.Tuner(trainable, run_config=run_config).fit()
    assert marker.exists() and first.errors and first[0].metrics["training_iteration"] == 1

    grid = tune.Tuner.restore(str(tmp_path / "resume"), trainable, resume_errored=True).fit()
    assert not grid.errors
    result = grid[0]
    assert result.metrics["training_iteration"] == 3
    algo = cairn.Algorithm.from_checkpoint(result.checkpoint)
    try:
        # Restored from the iteration-1 checkpoint: 3 iterations of 64 steps in all, not 4.
        assert algo.iteration == 3 and algo.counters["num_env_steps_sampled_lifetime"] == 192
    finally:
        algo.stop()
