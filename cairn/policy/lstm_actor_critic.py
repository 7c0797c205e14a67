"""PPO's built-in network with memory: ``model={"use_lstm": True}`` (RLlib's keys).

The encoder (CNN for images, when there are any) and the MLP of ``hidden`` read each step's
observation; an LSTM of ``lstm_cell_size`` units reads their features; the action head reads the
LSTM's output. ``vf_share_layers`` means what it means for the MLP (RLlib's meaning): with the
default ``False`` the critic has its own encoder, MLP and LSTM (``critic_*``; RLlib's separate
actor and critic encoders, sb3-contrib's ``enable_critic_lstm``), and the state carries both
LSTMs' ``(h, c)``; with ``True`` the value head reads the actor's LSTM output and both losses
train the shared layers, unless ``vf_stop_gradient`` stops the value loss's gradient there
(sb3-contrib's ``shared_lstm=True``): only the policy loss trains them.
``max_seq_len`` is the learner's sequence length (:mod:`cairn.algorithms.ppo.recurrent`); the
keys are checked in :mod:`cairn.policy.recurrent_config`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ConfigError
from cairn.models import RecurrentActorCriticModel
from cairn.numpy_acting import (
    Dense,
    LiveViews,
    View,
    affine,
    dense_stack,
    evaluating,
    in_torch,
    linear,
    lstm_cell,
)
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.mlp_actor_critic import VF_STOP_GRADIENT_NEEDS_SHARING, mlp, mlp_activation

__all__ = ["LSTMActorCritic"]

class LSTMActorCritic(RecurrentActorCriticModel):
    """Encoder + MLP (``trunk.*``), ``lstm.*``, ``action_head``, ``value_head`` and, for Box
    actions, a state-independent ``log_std``; without ``vf_share_layers`` also the critic's own
    ``critic_encoder.*`` (for images), ``critic_trunk.*`` and ``critic_lstm.*``.
    ``forward(obs [B, T, d], [h, c]) -> (action_inputs [B, T, n], value [B, T], [h, c])`` with
    ``h``, ``c`` of ``[B, cell]``, or of ``[B, 2 * cell]`` with a critic of its own (the actor's
    LSTM's units first, then the critic's)."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        num_outputs: int,
        *,
        obs_size: int,
        hidden: Sequence[int],
        activation: str,
        cell_size: int,
        vf_share_layers: bool = False,
        vf_stop_gradient: bool = False,
        free_log_std: bool,
        log_std_init: float,
        encoder: Mapping[str, Any] | None,
    ) -> None:
        super().__init__(observation_space, action_space, num_outputs, {})
        if vf_stop_gradient and not vf_share_layers:
            raise ConfigError(VF_STOP_GRADIENT_NEEDS_SHARING)
        self.cell_size = int(cell_size)
        self.activation = activation
        self._numpy_views = LiveViews(_acting_views)
        self.vf_share_layers = bool(vf_share_layers)
        self.vf_stop_gradient = bool(vf_stop_gradient)
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden]
        self.trunk = mlp(sizes, activation)
        self.lstm = nn.LSTM(sizes[-1], self.cell_size, batch_first=True)
        head_outputs = num_outputs // 2 if free_log_std else num_outputs
        self.action_head = nn.Linear(self.cell_size, head_outputs)
        self.value_head = nn.Linear(self.cell_size, 1)
        self.log_std = (
            nn.Parameter(torch.full((head_outputs,), float(log_std_init))) if free_log_std else None
        )
        # The critic's own layers (None when it shares the actor's), registered after the actor's
        # so that a shared network's parameters, and their initialisation, are as before.
        separate = not self.vf_share_layers
        self.critic_encoder = ObservationEncoder(encoder) if separate and encoder is not None else None
        self.critic_trunk = mlp(sizes, activation) if separate else None
        self.critic_lstm = nn.LSTM(sizes[-1], self.cell_size, batch_first=True) if separate else None

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Orthogonal init as the MLP's (hidden gain sqrt(2), action head 0.01, value head 1);
        the LSTMs' weight matrices orthogonal with gain 1 and zero biases (as SB3-contrib's)."""
        heads: dict[nn.Module, float] = {self.action_head: 0.01, self.value_head: 1.0}
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)) and module.bias is not None:
                nn.init.orthogonal_(module.weight, gain=heads.get(module, 2**0.5), generator=generator)
                nn.init.zeros_(module.bias)
        for lstm in (self.lstm, self.critic_lstm):
            for name, param in () if lstm is None else lstm.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param, gain=1.0, generator=generator)
                else:
                    nn.init.zeros_(param)

    def numpy_step(self, obs: np.ndarray, state: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One acting step in numpy on views of the live parameters (:mod:`cairn.numpy_acting`):
        ``(action_inputs [B, n], [h, c])`` for processed ``obs`` ``[B, d]`` and ``state`` ``[h, c]``
        (``[B, cell]`` each, ``[B, 2 * cell]`` with a critic of its own).

        The sampling loop calls this once per step on a few rows, where torch's per-operator
        dispatch costs more than the arithmetic (as for the MLP's numpy path). It equals
        :meth:`forward` with ``T = 1`` up to float rounding; learning runs :meth:`forward`. A CNN
        encoder runs in torch. A critic of its own is stepped too (never its value head): the
        learner starts each sequence's critic from the state recorded when the policy acted. A
        trunk changed since it was built (:func:`~cairn.policy.mlp_actor_critic.mlp_activation`)
        steps through :meth:`forward` in torch.
        """
        n = self.cell_size
        views = self._numpy_views.get(self)
        if views is None:
            with torch.inference_mode(), evaluating(self):
                inputs, _, out = self(torch.from_numpy(obs)[:, None], [torch.from_numpy(s) for s in state])
            return inputs[:, 0].numpy(), [s.numpy() for s in out]
        (trunk, activation), lstm, head, log_std, critic = views
        x = obs if self.encoder is None else in_torch(self.encoder, obs, self.encoder)
        h, c = lstm_cell(dense_stack(x, trunk, activation), [state[0][:, :n], state[1][:, :n]], *lstm)
        out = affine(h, head, log_std)
        if critic is None:
            return out, [h, c]
        (critic_trunk, critic_activation), critic_lstm = critic
        x = obs if self.critic_encoder is None else in_torch(self.critic_encoder, obs, self.critic_encoder)
        h_v, c_v = lstm_cell(dense_stack(x, critic_trunk, critic_activation),
                             [state[0][:, n:], state[1][:, n:]], *critic_lstm)
        return out, [np.concatenate([h, h_v], axis=-1), np.concatenate([c, c_v], axis=-1)]

    def get_initial_state(self) -> list[torch.Tensor]:
        """``[h, c]``, zeros of ``[lstm_cell_size]`` each (``[2 * lstm_cell_size]`` with a critic
        of its own: the actor's LSTM's, then the critic's)."""
        size = self.cell_size if self.critic_lstm is None else 2 * self.cell_size
        return [torch.zeros(size), torch.zeros(size)]

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        h, c = state
        n = self.cell_size
        batch, steps = obs.shape[0], obs.shape[1]
        x = obs.reshape(batch * steps, *obs.shape[2:])
        out, (h_out, c_out) = self._sequence(x, batch, steps, self.encoder, self.trunk, self.lstm,
                                             h[:, :n], c[:, :n])
        inputs = self.action_head(out)
        if self.log_std is not None:
            inputs = torch.cat([inputs, self.log_std.expand_as(inputs)], dim=-1)
        if self.critic_lstm is None:
            value = self.value_head(out.detach() if self.vf_stop_gradient else out).squeeze(-1)
            return inputs, value, [h_out, c_out]
        assert self.critic_trunk is not None  # built together with critic_lstm
        out_v, (h_v, c_v) = self._sequence(x, batch, steps, self.critic_encoder, self.critic_trunk,
                                           self.critic_lstm, h[:, n:], c[:, n:])
        value = self.value_head(out_v).squeeze(-1)
        return inputs, value, [torch.cat([h_out, h_v], dim=-1), torch.cat([c_out, c_v], dim=-1)]

    @staticmethod
    def _sequence(x: torch.Tensor, batch: int, steps: int, encoder: nn.Module | None, trunk: nn.Module,
                  lstm: nn.LSTM, h: torch.Tensor, c: torch.Tensor
                  ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One tower over ``[B * T, ...]`` rows: ``(LSTM output [B, T, cell], (h, c) [B, cell])``."""
        if encoder is not None:
            x = encoder(x)
        features = trunk(x).reshape(batch, steps, -1)
        out, (h_out, c_out) = lstm(features, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
        return out, (h_out.squeeze(0), c_out.squeeze(0))


def _lstm_views(lstm: nn.LSTM, view: View) -> tuple[np.ndarray, ...]:
    w_ih, w_hh, b_ih, b_hh = (view(getattr(lstm, name)) for name in ("weight_ih_l0", "weight_hh_l0",
                                                                     "bias_ih_l0", "bias_hh_l0"))
    return w_ih.T, w_hh.T, b_ih, b_hh


_Trunk = tuple[list[Dense], str]  # a trunk's layers and the activation its modules run


def _dense_views(trunk: nn.Sequential, view: View, default: str) -> _Trunk | None:
    activation = mlp_activation(trunk, default)
    if activation is None:  # not the trunk mlp() built: only torch runs it as it is
        return None
    return [linear(m, view) for m in trunk if isinstance(m, nn.Linear)], activation


def _acting_views(model: LSTMActorCritic, view: View) -> tuple[
        _Trunk, tuple[np.ndarray, ...], Dense, np.ndarray | None,
        tuple[_Trunk, tuple[np.ndarray, ...]] | None] | None:
    """The actor's trunk, LSTM, head and log-std, and the critic's own trunk and LSTM if any
    (stepped while acting: its state is the learner's starting point; its value head is not);
    None when a trunk is no longer what :func:`mlp` built."""
    critic = None
    if model.critic_lstm is not None:
        assert model.critic_trunk is not None  # built together with critic_lstm
        critic_trunk = _dense_views(model.critic_trunk, view, model.activation)
        if critic_trunk is None:
            return None
        critic = (critic_trunk, _lstm_views(model.critic_lstm, view))
    trunk = _dense_views(model.trunk, view, model.activation)
    if trunk is None:
        return None
    return (trunk, _lstm_views(model.lstm, view), linear(model.action_head, view),
            None if model.log_std is None else view(model.log_std), critic)
