"""A user's own torch network (cairn.models) under every checkpoint guarantee: it trains, saves,
restores in a fresh process, restores by subset, resumes exactly, and a checkpoint naming a
class of the wrong kind, or the standard library, is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import CheckpointConfigError, CheckpointError, ConfigError, UnsafeCheckpointError
from cairn.models import ActorCriticModel, register_model, registered_models
from tests.checkpoint.attacks import edit_json
from tests.helpers import assert_resumes_exactly, small_ma_ppo, small_ppo
from tests.models.nets import (
    ConstantScaled,
    ConstantScaledQ,
    MaskAware,
    ResettingActor,
    ResettingCritic,
    ResettingTD3Actor,
    SmallActor,
    SmallCritic,
    SmallQ,
    SmallTD3Actor,
    TiedWeights,
    TwoHeads,
)

ROOT = Path(__file__).resolve().parents[2]
BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def _weights_equal(a: cairn.Policy, b: cairn.Policy) -> bool:
    wa, wb = a.get_weights(), b.get_weights()
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def _dqn(**model: Any) -> cairn.DQNConfig:
    return (cairn.DQNConfig().environment("CartPole-v1")
            .training(model=model, train_batch_size=32, minibatch_size=32,
                      num_steps_sampled_before_learning_starts=64)
            .checkpointing(store_replay_buffer=True).debugging(seed=0))


def _sac(**model: Any) -> cairn.SACConfig:
    return (cairn.SACConfig().environment("Pendulum-v1")
            .training(model=model, train_batch_size=32, minibatch_size=32,
                      num_steps_sampled_before_learning_starts=64)
            .checkpointing(store_replay_buffer=True).debugging(seed=0))


def _td3(**model: Any) -> cairn.TD3Config:
    return (cairn.TD3Config().environment("Pendulum-v1")
            .training(model=model, train_batch_size=32, minibatch_size=32,
                      num_steps_sampled_before_learning_starts=64)
            .checkpointing(store_replay_buffer=True).debugging(seed=0))


def test_the_config_stores_the_class_reference_and_the_json_config() -> None:
    config = small_ppo(model={"custom_model": TwoHeads, "custom_model_config": {"width": 8}})
    assert config.model["custom_model"] == "tests.models.nets:TwoHeads"
    assert json.loads(json.dumps(config.to_dict()))["model"]["custom_model_config"] == {"width": 8}
    policy = config.build().get_policy()
    assert isinstance(policy.model, TwoHeads)
    assert policy.model.pi.out_features == 2 and policy.model.trunk[0].out_features == 8


def test_a_seeded_policy_always_builds_the_same_weights() -> None:
    config = {"model": {"custom_model": TwoHeads}}
    first, again = (cairn.Policy(BOX, gym.spaces.Discrete(3), config, seed=1) for _ in range(2))
    other = cairn.Policy(BOX, gym.spaces.Discrete(3), config, seed=2)
    assert _weights_equal(first, again)
    assert not _weights_equal(first, other)
    before = torch.random.get_rng_state()
    cairn.Policy(BOX, gym.spaces.Discrete(3), config, seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)  # torch's global generator is left as it was


@pytest.mark.parametrize("make", [
    lambda: small_ppo(model={"custom_model": TwoHeads, "custom_model_config": {"width": 16}}),
    lambda: _dqn(custom_model="tests.models.nets:SmallQ"),
    lambda: _sac(custom_model=SmallActor, custom_q_model=SmallCritic, custom_model_config={"width": 16}),
    lambda: _sac(custom_q_model=SmallCritic),
    lambda: _td3(custom_model=SmallTD3Actor, custom_q_model=SmallCritic, custom_model_config={"width": 16}),
    lambda: _td3(custom_model=SmallTD3Actor),
], ids=["ppo", "dqn", "sac-actor-and-critics", "sac-critics-only", "td3-actor-and-critics", "td3-actor-only"])
def test_training_resumes_exactly_from_a_checkpoint(make: Any, tmp_path: Path) -> None:
    algo = make().build()
    for _ in range(2):
        algo.train()
    algo.save(tmp_path / "ckpt")
    restored = cairn.Algorithm.from_checkpoint(tmp_path / "ckpt")
    first, second = algo.train(), restored.train()
    assert _weights_equal(algo.get_policy(), restored.get_policy())
    assert first["num_env_steps_sampled_lifetime"] == second["num_env_steps_sampled_lifetime"]
    for key in ("episode_return_mean", "learners", "num_episodes"):
        assert json.dumps(first.get(key), sort_keys=True, default=str) == \
            json.dumps(second.get(key), sort_keys=True, default=str)


def test_dqn_sac_and_td3_build_the_users_classes() -> None:
    dqn = _dqn(custom_model=SmallQ).build().get_policy()
    assert isinstance(dqn.model, SmallQ) and isinstance(dqn.target_model, SmallQ)
    sac = _sac(custom_model=SmallActor, custom_q_model=SmallCritic).build().get_policy()
    assert isinstance(sac.model.actor, SmallActor)
    assert isinstance(sac.model.critic.q1, SmallCritic)
    assert isinstance(sac.model.target_critic.q2, SmallCritic)
    # The target critics start as copies and never train.
    assert not any(p.requires_grad for p in sac.model.target_critic.parameters())
    critics, targets = sac.model.critic.parameters(), sac.model.target_critic.parameters()
    assert all(torch.equal(a, b) for a, b in zip(critics, targets))
    td3 = _td3(custom_model=SmallTD3Actor, custom_q_model=SmallCritic).build().get_policy()
    # TD3 squashes the user's actor with tanh: its action is tanh(forward(obs)), in [-1, 1].
    model = td3.model
    assert isinstance(model.actor.net, SmallTD3Actor) and isinstance(model.target_actor.net, SmallTD3Actor)
    assert isinstance(model.critic.q1, SmallCritic) and isinstance(model.target_critic.q2, SmallCritic)
    obs = torch.linspace(-30.0, 30.0, 9).repeat(3, 1).T
    with torch.no_grad():
        assert torch.equal(model.actor(obs), torch.tanh(model.actor.net(obs)))
    for source, target in ((model.actor, model.target_actor), (model.critic, model.target_critic)):
        assert not any(p.requires_grad for p in target.parameters())
        assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters(), strict=True))


@pytest.mark.parametrize("make", [
    lambda: _dqn(custom_q_model=SmallQ),
    lambda: small_ppo(model={"custom_q_model": SmallCritic}),
    lambda: cairn.APPOConfig().environment("CartPole-v1").training(model={"custom_q_model": SmallCritic}),
], ids=["dqn", "ppo", "appo"])
def test_a_custom_q_model_an_algorithm_never_builds_is_refused(make: Any) -> None:
    """Only SAC's and TD3's critics are a ``custom_q_model``: DQN, PPO and APPO built their own
    network in its place and trained it, with no error, while the config and every checkpoint
    named the user's class."""
    with pytest.raises(ConfigError, match=r"model.custom_q_model.*model.custom_model"):
        make().build()


