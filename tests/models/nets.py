"""Users' own networks for the model-API tests: module-level, so that checkpoints can name them."""

from __future__ import annotations

import torch
from torch import nn

from cairn.models import (
    ActorCriticModel,
    QModel,
    RecurrentActorCriticModel,
    SACActorModel,
    SACCriticModel,
    TD3ActorModel,
    split_observation,
)


class TwoHeads(ActorCriticModel):
    """An MLP trunk shared by a policy head and a value head."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.trunk = nn.Sequential(nn.Linear(self.obs_size, width), nn.Tanh())
        self.pi = nn.Linear(width, num_outputs)
        self.vf = nn.Linear(width, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.vf(h).squeeze(-1)


class MaskAware(TwoHeads):
    """Asks for the action mask and adds it to its input."""

    receives_action_mask = True

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.mask_in = nn.Linear(num_outputs, int(model_config.get("width", 32)), bias=False)
        self.seen_masks: list[torch.Tensor] = []

    def forward(self, obs, action_mask):
        h = self.trunk(obs) + self.mask_in(action_mask)
        return self.pi(h), self.vf(h).squeeze(-1)


class SmallQ(QModel):
    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.ReLU(), nn.Linear(width, num_outputs))

    def forward(self, obs):
        return self.net(obs)


class SmallActor(SACActorModel):
    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.ReLU(),
                                 nn.Linear(width, 2 * num_outputs))

    def forward(self, obs):
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(-20.0, 2.0)


class SmallCritic(SACCriticModel):
    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        act = int(action_space.shape[0])
        self.net = nn.Sequential(nn.Linear(self.obs_size + act, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], dim=-1)).squeeze(-1)


class SmallTD3Actor(TD3ActorModel):
    """TD3's actor: the action before TD3's tanh, ``[B, num_outputs]``."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.ReLU(), nn.Linear(width, num_outputs))

    def forward(self, obs):
        return self.net(obs)


class NotAModel(nn.Module):
    """A torch module that does not subclass a cairn.models base: refused."""

    def __init__(self, *args):
        super().__init__()
        self.x = nn.Linear(1, 1)


class DictParts(ActorCriticModel):
    """Reads a Dict observation by its parts (cairn.models.split_observation)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.pos = nn.Linear(2, 8)
        self.mode = nn.Linear(3, 8)
        self.pi, self.vf = nn.Linear(16, num_outputs), nn.Linear(16, 1)

    def forward(self, obs):
        parts = split_observation(obs, self.observation_space)
        h = torch.tanh(torch.cat([self.pos(parts["pos"]), self.mode(parts["mode"])], dim=-1))
        return self.pi(h), self.vf(h).squeeze(-1)


class NoisyHeads(TwoHeads):
    """TwoHeads with Dropout and BatchNorm in the trunk: layers whose output depends on the
    training mode (random in training, batch statistics that move)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.trunk = nn.Sequential(nn.Linear(self.obs_size, width), nn.BatchNorm1d(width), nn.Tanh(),
                                   nn.Dropout(0.5))


class NoisyQ(SmallQ):
    """SmallQ with Dropout; records ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.ReLU(), nn.Dropout(0.5),
                                 nn.Linear(width, num_outputs))

    def forward(self, obs):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs)


class NoisyActor(SmallActor):
    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.ReLU(), nn.Dropout(0.5),
                                 nn.Linear(width, 2 * num_outputs))


class ModeRecorder(NoisyHeads):
    """NoisyHeads that records ``(gradients enabled, training mode)`` at each forward, and raises
    in a forward with gradients (a learner's) while :attr:`fail_learning` is set."""

    seen: list[tuple[bool, bool]] = []
    fail_learning = False

    def forward(self, obs):
        grad = torch.is_grad_enabled()
        type(self).seen.append((grad, self.training))
        if grad and type(self).fail_learning:
            raise RuntimeError("a loss that fails")
        return super().forward(obs)


class RecordingActor(SmallActor):
    """SAC's SmallActor recording ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def forward(self, obs):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs)


class RecordingTD3Actor(SmallTD3Actor):
    """TD3's SmallTD3Actor recording ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def forward(self, obs):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs)


class RecordingCritic(SmallCritic):
    """SmallCritic recording ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def forward(self, obs, actions):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs, actions)


class NoisyCritic(SmallCritic):
    """SmallCritic with BatchNorm and Dropout: a critic whose output depends on the mode."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        act = int(action_space.shape[0])
        self.net = nn.Sequential(nn.Linear(self.obs_size + act, width), nn.BatchNorm1d(width), nn.ReLU(),
                                 nn.Dropout(0.5), nn.Linear(width, 1))


class NoisyTD3Actor(SmallTD3Actor):
    """SmallTD3Actor with BatchNorm and Dropout."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        width = int(model_config.get("width", 32))
        self.net = nn.Sequential(nn.Linear(self.obs_size, width), nn.BatchNorm1d(width), nn.ReLU(),
                                 nn.Dropout(0.5), nn.Linear(width, num_outputs))


class RecordingMaskAware(MaskAware):
    """MaskAware recording ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def forward(self, obs, action_mask):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs, action_mask)


