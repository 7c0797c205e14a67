"""A network whose outputs have the wrong shapes is refused when its policy is built or restored
(issue 36, item 7): a ConfigError naming the network's class, the output, the expected and the
actual shape, and the fix. Before, logits wider than the action space sent out-of-space
actions to the env, and a ``[B, 1]`` value broadcast silently in PPO's loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.errors import ConfigError
from cairn.models import ActorCriticModel, QModel, RecurrentActorCriticModel
from cairn.policy.output_shapes import SAMPLE_BATCH
from tests.models.nets import SmallActor, SmallCritic, SmallQ, SmallTD3Actor, TwoHeads
from tests.recurrent.nets import TinyGRU

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
B = SAMPLE_BATCH


class WideLogits(TwoHeads):
    """Two logits too many: on CartPole it samples actions 2 and 3."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs + 2, model_config)


class ColumnValue(TwoHeads):
    """A ``[B, 1]`` value head, unsqueezed."""

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.vf(h)


class ScalarOutput(TwoHeads):
    """``forward`` returns the logits alone, not ``(logits, value)``."""

    def forward(self, obs):
        return self.pi(self.trunk(obs))


class NarrowActingLogits(TwoHeads):
    """``forward`` is right, but the ``action_inputs`` acting reads drops the last logit."""

    def action_inputs(self, obs):
        return self.forward(obs)[0][:, :-1]


class WideQ(SmallQ):
    def forward(self, obs):
        q = self.net(obs)
        return torch.cat([q, q], dim=-1)


class ColumnCritic(SmallCritic):
    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], dim=-1))


class OneMeanActor(SmallActor):
    def forward(self, obs):
        mean, log_std = super().forward(obs)
        return mean[:, :1], log_std


class OneActionTD3Actor(SmallTD3Actor):
    """Drops an action dimension: TD3 would act and learn on a broadcast action."""

    def forward(self, obs):
        return super().forward(obs)[:, :1]


class PairTD3Actor(SmallTD3Actor):
    """Returns ``(action, action)``, SAC's pair, where TD3 reads one tensor."""

    def forward(self, obs):
        u = super().forward(obs)
        return u, u


class StateLosingGRU(TinyGRU):
    """Returns the state with its batch axis squeezed into the feature axis."""

    def forward(self, obs, state):
        inputs, value, (h,) = super().forward(obs, state)
        return inputs, value, [h.reshape(-1)]


class ColumnValueGRU(TinyGRU):
    def forward(self, obs, state):
        inputs, value, out = super().forward(obs, state)
        return inputs, value.unsqueeze(-1), out


class Switchable(TwoHeads):
    """Right until ``WIDE`` is set: a class whose code changed after a checkpoint was saved."""

    WIDE = False

    def forward(self, obs):
        logits, value = super().forward(obs)
        return (torch.cat([logits, logits], dim=-1) if Switchable.WIDE else logits), value