@pytest.mark.parametrize("make", [lambda: small_ppo(model={"custom_model": TwoHeads}),
                                  lambda: _dqn(custom_model=SmallQ)], ids=["ppo", "dqn"])
def test_a_fresh_process_restores_it_by_importing_its_module(make: Any, tmp_path: Path) -> None:
    algo = make().build()
    algo.train()
    algo.save(tmp_path / "ckpt")
    obs = np.linspace(-0.1, 0.1, 4, dtype=np.float32)[None]
    expected = algo.get_policy().compute_action_inputs(obs)
    script = (
        "import json, numpy as np, cairn\n"
        f"algo = cairn.Algorithm.from_checkpoint({str(tmp_path / 'ckpt')!r})\n"
        "p = algo.get_policy()\n"
        "assert type(p.model).__module__ == 'tests.models.nets', type(p.model)\n"
        "obs = np.linspace(-0.1, 0.1, 4, dtype=np.float32)[None]\n"
        "print(json.dumps(p.compute_action_inputs(obs).tolist()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300, check=True)
    assert np.array_equal(np.array(json.loads(out.stdout.strip()), dtype=np.float32), expected)


def test_subset_restore_and_policy_checkpoints(tmp_path: Path) -> None:
    config = small_ma_ppo(2).multi_agent(policies={
        "p0": cairn.PolicySpec(config={"model": {"custom_model": TwoHeads}}),
        "p1": cairn.PolicySpec()})
    algo = config.build()
    algo.train()
    algo.save(tmp_path / "ckpt")
    only = cairn.Policy.from_checkpoint(tmp_path / "ckpt", policy_ids=["p0"])
    assert list(only) == ["p0"] and isinstance(only["p0"].model, TwoHeads)
    assert _weights_equal(only["p0"], algo.get_policy("p0"))
    algo.get_policy("p0").export_checkpoint(tmp_path / "policy")
    alone = cairn.Policy.from_checkpoint(tmp_path / "policy")
    assert isinstance(alone, cairn.Policy) and _weights_equal(alone, algo.get_policy("p0"))
    obs = np.random.default_rng(0).uniform(-0.1, 0.1, (16, 4)).astype(np.float32)
    assert np.array_equal(alone.compute_actions(obs, explore=False),
                          algo.get_policy("p0").compute_actions(obs, explore=False))


class LocalModel(ActorCriticModel):
    """Registered under a name in the tests below."""

    def __init__(self, observation_space: Any, action_space: Any, num_outputs: int,
                 model_config: Any) -> None:
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.pi = nn.Linear(self.obs_size, num_outputs)
        self.vf = nn.Linear(self.obs_size, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pi(obs), self.vf(obs).squeeze(-1)


def test_a_registered_name_is_stored_and_must_be_registered_to_restore(tmp_path: Path) -> None:
    assert cairn.register_model is register_model  # public at the top level too
    cairn.register_model("tiny_linear", LocalModel)
    assert registered_models()["tiny_linear"] is LocalModel
    algo = small_ppo(model={"custom_model": "tiny_linear"}).build()
    assert algo.config.model["custom_model"] == "tiny_linear"
    algo.save(tmp_path / "ckpt")
    assert isinstance(cairn.Algorithm.from_checkpoint(tmp_path / "ckpt").get_policy().model, LocalModel)
    script = f"import cairn\ncairn.Algorithm.from_checkpoint({str(tmp_path / 'ckpt')!r})\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode != 0
    assert "'tiny_linear' is not a registered model name" in out.stderr
    assert "register_model" in out.stderr


def test_a_class_checkpoints_cannot_name_is_refused_with_the_fix() -> None:
    class Inner(LocalModel):
        pass

    with pytest.raises(ConfigError, match="cannot be imported back by its name.*register_model"):
        small_ppo(model={"custom_model": Inner})
    unimportable = "'no_such_package_xyz.nets' that defines the model cannot be imported.*PYTHONPATH"
    with pytest.raises(ConfigError, match=unimportable):
        cairn.Policy(BOX, gym.spaces.Discrete(2), {"model": {"custom_model": "no_such_package_xyz.nets:Net"}})
    with pytest.raises(ConfigError, match="custom_model_config.*JSON"):
        small_ppo(model={"custom_model": TwoHeads, "custom_model_config": {"f": object()}})
    with pytest.raises(ConfigError, match="model.keras_model"):
        small_ppo(model={"custom_model": TwoHeads, "framework": "keras"})


@pytest.mark.parametrize(("reference", "error", "message"), [
    ("tests.models.nets:NotAModel", UnsafeCheckpointError, "not a subclass of cairn.models.ActorCriticModel"),
    ("tests.models.nets:SmallQ", UnsafeCheckpointError, "not a subclass of cairn.models.ActorCriticModel"),
    ("builtins:print", UnsafeCheckpointError, "standard-library"),
    ("os:system", UnsafeCheckpointError, "standard-library"),
    ({"__callable__": "tests.models.nets:TwoHeads"}, CheckpointError, "must be a str"),
], ids=["not-a-model", "wrong-role", "builtins", "os", "stored-callable"])
def test_a_checkpoint_naming_another_class_is_refused(reference: Any, error: type, message: str,
                                                      tmp_path: Path) -> None:
    algo = small_ppo(model={"custom_model": TwoHeads}).build()
    algo.get_policy().export_checkpoint(tmp_path / "policy")

    def rename(state: Any) -> None:
        state["spec"]["config"]["model"]["custom_model"] = reference

    # The edited file's hash is recorded: the refusal must come from the resolver.
    edit_json(tmp_path / "policy", "policy_state.json", rename)
    with pytest.raises(error, match=message):
        cairn.Policy.from_checkpoint(tmp_path / "policy")


def test_split_observation_gives_the_dict_back_and_exports(tmp_path: Path) -> None:
    from cairn.models import split_observation
    from tests.models.nets import DictParts

    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                             "mode": gym.spaces.Discrete(3)})
    samples = [space.sample() for _ in range(5)]
    rows = torch.from_numpy(np.stack([gym.spaces.flatten(space, s) for s in samples]).astype(np.float32))
    parts = split_observation(rows, space)
    for i, sample in enumerate(samples):
        assert torch.equal(parts["pos"][i], torch.from_numpy(sample["pos"]))
        assert int(parts["mode"][i].argmax()) == int(sample["mode"])
    with pytest.raises(ValueError, match="do not fit"):
        split_observation(rows[:, :4], space)
    policy = cairn.Policy(space, gym.spaces.Discrete(2), {"model": {"custom_model": DictParts}}, seed=0)
    assert policy.compute_actions(samples).shape == (5,)
    policy.export_model(tmp_path / "program")  # slicing only: torch.export traces it, with parity
    assert (tmp_path / "program" / "signature.json").exists()


