"""A user's recurrent model for the tests (importable, so checkpoints and Ray workers resolve it)."""

from __future__ import annotations

import torch
from torch import nn

from cairn.models import RecurrentActorCriticModel


class TinyGRU(RecurrentActorCriticModel):
    """One GRU state component ``[width]``: ``forward(obs [B, T, d], [h]) -> (logits, value, [h])``."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.width = int(model_config.get("width", 16))
        self.gru = nn.GRU(self.obs_size, self.width, batch_first=True)
        self.pi, self.vf = nn.Linear(self.width, num_outputs), nn.Linear(self.width, 1)

    def get_initial_state(self):
        return [torch.zeros(self.width)]

    def forward(self, obs, state):
        out, h = self.gru(obs, state[0].unsqueeze(0))
        return self.pi(out), self.vf(out).squeeze(-1), [h.squeeze(0)]


class NoisyGRU(TinyGRU):
    """TinyGRU with a Dropout after the GRU (random in training mode); records the training
    mode of every call made without gradient (acting, the learner's targets) in ``no_grad_modes``."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.drop = nn.Dropout(0.5)
        self.no_grad_modes: list[bool] = []

    def forward(self, obs, state):
        if not torch.is_grad_enabled():
            self.no_grad_modes.append(self.training)
        out, h = self.gru(obs, state[0].unsqueeze(0))
        out = self.drop(out)
        return self.pi(out), self.vf(out).squeeze(-1), [h.squeeze(0)]


class LearnedStartGRU(TinyGRU):
    """TinyGRU whose initial state is a weight (``h0``): it changes with ``set_weights``."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.h0 = nn.Parameter(torch.full((self.width,), float(model_config.get("h0", 0.0))))

    def get_initial_state(self):
        return [self.h0]


class RecordingGRU(TinyGRU):
    """TinyGRU recording ``(gradients enabled, training mode)`` at each forward."""

    seen: list[tuple[bool, bool]] = []

    def forward(self, obs, state):
        type(self).seen.append((torch.is_grad_enabled(), self.training))
        return super().forward(obs, state)


class BatchNormGRU(TinyGRU):
    """TinyGRU normalising its input by batch statistics (BatchNorm1d over every step): padded
    steps of the learners' sequences would enter them."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.norm = nn.Sequential(nn.BatchNorm1d(self.obs_size))

    def forward(self, obs, state):
        b, t, f = obs.shape
        return super().forward(self.norm(obs.reshape(b * t, f)).reshape(b, t, f), state)


class LayerNormGRU(TinyGRU):
    """TinyGRU normalising each step on its own (LayerNorm): padding cannot reach a real step."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.norm = nn.LayerNorm(self.obs_size)

    def forward(self, obs, state):
        return super().forward(self.norm(obs), state)
