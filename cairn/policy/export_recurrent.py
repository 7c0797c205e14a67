"""The export graph of a recurrent policy: one step of the network, the state in and out.

Inputs: ``obs`` as for every policy, then ``state_in_h`` (and ``state_in_c`` for an LSTM),
float32 ``[batch, *shape]``: the state before this step, zeros at an episode's start (the
policy's ``get_initial_state()``, also written into ``signature.json``). Outputs: ``action``
(as ``compute_actions(obs, state=..., explore=False)`` gives it), the distribution's inputs
(``logits``, or ``mean`` and ``log_std``), then ``state_out_h`` (and ``state_out_c``), the
state to feed with the next observation of the same episode, and the optional ``value``.
docs/export.md shows the loop in plain onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from cairn.errors import ExportError
from cairn.numpy_acting import evaluating
from cairn.policy.action_mask_input import network_name
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.export_actor_critic import ActorCriticModule, actor_critic_outputs, discrete_sizes
from cairn.policy.export_hook import BATCH, ExportedPolicy, ExportGraph, TensorSpec
from cairn.policy.observation_path import example_input, filter_description, input_spec
from cairn.rng import check_inputs_rng

__all__ = ["recurrent_export_graph", "STATE_NAMES"]

#: The names of the state components (an LSTM's h and c; a GRU's h alone).
STATE_NAMES = ("h", "c")


class RecurrentActorCriticModule(ActorCriticModule):
    """``forward(obs, state_in_h, state_in_c=None) -> (action, *distribution inputs,
    state_out_h[, state_out_c], value)``, or the outputs at ``keep``."""

    def __init__(self, policy: ExportedPolicy, keep: Sequence[int] | None = None) -> None:
        super().__init__(policy)
        self.keep = None if keep is None else tuple(keep)

    def select_outputs(self, keep: Sequence[int]) -> RecurrentActorCriticModule:
        """This module returning only the outputs at ``keep`` (same parameters)."""
        selected = RecurrentActorCriticModule.__new__(RecurrentActorCriticModule)
        selected.__dict__.update(self.__dict__)
        selected.keep = tuple(keep)
        return selected

    def forward(self, obs: torch.Tensor, state_in_h: torch.Tensor,  # type: ignore[override]
                state_in_c: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        x = self.observations(obs, None)
        state = [state_in_h] if state_in_c is None else [state_in_h, state_in_c]
        if self.observations.copy_input:  # a user's model may write into its state, as into obs
            state = [s.clone() for s in state]
        inputs, value, state_out = self.model(x.unsqueeze(1), state)
        inputs, value = inputs[:, 0], value[:, 0]
        action = self.to_env(self.dist.deterministic(inputs))
        heads = (inputs[:, : self.size], inputs[:, self.size :]) if isinstance(self.dist, DiagGaussian) \
            else (inputs,)
        outputs = (action, *heads, *state_out, value)
        return outputs if self.keep is None else tuple(outputs[i] for i in self.keep)


def recurrent_export_graph(policy: ExportedPolicy) -> ExportGraph:
    """The export graph of a recurrent actor-critic policy (see the module doc); raises
    ExportError for a state of more than two components or an unsupported distribution."""
    init = policy.get_initial_state()
    if not 1 <= len(init) <= len(STATE_NAMES):
        raise ExportError(
            f"The recurrent model {network_name(policy.model)} has {len(init)} state components; "
            f"exported models take one (h) or two (h, c). Pack the state into at most two tensors.")
    dist = policy.dist
    if not isinstance(dist, (Categorical, MultiCategorical, DiagGaussian)):
        raise ExportError(f"Cannot export action distribution {type(dist).__name__}: supported are "
                          "Categorical, MultiCategorical and DiagGaussian.")
    names = STATE_NAMES[: len(init)]
    shapes = [tuple(s.shape) for s in init]
    state_inputs = tuple(TensorSpec(
        f"state_in_{n}", "float32", (BATCH, *shape),
        f"The recurrent state {n} before this step: the previous step's state_out_{n} in the same "
        "episode; at an episode's start the initial state (signature.json 'recurrent', zeros for "
        "use_lstm).") for n, shape in zip(names, shapes))
    state_outputs = tuple(TensorSpec(
        f"state_out_{n}", "float32", (BATCH, *shape),
        f"The recurrent state {n} after this step: feed it as state_in_{n} with the episode's next "
        "observation.") for n, shape in zip(names, shapes))
    *action_outputs, value = actor_critic_outputs(policy.action_space)

    def reference(observations: Sequence[Any], *state: np.ndarray) -> list[np.ndarray]:
        action, state_out = policy.compute_actions(observations, state=list(state), explore=False)
        x = torch.from_numpy(policy.process_observations(observations, update=False)).unsqueeze(1)
        # Copies of the state, as the policy acts on: a model may write into its inputs, and these
        # arrays are fed to the exported model next.
        copies = [torch.from_numpy(np.array(s, dtype=np.float32)) for s in state]
        with torch.inference_mode(), evaluating(policy.model):  # as the policy acts, and the export runs
            inputs, values, _ = policy.model(x, copies)
        inputs, values = inputs[:, 0].numpy(), values[:, 0].numpy()
        if isinstance(dist, DiagGaussian):
            heads = [inputs[:, : dist.size], inputs[:, dist.size :]]
        else:
            heads = [inputs]
        return [action, *heads, *state_out, values]

    def check_inputs(n: int, seed: int) -> tuple[np.ndarray, ...]:
        rng = check_inputs_rng(seed)
        return tuple((0.5 * rng.standard_normal((n, *shape))).astype(np.float32) for shape in shapes)

    example = example_input(policy)
    rows = int(example.shape[0])
    return ExportGraph(
        module=RecurrentActorCriticModule(policy),
        input=input_spec(policy.network_observation_space),
        outputs=(*action_outputs, *state_outputs, value),
        example=example,
        reference=reference,
        discrete_sizes=discrete_sizes(dist),
        network_name=network_name(policy.model),
        metadata={"observation_filter": filter_description(policy),
                  "recurrent": {"state_inputs": [s.name for s in state_inputs],
                                "state_outputs": [s.name for s in state_outputs],
                                "state_shapes": [list(s) for s in shapes],
                                "initial_state": [s.tolist() for s in init]}},
        extra_inputs=state_inputs,
        extra_examples=tuple(torch.zeros((rows, *shape)) for shape in shapes),
        check_inputs=check_inputs,
    )