_MAIN_SCRIPT = '''
import sys, warnings
import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from tests.models.nets import TwoHeads

class Net(TwoHeads):  # defined in the script: its reference is '__main__:Net'
    pass

class Hooks(cairn.Callbacks):
    pass

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    algo = (cairn.PPOConfig().environment("CartPole-v1").callbacks(Hooks)
            .training(model={"custom_model": Net}, train_batch_size=64, minibatch_size=32).build())
    algo.save(sys.argv[1])
for w in caught:
    print("WARNING", w.filename, str(w.message))
'''


def test_classes_defined_in_main_warn_and_restore_elsewhere_with_the_fix(tmp_path: Path) -> None:
    """A model and callbacks defined in the script run as ``__main__``: build() and save() warn
    (from the user's lines), and another process's restore is a CheckpointConfigError (nothing
    unsafe happened) naming ``__main__`` and the fix, which works."""
    script = tmp_path / "train_script.py"
    script.write_text(_MAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "ckpt")], capture_output=True,
                         text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert [w.split()[1] for w in warned] == [str(script)] * 2, out.stdout  # build(), then save()
    assert "At build()" in warned[0] and "At save()" in warned[1]
    for line in warned:
        assert "model.custom_model='__main__:Net'" in line and "callbacks_class='__main__:Hooks'" in line

    with pytest.raises(CheckpointConfigError, match=r"'__main__:(Hooks|Net)'.*__main__.*config_overrides"):
        cairn.Algorithm.from_checkpoint(tmp_path / "ckpt")
    restored = cairn.Algorithm.from_checkpoint(tmp_path / "ckpt", config_overrides={
        "model": {"custom_model": TwoHeads}, "callbacks_class": cairn.Callbacks})
    try:
        assert isinstance(restored.get_policy().model, TwoHeads)
        assert type(restored.callbacks) is cairn.Callbacks
    finally:
        restored.stop()