class NormAndNoise(ActorCriticModel):
    """BatchNorm (running statistics), dropout and noise from torch's global generator."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.norm, self.drop = nn.BatchNorm1d(self.obs_size), nn.Dropout(0.5)
        self.pi, self.vf = nn.Linear(self.obs_size, num_outputs), nn.Linear(self.obs_size, 1)

    def forward(self, obs):
        h = self.drop(self.norm(obs + torch.randn_like(obs)))
        return self.pi(h), self.vf(h).squeeze(-1)


def _refused(build: Any, *names: str) -> str:
    with pytest.raises(ConfigError) as caught:
        build()
    message = str(caught.value)
    for name in names:
        assert name in message, message
    return message


@pytest.mark.parametrize(("model_class", "output", "expected", "actual"), [
    (WideLogits, "action_inputs", f"[{B}, 2]", f"[{B}, 4]"),
    (ColumnValue, "value", f"[{B}]", f"[{B}, 1]"),
    (NarrowActingLogits, "action_inputs(obs)", f"[{B}, 2]", f"[{B}, 1]"),
])
def test_ppo_refuses_wrong_shapes_at_build(model_class: type, output: str, expected: str,
                                           actual: str) -> None:
    config = cairn.PPOConfig().environment("CartPole-v1").training(model={"custom_model": model_class})
    message = _refused(config.build, f"{__name__}.{model_class.__qualname__}", f"returned {output} of",
                       f"shape {actual}, expected {expected}", "Fix:")
    assert "Discrete(2)" in message or output == "value"


def test_a_forward_without_the_value_is_refused_by_name() -> None:
    _refused(lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": ScalarOutput}}),
             "ScalarOutput", "forward(obs) returned a Tensor, expected a tuple of 2 outputs")


def test_a_masked_policy_is_checked_before_masking() -> None:
    space = gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})
    _refused(lambda: cairn.Policy(space, gym.spaces.Discrete(3), {"model": {"custom_model": WideLogits}}),
             "WideLogits", f"shape [{B}, 5], expected [{B}, 3]")


def test_dqn_refuses_wrong_q_values_at_build() -> None:
    config = cairn.DQNConfig().environment("CartPole-v1").training(model={"custom_model": WideQ})
    _refused(config.build, f"{__name__}.WideQ (model.custom_model)", "q_values",
             f"shape [{B}, 4], expected [{B}, 2]", "Discrete(2)")


@pytest.mark.parametrize(("model", "names"), [
    ({"custom_model": OneMeanActor},
     ("OneMeanActor", "returned mean of shape", f"[{B}, 1], expected [{B}, 2]")),
    ({"custom_q_model": ColumnCritic},
     ("ColumnCritic (model.custom_q_model)", "returned q of shape", f"[{B}, 1], expected [{B}]")),
])
def test_sac_refuses_wrong_actor_and_critic_shapes_at_build(model: dict, names: tuple[str, ...]) -> None:
    _refused(lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": model}), *names)


@pytest.mark.parametrize(("model", "names"), [
    ({"custom_model": OneActionTD3Actor},
     ("OneActionTD3Actor (model.custom_model)", "returned action of shape", f"[{B}, 1], expected [{B}, 2]",
      "Box(-1.0, 1.0, (2,), float32)", "Fix:")),
    ({"custom_model": PairTD3Actor},
     ("PairTD3Actor (model.custom_model)", "returned action of a tuple, not a tensor", f"expected [{B}, 2]")),
    ({"custom_q_model": ColumnCritic},
     ("ColumnCritic (model.custom_q_model)", "returned q of shape", f"[{B}, 1], expected [{B}]")),
], ids=["narrow-actor", "pair-actor", "column-critic"])
def test_td3_refuses_wrong_actor_and_critic_shapes_at_build(model: dict, names: tuple[str, ...]) -> None:
    _refused(lambda: TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": model}), *names)


@pytest.mark.parametrize(("model_class", "names"), [
    (StateLosingGRU, ("StateLosingGRU", "state_out[0]", f"[{B * 16}], expected [{B}, 16]")),
    (ColumnValueGRU, ("ColumnValueGRU", "returned value of shape", "[batch, T]")),
])
def test_recurrent_models_are_checked_with_their_state(model_class: type, names: tuple[str, ...]) -> None:
    _refused(lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": model_class}}),
             *names)


def test_correct_models_of_every_algorithm_build() -> None:
    discrete = gym.spaces.Discrete(3)
    cairn.Policy(BOX, discrete, {"model": {"custom_model": TwoHeads}})
    cairn.Policy(BOX, discrete, {"model": {"custom_model": TinyGRU}})
    cairn.Policy(BOX, discrete, {"model": {"use_lstm": True}})
    cairn.Policy(BOX, gym.spaces.Box(-1, 1, (2,)))
    cairn.Policy(BOX, gym.spaces.MultiDiscrete([2, 3]))
    DQNPolicy(BOX, discrete, {"model": {"custom_model": SmallQ}})
    DQNPolicy(BOX, discrete, {"dueling": False})
    SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)),
              {"model": {"custom_model": SmallActor, "custom_q_model": SmallCritic}})
    SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)))
    TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)),
              {"model": {"custom_model": SmallTD3Actor, "custom_q_model": SmallCritic}})
    assert issubclass(TinyGRU, RecurrentActorCriticModel) and issubclass(SmallQ, QModel)


def test_the_check_changes_nothing() -> None:
    """No BatchNorm statistic, dropout draw or global random state moves, and the model stays in
    the mode it was in: a seeded policy is the same with or without the check."""
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": NormAndNoise}}, seed=0)
    net = policy.model
    assert not (net.training or net.norm.training or net.drop.training)  # at rest: eval mode
    policy.check_model_outputs()
    assert not (net.training or net.norm.training or net.drop.training)
    net.train()  # and a mode the user set is left as it is too
    state = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    policy.check_model_outputs()
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())  # running stats too
    assert net.training and net.norm.training and net.drop.training
    assert int(net.norm.num_batches_tracked) == 0  # nor did the check at build


def test_a_checkpoint_whose_model_class_changed_its_outputs_is_refused_at_restore(tmp_path: Path) -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": Switchable}}, seed=0)
    policy.export_checkpoint(tmp_path / "policy")
    algo = (cairn.PPOConfig().environment("CartPole-v1").training(model={"custom_model": Switchable})
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1).build())
    algo.save(tmp_path / "algo")
    assert cairn.Policy.from_checkpoint(tmp_path / "policy").compute_single_action(np.zeros(4)) in range(3)
    Switchable.WIDE = True
    try:
        _refused(lambda: cairn.Policy.from_checkpoint(tmp_path / "policy"),
                 f"{__name__}.Switchable", f"shape [{B}, 6], expected [{B}, 3]")
        _refused(lambda: cairn.Algorithm.from_checkpoint(tmp_path / "algo"), "Switchable", f"[{B}, 4]")
    finally:
        Switchable.WIDE = False


class SqueezedValue(TwoHeads):
    """``.squeeze()`` where ``.squeeze(-1)`` was meant: ``[5, 1]`` gives ``[5]``, ``[1, 1]`` gives ``[]``."""

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.vf(h).squeeze()


class SqueezedLogits(TwoHeads):
    def forward(self, obs):
        logits, value = super().forward(obs)
        return logits.squeeze(), value


class SqueezedQ(SmallQ):
    def forward(self, obs):
        return super().forward(obs).squeeze()


class SqueezedActor(SmallActor):
    def forward(self, obs):
        mean, log_std = super().forward(obs)
        return mean.squeeze(), log_std.squeeze()


class SqueezedCritic(SmallCritic):
    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], dim=-1)).squeeze()


class SqueezedTD3Actor(SmallTD3Actor):
    def forward(self, obs):
        return super().forward(obs).squeeze()


class SqueezedGRU(TinyGRU):
    def forward(self, obs, state):
        inputs, value, out = super().forward(obs, state)
        return inputs.squeeze(), value, out


ONE_ROW = "checked on 1 sample observation)"


@pytest.mark.parametrize(("build", "names"), [
    (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SqueezedValue}}),
     ("SqueezedValue (model.custom_model)", "returned value of shape [], expected [1]")),
    (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SqueezedLogits}}),
     ("SqueezedLogits", "returned action_inputs of shape [3], expected [1, 3]")),
    (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SqueezedGRU}}),
     ("SqueezedGRU", "returned action_inputs of shape [3, 3], expected [1, 3, 3]")),
    (lambda: DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SqueezedQ}}),
     ("SqueezedQ (model.custom_model)", "returned q_values of shape [3], expected [1, 3]")),
    (lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"custom_model": SqueezedActor}}),
     ("SqueezedActor", "returned mean of shape [2], expected [1, 2]")),
    (lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"custom_q_model": SqueezedCritic}}),
     ("SqueezedCritic (model.custom_q_model)", "returned q of shape [], expected [1]")),
    (lambda: TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"custom_model": SqueezedTD3Actor}}),
     ("SqueezedTD3Actor", "returned action of shape [2], expected [1, 2]")),
], ids=["ppo-value", "ppo-logits", "recurrent", "dqn", "sac-actor", "sac-critic", "td3-actor"])
def test_a_network_that_squeezes_away_a_batch_of_one_is_refused_at_build(build: Any,
                                                                         names: tuple[str, ...]) -> None:
    """A model that ``.squeeze()``s its outputs passed the check on 5 rows (nothing of size 1 to
    squeeze) and failed acting on one observation with an IndexError or numpy AxisError naming
    neither the model nor the fix. The check runs on one row too: a ConfigError naming the model,
    the shape and the fix."""
    _refused(build, *names, ONE_ROW, "never every size-1 axis (.squeeze())", "Fix:")


def test_a_correct_network_acts_on_one_observation_after_the_one_row_check() -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": TwoHeads}}, seed=0)
    assert policy.compute_single_action(np.zeros(4, np.float32)) in range(3)
