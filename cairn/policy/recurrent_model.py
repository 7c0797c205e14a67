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
from cairn.numpy_program import NUMPY_ACTIVATIONS, StorageWatch
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.model import VF_STOP_GRADIENT_NEEDS_SHARING, mlp

__all__ = ["LSTMActorCritic"]

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|, unlike 1 / (1 + exp(-x))


def _numpy_lstm_step(x: np.ndarray, h: np.ndarray, c: np.ndarray,
                     views: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One step of a one-layer torch LSTM in numpy: ``(h, c)`` after ``x`` from ``(h, c)``."""
    w_ih, w_hh, b_ih, b_hh = views
    gates = x @ w_ih + h @ w_hh + (b_ih + b_hh)
    i, f, g, o = np.split(gates, 4, axis=-1)  # torch's gate order: input, forget, cell, output
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


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
        #: Views of the acting parameters, and the watch that says when to take them again.
        self._numpy_views: tuple[StorageWatch, dict[str, Any]] | None = None
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
        """One acting step in numpy on views of the live parameters: ``(action_inputs [B, n],
        [h, c])`` for processed ``obs`` ``[B, d]`` and ``state`` ``[h, c]`` (``[B, cell]`` each,
        ``[B, 2 * cell]`` with a critic of its own).

        The sampling loop calls this once per step on a few rows, where torch's per-operator
        dispatch costs more than the arithmetic (as for the MLP's numpy path). It equals
        :meth:`forward` with ``T = 1`` up to float rounding; learning runs :meth:`forward`. A CNN
        encoder runs in torch. A critic of its own is stepped too (never its value head): the
        learner starts each sequence's critic from the state recorded when the policy acted.
        """
        # Views share memory with the parameters, so updates show; taken again when a parameter
        # was replaced or moved (StorageWatch).
        if self._numpy_views is None or self._numpy_views[0].moved():
            self._numpy_views = self._take_numpy_views()
        views = self._numpy_views[1]
        n = self.cell_size
        x = self._numpy_features(obs, self.encoder, views["trunk"])
        h, c = _numpy_lstm_step(x, state[0][:, :n], state[1][:, :n], views["lstm"])
        w_out, b_out = views["head"]
        out = h @ w_out + b_out
        if self.log_std is not None:
            out = np.concatenate([out, np.broadcast_to(self.log_std.detach().numpy(), out.shape)], axis=-1)
        if self.critic_lstm is None:
            return out, [h, c]
        x = self._numpy_features(obs, self.critic_encoder, views["critic_trunk"])
        h_v, c_v = _numpy_lstm_step(x, state[0][:, n:], state[1][:, n:], views["critic_lstm"])
        return out, [np.concatenate([h, h_v], axis=-1), np.concatenate([c, c_v], axis=-1)]

    def _numpy_features(self, obs: np.ndarray, encoder: nn.Module | None,
                        trunk: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        x = obs
        if encoder is not None:
            with torch.inference_mode():
                x = encoder(torch.from_numpy(obs)).numpy()
        act = NUMPY_ACTIVATIONS[self.activation]
        for w, b in trunk:
            x = act(x @ w + b)
        return x

    def _take_numpy_views(self) -> tuple[StorageWatch, dict[str, Any]]:
        def view(t: Any) -> np.ndarray:
            return t.detach().numpy()  # type: ignore[no-any-return]

        def linears(trunk: nn.Module | None) -> list[nn.Linear]:
            return [] if trunk is None else [m for m in trunk.modules() if isinstance(m, nn.Linear)]

        def lstm_views(lstm: nn.LSTM) -> list[np.ndarray]:
            return [view(lstm.weight_ih_l0).T, view(lstm.weight_hh_l0).T, view(lstm.bias_ih_l0),
                    view(lstm.bias_hh_l0)]

        watched = [self, *linears(self.trunk), self.lstm, self.action_head]
        views: dict[str, Any] = {
            "trunk": [(view(m.weight).T, view(m.bias)) for m in linears(self.trunk)],
            "lstm": lstm_views(self.lstm),
            "head": [view(self.action_head.weight).T, view(self.action_head.bias)],
        }
        if self.critic_lstm is not None:
            watched += [*linears(self.critic_trunk), self.critic_lstm]
            views["critic_trunk"] = [(view(m.weight).T, view(m.bias)) for m in linears(self.critic_trunk)]
            views["critic_lstm"] = lstm_views(self.critic_lstm)
        return StorageWatch(watched, recurse=False), views

    def _apply(self, fn: Any, recurse: bool = True) -> LSTMActorCritic:
        self._numpy_views = None  # parameters may be replaced (to_empty, .to(), ...)
        super()._apply(fn, recurse)
        return self

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