@pytest.mark.parametrize("reference", ["tests.models.nets:TwoHeadz", "tests.models.no_such_module:Net"])
def test_a_typo_in_a_reference_at_build_is_a_config_error(reference: str) -> None:
    with pytest.raises(ConfigError) as caught:
        small_ppo(model={"custom_model": reference}).build()
    assert not isinstance(caught.value, UnsafeCheckpointError)
    assert reference.split(":")[0].rsplit(".", 1)[-1] in str(caught.value)


def test_a_model_with_lazy_parameters_is_refused_when_built() -> None:
    """An nn.LazyLinear gets its weights at its first forward, which is cairn's output check,
    after the seeded constructor: two policies with the same seed started from other weights,
    silently, and a checkpoint of one failed to restore with a CheckpointFormatError about
    uninitialized parameters. Refused when built, naming the parameters and the fix; a critic
    (SAC's custom_q_model) too."""
    from tests.models.nets import LazyCritic, LazyHeads

    box, discrete = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)
    with pytest.raises(ConfigError, match=r"model.custom_model'=LazyHeads .*'trunk.0.weight'.*nn.Linear\("):
        cairn.Policy(box, discrete, {"model": {"custom_model": LazyHeads}}, seed=0)
    with pytest.raises(ConfigError, match=r"model.custom_q_model'=LazyCritic"):
        (cairn.SACConfig().environment("Pendulum-v1")
         .training(model={"custom_q_model": LazyCritic}).build())
    policy = cairn.Policy(box, discrete, {"model": {"custom_model": TwoHeads}}, seed=0)  # the next one works
    assert policy.compute_single_action(np.zeros(4, np.float32)) in (0, 1)


