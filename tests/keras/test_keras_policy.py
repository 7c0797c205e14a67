"""Keras policies: built from the model config, trained by torch, checkpointed with model.keras."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ConfigError, FrameworkUnavailableError
from tests.conftest import ROOT
from tests.helpers import assert_trains_identically, small_ppo, weights_digest
from tests.keras.plain_keras import plain_keras_outputs

KERAS = {"model": {"framework": "keras"}}
OBS = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


def test_a_keras_policy_starts_from_the_torch_policys_weights_and_computes_the_same():
    space, actions = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)
    keras_policy = cairn.Policy(space, actions, KERAS, seed=3)
    torch_policy = cairn.Policy(space, actions, seed=3)
    x = torch.from_numpy(OBS)
    with torch.no_grad():
        np.testing.assert_allclose(keras_policy.model.action_inputs(x), torch_policy.model.action_inputs(x),
                                   atol=1e-6)
        np.testing.assert_allclose(keras_policy.model.value(x), torch_policy.model.value(x), atol=1e-6)
        # the per-layer path cairn trains with is the Keras model's own output
        inputs, value = keras_policy.model.network(x)
        np.testing.assert_allclose(inputs, keras_policy.model.action_inputs(x), atol=1e-6)
        np.testing.assert_allclose(value[:, 0], keras_policy.model.value(x), atol=1e-6)
    np.testing.assert_allclose(keras_policy.compute_action_inputs(OBS),
                               torch_policy.compute_action_inputs(OBS), atol=1e-6)


def test_keras_variables_are_the_parameters_torch_trains():
    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), KERAS, seed=0)
    network = policy.model.network
    params = dict(policy.model.named_parameters())
    assert {id(v.value) for v in network.trainable_variables} == {id(p) for p in params.values()}
    before = {v.path: v.numpy().copy() for v in network.trainable_variables}
    inputs, value = policy.model(torch.from_numpy(OBS))
    (inputs.sum() + value.sum()).backward()
    policy.optimizer.step()
    changed = [v.path for v in network.trainable_variables if not np.array_equal(v.numpy(), before[v.path])]
    # every layer moves except the log-std layer's kernel, which only ever multiplies zeros
    assert sorted(changed) == sorted(p for p in before if p != "log_std/kernel")


def test_ppo_with_a_keras_policy_resumes_bit_identically_in_a_new_process(tmp_path):
    algo = small_ppo().framework("keras").build()
    assert type(algo.get_policy().model).__name__ == "KerasActorCritic"
    for _ in range(2):
        algo.train()
    path = Path(algo.save(tmp_path / "c"))
    for _ in range(2):
        algo.train()
    expected = f"{weights_digest(algo)} {algo.counters['num_env_steps_sampled_lifetime']}"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "import cairn\nfrom tests.helpers import weights_digest\n"
              f"algo = cairn.Algorithm.from_checkpoint({str(path)!r})\nfor _ in range(2):\n    algo.train()\n"
              "print(weights_digest(algo), algo.counters['num_env_steps_sampled_lifetime'])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == expected
    info = cairn.get_checkpoint_info(f"{path}/policies/default_policy")
    assert info["native_model"] == {"status": "ok", "formats": ["keras"], "opset": None}
    manifest = json.loads((path / "policies/default_policy/cairn_checkpoint.json").read_text())
    assert {"model/model.keras", "model/signature.json"} <= set(manifest["files"])


def test_model_keras_loads_with_plain_keras_in_a_fresh_process_and_gives_the_policys_actions(tmp_path):
    algo = small_ppo().framework("keras").env_runners(observation_filter="MeanStdFilter").build()
    algo.train()
    policy = algo.get_policy()
    path = Path(algo.save(tmp_path / "c")) / "policies/default_policy/model/model.keras"
    [(action, logits)] = plain_keras_outputs([path], OBS * 3, tmp_path)
    assert action.tolist() == policy.compute_actions(OBS * 3, explore=False).tolist()
    expected = policy.compute_action_inputs(policy.process_observations(OBS * 3, update=False))
    np.testing.assert_allclose(logits, expected, atol=1e-5)


def test_a_users_keras_model_by_import_path_trains_and_restores(tmp_path):
    model = {"framework": "keras", "keras_model": "tests.keras.builders:small_actor_critic"}
    algo = small_ppo(model=model).build()
    algo.train()
    policy = algo.get_policy()
    assert policy.model.mlp_layers is None
    restored = cairn.Policy.from_checkpoint(Path(algo.save(tmp_path / "c")) / "policies/default_policy")
    np.testing.assert_array_equal(restored.compute_action_inputs(OBS), policy.compute_action_inputs(OBS))
    assert (restored.get_state()["optimizer"]["state"].keys()
            == policy.get_state()["optimizer"]["state"].keys())


def test_a_users_keras_dropout_and_batchnorm_learn_in_training_mode_and_act_in_eval_mode(tmp_path):
    """Keras layers read their ``training`` argument, not torch's mode: before, a user's Keras
    model was called without it, so its Dropout never dropped and its BatchNormalization never
    normalised by the batch nor moved its statistics while learning, with no error. Acting (eval
    mode) stays deterministic and moves nothing; the restored policy acts as the trained one."""
    model = {"framework": "keras", "keras_model": "tests.keras.builders:noisy_actor_critic"}
    algo = small_ppo(model=model, num_epochs=1).build()
    try:
        policy = algo.get_policy()
        bn = policy.model.network.get_layer("bn")
        moving = np.array(bn.moving_mean.numpy())
        first = policy.compute_action_inputs(OBS)
        np.testing.assert_array_equal(policy.compute_action_inputs(OBS), first)
        np.testing.assert_array_equal(np.array(bn.moving_mean.numpy()), moving)  # acting moved nothing
        assert policy.switches_modes and not policy.model.training
        algo.train()
        assert not np.array_equal(np.array(bn.moving_mean.numpy()), moving)  # learning did
        assert not policy.model.training  # back at rest
        policy.model.train(True)
        with torch.no_grad():  # in training mode the Dropout drops: two calls differ
            x = torch.from_numpy(OBS)
            assert not torch.equal(policy.model(x)[0], policy.model(x)[0])
        policy.model.train(False)
        restored = cairn.Policy.from_checkpoint(Path(algo.save(tmp_path / "c")) / "policies/default_policy")
        np.testing.assert_array_equal(restored.compute_action_inputs(OBS), policy.compute_action_inputs(OBS))
    finally:
        algo.stop()


def test_a_users_unseeded_keras_model_starts_and_trains_alike_under_the_same_seed(tmp_path):
    """Keras seeds unseeded initializers and random layers (GaussianNoise) from Python's
    ``random`` when they are built: before, two runs with ``debugging(seed=0)`` started from
    other weights and drew other noise, with no error, where a torch model of the user's starts
    alike (cairn seeds torch around its constructor). The builder now runs with Python's
    ``random`` seeded from the policy's generator and handed back as it was. A restored run
    goes on as the uninterrupted one (the noise layer's generator state is a saved variable;
    the unseeded Dropout draws from torch's generator, seeded per learn call)."""
    import random

    model = {"framework": "keras", "keras_model": "tests.keras.builders:unseeded_noisy_actor_critic"}
    digests = []
    for draws in (0, 3):
        for _ in range(draws):  # whatever the process drew before
            random.random()
        algo = small_ppo(model=model, num_epochs=1).build()
        try:
            start = weights_digest(algo)
            algo.train()
            digests.append((start, weights_digest(algo)))
            if draws:
                restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
                try:
                    assert_trains_identically(algo, restored, iterations=1)
                finally:
                    restored.stop()
        finally:
            algo.stop()
    assert digests[0] == digests[1]
    space, actions = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    state = random.getstate()
    other = cairn.Policy(space, actions, {"model": model}, seed=1)
    assert random.getstate() == state  # the caller's stream is handed back
    first = cairn.Policy(space, actions, {"model": model}, seed=0).get_weights()
    assert not all(np.array_equal(first[k], v) for k, v in other.get_weights().items())  # another seed
    q_model = {"framework": "keras", "keras_model": "tests.keras.builders:unseeded_q_network"}
    from cairn.algorithms.dqn.dqn_policy import DQNPolicy

    q_weights = [DQNPolicy(space, actions, {"model": q_model}, seed=0).get_weights() for _ in range(2)]
    assert all(np.array_equal(q_weights[0][k], v) for k, v in q_weights[1].items())


@pytest.mark.parametrize("model, match", [
    ({"framework": "tensorflow"}, "model.framework"),
    ({"keras_model": "tests.keras.builders:small_actor_critic"}, "needs model.framework='keras'"),
    ({"framework": "keras", "keras_model": "not a path"}, "import path"),
])
def test_framework_settings_are_checked_before_building(model, match):
    with pytest.raises(ConfigError, match=match):
        small_ppo(model=model).validate()


def test_a_builder_returning_no_keras_model_is_refused():
    with pytest.raises(ConfigError, match="keras.Model with two outputs"):
        small_ppo(model={"framework": "keras", "keras_model": "tests.keras.builders:not_a_model"}).build()


_OTHER_BACKEND = """
import sys
sys.path.insert(0, {root!r})
import cairn
from cairn.errors import FrameworkUnavailableError
{setup}
try:
    cairn.PPOConfig().environment("CartPole-v1").framework("keras").build()
except FrameworkUnavailableError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("setup, match", [
    ("import os; os.environ['KERAS_BACKEND'] = 'jax'", "KERAS_BACKEND='jax' is set"),
    ("sys.modules['keras'] = None  # as if not installed", "Keras is not installed"),
])
def test_keras_missing_or_on_another_backend_is_a_clear_error(setup, match):
    out = subprocess.run([sys.executable, "-c", _OTHER_BACKEND.format(root=str(ROOT), setup=setup)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "refused:" in out and match in out
    assert issubclass(FrameworkUnavailableError, ImportError)


_COLD = """
import sys
sys.path.insert(0, {root!r})
import cairn
policy = cairn.Policy.from_checkpoint({path!r})
policy.compute_single_action([0.0, 0.1, 0.0, -0.1])
print("keras" in sys.modules)
"""


def test_import_cairn_and_restoring_a_torch_policy_do_not_import_keras(tmp_path):
    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    policy.export_checkpoint(tmp_path / "p")
    out = subprocess.run([sys.executable, "-c", _COLD.format(root=str(ROOT), path=str(tmp_path / "p"))],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "False"


def test_copies_of_keras_networks_compute_with_their_own_parameters():
    import copy

    from cairn.algorithms.dqn.dqn_policy import DQNPolicy

    space, actions = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)
    for policy in (cairn.Policy(space, actions, KERAS, seed=0), DQNPolicy(space, actions, KERAS, seed=0)):
        for network in (copy.deepcopy(policy.model), getattr(policy, "target_model", None)):
            if network is None:
                continue
            own = {id(p) for p in network.parameters()}
            assert {id(v.value) for v in network.network.variables} == own
            with torch.no_grad():
                for p in network.parameters():
                    p.add_(1.0)
            assert not np.allclose(network(torch.from_numpy(OBS))[0].detach(),
                                   policy.model(torch.from_numpy(OBS))[0].detach())


def test_a_keras_save_prints_nothing_of_tensorflows_start_up(tmp_path):
    """Issue 25, item 12: TensorFlow's absl/oneDNN/cpu_feature_guard lines printed on the first
    Keras save of every process (Keras' saving code imports TensorFlow when it is installed)."""
    script = (
        "import sys, cairn\n"
        "algo = cairn.PPOConfig().environment('CartPole-v1').framework('keras')"
        ".training(train_batch_size=64, minibatch_size=32, num_epochs=1).build()\n"
        "algo.train()\n"
        "print('before save', file=sys.stderr, flush=True)\n"
        f"algo.save({str(tmp_path / 'c')!r})\n"
        "print('after save', file=sys.stderr, flush=True)\n"
        "assert 'tensorflow' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[lines.index("before save") + 1:] == ["after save"], proc.stderr


def test_a_users_keras_model_with_wrong_output_shapes_is_refused_at_build():
    """Its logits are wider than CartPole's two actions: before, it sampled actions 2 and 3."""
    model = {"framework": "keras", "keras_model": "tests.keras.builders:wide_actor_critic"}
    with pytest.raises(ConfigError, match=r"model.keras_model='tests.keras.builders:wide_actor_critic'"
                                          r" returned action_inputs of shape \[5, 4\], expected \[5, 2\]"):
        small_ppo(model=model).build()
    # before: torch's RuntimeError "shape '[5]' is invalid for input of size 10"
    model = {"framework": "keras", "keras_model": "tests.keras.builders:wide_value_actor_critic"}
    with pytest.raises(ConfigError, match=r"wide_value_actor_critic' returned value of shape \[5, 2\], "
                                          r"expected \[5\]"):
        small_ppo(model=model).build()
    with pytest.raises(ConfigError,
                       match=r"wide_q_network' returned q_values of shape \[5, 3\], expected \[5, 2\]"):
        cairn.DQNConfig().environment("CartPole-v1").training(
            model={"framework": "keras", "keras_model": "tests.keras.builders:wide_q_network"}).build()


@pytest.mark.parametrize("builder, match", [
    # before: Keras cast the float observations to int32 (0.7 -> 0) and the policy acted on that
    ("int_input_actor_critic", r"input has dtype 'int32'; cairn feeds float32 observations"),
    ("two_input_actor_critic",
     r"a model of 2 inputs \[\(None, 2\), \(None, 2\)\]; cairn calls it on one tensor"),
    ("wrong_width_actor_critic", r"input has shape \(None, 7\); cairn feeds .*shape \[batch, 4\]"),
    # before: AttributeError: 'ActorCritic' object has no attribute 'outputs'
    ("subclassed_actor_critic", r"returned ActorCritic; .*a subclassed keras.Model or a Sequential without "
                                r"keras.Input has no inputs and outputs"),
])
def test_a_users_keras_model_that_cannot_take_the_observations_is_refused_at_build(builder, match):
    model = {"framework": "keras", "keras_model": f"tests.keras.builders:{builder}"}
    with pytest.raises(ConfigError, match=match):
        small_ppo(model=model).build()


def test_a_builder_returning_variables_another_policy_holds_is_refused(tmp_path):
    """Before, a builder that returned its cached model gave every policy the same Keras variables:
    loading an old checkpoint into a new policy silently rewound the trained one's weights."""
    model = {"framework": "keras", "keras_model": "tests.keras.builders:cached_actor_critic"}
    space, actions = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)
    trained = cairn.Policy(space, actions, {"model": model}, seed=0)
    path = tmp_path / "p"
    trained.export_checkpoint(path)
    with torch.no_grad():
        for tensor in trained.model.variables.values():
            tensor.add_(0.5)
    expected = trained.compute_action_inputs(OBS)
    with pytest.raises(ConfigError, match=r"cached_actor_critic' returned a Keras model whose variable "
                                          r"'dense.*/kernel' another cairn network already holds"):
        cairn.Policy.from_checkpoint(path)
    np.testing.assert_array_equal(trained.compute_action_inputs(OBS), expected)  # untouched
    del trained  # once no policy holds them, the variables are free for the next one
    cairn.Policy.from_checkpoint(path)


@pytest.mark.parametrize("dtype_policy", ["mixed_float16", "float64"])
def test_cairns_keras_networks_stay_float32_under_a_users_dtype_policy(dtype_policy, tmp_path):
    """Keras' process-wide dtype policy, which a user sets for their own models, reached cairn's
    layers before: under "float64" the variables were float64 and drawn otherwise (the Keras policy
    no longer started from the torch policy's weights: 7e-3 apart), under "mixed_float16" the model
    computed in float16 when called as a Keras model while the policy computed in float32 (so its
    model.keras export raised ExportError)."""
    import copy

    from cairn.algorithms.dqn.keras_model import keras_q_network
    from cairn.algorithms.sac.keras_model import keras_sac_model
    from cairn.algorithms.td3.keras_model import keras_td3_model
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    try:
        space, actions = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Box(-1, 1, (2,))
        keras_policy = cairn.Policy(space, actions, KERAS, seed=3)
        expected = cairn.Policy(space, actions, seed=3).compute_action_inputs(OBS)
        np.testing.assert_allclose(keras_policy.compute_action_inputs(OBS), expected, atol=1e-6)
        inputs, _ = keras_policy.model.network(OBS)  # the Keras model called as a user calls it
        np.testing.assert_allclose(keras.ops.convert_to_numpy(inputs), expected, atol=1e-6)
        keras_policy.export_model(tmp_path / "ppo")  # model.keras, checked against the policy
        config = {"hidden": [8], "activation": "relu"}
        q_network = keras_q_network(4, 2, config, dueling=True)
        networks = [keras_policy.model, q_network, copy.deepcopy(q_network), keras_td3_model(4, 2, config),
                    keras_sac_model(4, 2, config, initial_alpha=1.0, log_std_bounds=(-20.0, 2.0))]
        assert {p.dtype for net in networks for p in net.parameters()} == {torch.float32}
        assert q_network.network(OBS).dtype == torch.float32
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.fixture
def mixed_bfloat16():
    """Keras' process-wide dtype policy set to "mixed_bfloat16", and restored after the test."""
    from cairn.policy.keras_backend import import_keras

    keras = import_keras()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        yield keras
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("actions", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))])
def test_a_users_bfloat16_keras_model_is_refused_at_build_naming_the_dtype_policy(mixed_bfloat16, actions):
    """A user's Keras model under keras.config.set_dtype_policy("mixed_bfloat16") built, then
    crashed on the first action with torch's "TypeError: Got unsupported ScalarType BFloat16"
    (acting reads the outputs as numpy, which has no bfloat16). It is refused when the policy is
    built: a ConfigError naming the model, the dtype, the dtype policy and the fix; the fix given
    (float32 output layers) builds and acts."""
    space = gym.spaces.Box(-5, 5, (4,))
    model = {"framework": "keras", "keras_model": "tests.keras.builders:small_actor_critic"}
    with pytest.raises(ConfigError, match=r"small_actor_critic'.*dtype torch\.bfloat16 \(Keras' dtype policy "
                                          r"is 'mixed_bfloat16'\).*Fix:.*dtype='float32'"):
        cairn.Policy(space, actions, {"model": model}, seed=0)
    fixed = {"framework": "keras", "keras_model": "tests.keras.builders:float32_heads_actor_critic"}
    policy = cairn.Policy(space, actions, {"model": fixed}, seed=0)
    assert policy.compute_action_inputs(OBS).dtype == np.float32
    assert actions.contains(policy.compute_single_action(OBS[0]))
    assert mixed_bfloat16.config.dtype_policy().name == "mixed_bfloat16"  # the user's, untouched
