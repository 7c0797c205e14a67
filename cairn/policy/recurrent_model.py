"""PPO's built-in network with memory: ``model={"use_lstm": True}`` (RLlib's keys).

The encoder (CNN for images, when there are any) and the MLP of ``hidden`` read each step's
observation; an LSTM of ``lstm_cell_size`` units reads their features; the action head and
the value head read the LSTM's output: actor and critic share the trunk and the LSTM. With
``vf_share_layers=True`` both losses train them (RLlib's LSTM wrapper); with the default
``False`` the value head reads the LSTM's output with its gradient stopped, so only the policy
loss trains the trunk and the LSTM (sb3-contrib's ``shared_lstm=True``): on CartPole with the
velocities hidden the value loss's larger gradients otherwise swamp the policy's.
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

from cairn.models import RecurrentActorCriticModel
from cairn.numpy_program import NUMPY_ACTIVATIONS, StorageWatch
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.model import mlp

__all__ = ["LSTMActorCritic"]

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|, unlike 1 / (1 + exp(-x))


class LSTMActorCritic(RecurrentActorCriticModel):
    """Encoder + MLP (``trunk.*``), ``lstm.*``, ``action_head``, ``value_head`` (its gradient
    reaches the LSTM only with ``vf_share_layers``) and, for Box actions, a state-independent
    ``log_std``; ``forward(obs [B, T, d], [h, c]) ->
    (action_inputs [B, T, n], value [B, T], [h, c])`` with ``h``, ``c`` of ``[B, cell]``."""

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
        free_log_std: bool,
        log_std_init: float,
        encoder: Mapping[str, Any] | None,
    ) -> None:
        super().__init__(observation_space, action_space, num_outputs, {})
        self.cell_size = int(cell_size)
        self.activation = activation
        #: Views of the acting parameters, and the watch that says when to take them again.
        self._numpy_views: tuple[StorageWatch, dict[str, Any]] | None = None
        self.vf_share_layers = bool(vf_share_layers)
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

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Orthogonal init as the MLP's (hidden gain sqrt(2), action head 0.01, value head 1);
        the LSTM's weight matrices orthogonal with gain 1 and zero biases (as SB3-contrib's)."""
        heads: dict[nn.Module, float] = {self.action_head: 0.01, self.value_head: 1.0}
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)) and module.bias is not None:
                nn.init.orthogonal_(module.weight, gain=heads.get(module, 2**0.5), generator=generator)
                nn.init.zeros_(module.bias)
        for name, param in self.lstm.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, gain=1.0, generator=generator)
            else:
                nn.init.zeros_(param)

    def numpy_step(self, obs: np.ndarray, state: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One acting step in numpy on views of the live parameters: ``(action_inputs [B, n],
        [h, c])`` for processed ``obs`` ``[B, d]`` and ``state`` ``[h, c]`` (``[B, cell]`` each).

        The sampling loop calls this once per step on a few rows, where torch's per-operator
        dispatch costs more than the arithmetic (as for the MLP's numpy path). It equals
        :meth:`forward` with ``T = 1`` up to float rounding; learning runs :meth:`forward`. A CNN
        encoder runs in torch.
        """
        x = obs
        if self.encoder is not None:
            with torch.inference_mode():
                x = self.encoder(torch.from_numpy(obs)).numpy()
        # Views share memory with the parameters, so updates show; taken again when a parameter
        # was replaced or moved (StorageWatch).
        if self._numpy_views is None or self._numpy_views[0].moved():
            def view(t: Any) -> np.ndarray:
                return t.detach().numpy()  # type: ignore[no-any-return]

            linears = [m for m in self.trunk if isinstance(m, nn.Linear)]
            self._numpy_views = (StorageWatch([self, *linears, self.lstm, self.action_head], recurse=False), {
                "trunk": [(view(m.weight).T, view(m.bias)) for m in linears],
                "lstm": [view(self.lstm.weight_ih_l0).T, view(self.lstm.weight_hh_l0).T,
                         view(self.lstm.bias_ih_l0), view(self.lstm.bias_hh_l0)],
                "head": [view(self.action_head.weight).T, view(self.action_head.bias)],
            })
        views = self._numpy_views[1]
        act = NUMPY_ACTIVATIONS[self.activation]
        for w, b in views["trunk"]:
            x = act(x @ w + b)
        w_ih, w_hh, b_ih, b_hh = views["lstm"]
        gates = x @ w_ih + state[0] @ w_hh + (b_ih + b_hh)
        i, f, g, o = np.split(gates, 4, axis=-1)  # torch's gate order: input, forget, cell, output
        c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        w_out, b_out = views["head"]
        out = h @ w_out + b_out
        if self.log_std is not None:
            out = np.concatenate([out, np.broadcast_to(self.log_std.detach().numpy(), out.shape)], axis=-1)
        return out, [h, c]

    def _apply(self, fn: Any, recurse: bool = True) -> LSTMActorCritic:
        self._numpy_views = None  # parameters may be replaced (to_empty, .to(), ...)
        super()._apply(fn, recurse)
        return self

    def get_initial_state(self) -> list[torch.Tensor]:
        """``[h, c]``, zeros of ``[lstm_cell_size]`` each."""
        return [torch.zeros(self.cell_size), torch.zeros(self.cell_size)]

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        h, c = state
        batch, steps = obs.shape[0], obs.shape[1]
        x = obs.reshape(batch * steps, *obs.shape[2:])
        if self.encoder is not None:
            x = self.encoder(x)
        features = self.trunk(x).reshape(batch, steps, -1)
        out, (h_out, c_out) = self.lstm(features, (h.unsqueeze(0), c.unsqueeze(0)))
        inputs = self.action_head(out)
        if self.log_std is not None:
            inputs = torch.cat([inputs, self.log_std.expand_as(inputs)], dim=-1)
        value = self.value_head(out if self.vf_share_layers else out.detach()).squeeze(-1)
        return inputs, value, [h_out.squeeze(0), c_out.squeeze(0)]