@pytest.mark.parametrize("policy_class, net", [(cairn.Policy, ConstantScaled), (DQNPolicy, ConstantScaledQ)])
def test_a_restored_model_keeps_the_constants_its_constructor_sets(
        tmp_path: Path, policy_class: type[cairn.Policy], net: type[nn.Module]) -> None:
    """A non-persistent buffer and a tensor attribute are in no state dict: a restore that built
    the network without its constructor's values (uninitialised memory, or meta tensors) acted on
    garbage with no error (``from_state``: remote runners, learners) or failed as a damaged
    checkpoint (``from_checkpoint``)."""
    space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    policy = policy_class(space, gym.spaces.Discrete(3), {"model": {"custom_model": net}}, seed=0)
    policy.export_checkpoint(tmp_path / "policy")
    obs = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (16, 4)).astype(np.float32))
    with torch.no_grad():
        expected = policy.model(obs)[0] if policy_class is cairn.Policy else policy.model(obs)
    restored = {"from_state": policy_class.from_state(policy.get_state()),
                "adopting": policy_class.from_state(policy.get_state(copy=True), copy=False),
                "from_checkpoint": cairn.Policy.from_checkpoint(tmp_path / "policy")}
    for how, copy in restored.items():
        assert torch.equal(copy.model.scale, policy.model.scale), how
        assert torch.equal(copy.model.offset, policy.model.offset), how
        with torch.no_grad():
            out = copy.model(obs)[0] if policy_class is cairn.Policy else copy.model(obs)
        assert torch.equal(out, expected), how


def test_tied_weights_stay_one_parameter_through_a_restore(tmp_path: Path) -> None:
    """A restore that adopts the stored arrays gave each state-dict name its own tensor, so
    ``b.weight = a.weight`` became two parameters: the checkpoint of a trained policy was refused
    as damaged (its optimizer state holds one slot for the pair), and a policy restored without
    optimizer state trained the two halves apart, with no error."""
    policy = cairn.Policy(BOX, gym.spaces.Discrete(2), {"model": {"custom_model": TiedWeights}}, seed=0)
    for copy in (True, False):
        restored = cairn.Policy.from_state(policy.get_state(copy=True), copy=copy)
        assert restored.model.b.weight is restored.model.a.weight, copy
        assert len(list(restored.model.parameters())) == len(list(policy.model.parameters()))
    algo = small_ppo(model={"custom_model": TiedWeights}).build()
    algo.train()
    assert_resumes_exactly(algo, tmp_path / "ckpt")
    algo.stop()


@pytest.mark.parametrize("make", [
    lambda: _sac(custom_model=ResettingActor, custom_q_model=ResettingCritic),
    lambda: _sac(custom_q_model=ResettingCritic),
    lambda: _td3(custom_model=ResettingTD3Actor, custom_q_model=ResettingCritic),
    lambda: _td3(custom_model=ResettingTD3Actor),
], ids=["sac", "sac-critics-only", "td3", "td3-actor-only"])
def test_sac_and_td3_call_a_users_reset_parameters(make: Any) -> None:
    """docs/models.md: a model may initialise itself in ``reset_parameters(generator)``, which cairn
    calls with the policy's generator. PPO and DQN called it; SAC and TD3 never did, so a user's
    actor and critics kept torch's default initialisation with no error. The targets copy them."""
    algo = make().build()
    weights = algo.get_policy().get_weights()
    users = [name for name in weights if name.endswith("bias") and ".net." in name]
    assert users and all(np.all(weights[name] == 0.5) for name in users), users
    for name, value in weights.items():
        if name.startswith("target_"):
            assert np.array_equal(value, weights[name.removeprefix("target_")]), name
    again = make().build().get_policy().get_weights()  # seeded: the same generator, the same draws
    assert all(np.array_equal(weights[name], again[name]) for name in weights)
    algo.stop()


def test_a_model_asking_for_a_mask_the_observations_lack_is_a_config_error() -> None:
    """A model with ``receives_action_mask = True`` under a policy whose observations hold no
    ``"action_mask"`` failed the build with torch's bare TypeError about forward's arguments."""
    with pytest.raises(ConfigError, match=r"MaskAware.*receives_action_mask.*action_mask"):
        cairn.Policy(BOX, gym.spaces.Discrete(2), {"model": {"custom_model": MaskAware}}, seed=0)