class ScalesInPlace(TwoHeads):
    """Normalises its input in place (``obs *= scale``), as legal torch code may: acting must not
    write into the caller's observations (the rows the runner stores for learning)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.register_buffer("scale", torch.full((self.obs_size,), 2.0))

    def forward(self, obs):
        obs *= self.scale
        return super().forward(obs)


class QScalesInPlace(SmallQ):
    def forward(self, obs):
        obs.mul_(2.0)
        return super().forward(obs)


class ActorScalesInPlace(SmallActor):
    def forward(self, obs):
        obs.mul_(2.0)
        return super().forward(obs)


class RecordingScalesInPlace(ScalesInPlace):
    """Records the rows it is given: in inference mode (acting) and with gradients (the losses)."""

    acted: list[torch.Tensor] = []
    learned: list[torch.Tensor] = []

    def forward(self, obs):
        if torch.is_inference_mode_enabled():
            type(self).acted.append(obs.clone())
        elif torch.is_grad_enabled():
            type(self).learned.append(obs.detach().clone())
        return super().forward(obs)


class GRUScalesInPlace(RecurrentActorCriticModel):
    """A GRU writing into its input and into the state it is given (``obs *= 2``, ``h.mul_(0.5)``)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.gru = nn.GRU(self.obs_size, 8, batch_first=True)
        self.pi, self.vf = nn.Linear(8, num_outputs), nn.Linear(8, 1)

    def get_initial_state(self):
        return [torch.zeros(8)]

    def forward(self, obs, state):
        obs *= 2.0
        h = state[0].mul_(0.5)
        out, h = self.gru(obs, h.unsqueeze(0))
        return self.pi(out), self.vf(out).squeeze(-1), [h.squeeze(0)]


class CriticScalesInPlace(SmallCritic):
    def forward(self, obs, actions):
        obs.mul_(2.0)
        return super().forward(obs, actions)


class TD3ActorScalesInPlace(SmallTD3Actor):
    def forward(self, obs):
        obs.mul_(2.0)
        return super().forward(obs)


class PenaltyMask(TwoHeads):
    """Turns its action mask into an additive penalty in place (0 legal, -1e4 illegal)."""

    receives_action_mask = True

    def forward(self, obs, action_mask):
        logits, value = super().forward(obs)
        return logits + action_mask.sub_(1.0).mul_(1e4), value


class LazyHeads(TwoHeads):
    """TwoHeads whose trunk is an nn.LazyLinear: its weights exist only after a first forward."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.trunk = nn.Sequential(nn.LazyLinear(32), nn.Tanh())


class LazyCritic(SmallCritic):
    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.net = nn.Sequential(nn.LazyLinear(32), nn.ReLU(), nn.Linear(32, 1))


class FarBelowMaskedScore(TwoHeads):
    """Logits of ``offset`` (-5e9 by default: far below the masked score, -1e9) for every action,
    whatever the observation: as a user's network giving log-probabilities of its own."""

    def forward(self, obs):
        logits, value = super().forward(obs)
        return torch.full_like(logits, float(self.model_config.get("offset", -5e9))) + 0.0 * logits, value


class ConstantScaled(TwoHeads):
    """Reads its input through constants its constructor sets and no state dict holds: a
    non-persistent buffer and a plain tensor attribute (a restore must build them as here)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.register_buffer("scale", torch.linspace(1.0, 4.0, self.obs_size), persistent=False)
        self.offset = torch.full((self.obs_size,), 0.25)

    def forward(self, obs):
        return super().forward(obs * self.scale + self.offset)


class ConstantScaledQ(SmallQ):
    """:class:`ConstantScaled`'s constants in DQN's network."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.register_buffer("scale", torch.linspace(1.0, 4.0, self.obs_size), persistent=False)
        self.offset = torch.full((self.obs_size,), 0.25)

    def forward(self, obs):
        return super().forward(obs * self.scale + self.offset)


class TiedWeights(ActorCriticModel):
    """Two layers sharing one weight Parameter (``b.weight = a.weight``), each with its own bias:
    one parameter to train, under two names in the state dict."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.inp = nn.Linear(self.obs_size, 8)
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.b.weight = self.a.weight
        self.pi, self.vf = nn.Linear(8, num_outputs), nn.Linear(8, 1)

    def forward(self, obs):
        h = torch.tanh(self.inp(obs))
        return self.pi(torch.tanh(self.a(h))), self.vf(torch.tanh(self.b(h))).squeeze(-1)


def _reset_to_marker(layer: nn.Linear, generator: torch.Generator) -> None:
    """A ``reset_parameters(generator)`` body: small normal weights, biases of exactly 0.5."""
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.01, generator=generator)
        layer.bias.fill_(0.5)


class ResettingActor(SmallActor):
    """Initialises itself in ``reset_parameters(generator)`` (docs/models.md, "Weights")."""

    def reset_parameters(self, generator):
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                _reset_to_marker(layer, generator)


class ResettingCritic(SmallCritic):
    def reset_parameters(self, generator):
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                _reset_to_marker(layer, generator)


class ResettingTD3Actor(SmallTD3Actor):
    def reset_parameters(self, generator):
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                _reset_to_marker(layer, generator)
