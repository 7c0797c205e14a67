"""Export graphs: a policy's observation-to-output path as one traceable torch module.

:meth:`cairn.Policy.export_graph` is the export hook: a policy describes, in torch, what its
own acting path computes, and :mod:`cairn.export` traces that module into a ``torch.export``
program and ONNX, writes ``signature.json`` and checks the files against the policy. The
export layer knows nothing else about a policy; a policy with another network or action path
overrides the hook (``DQNPolicy`` does).

The model's input (see :func:`input_spec`) is the raw observation, flattened where the space
is not an array, so the graph repeats the policy's numpy preprocessing in torch with the same
constants: flatten / one-hot, then the observation filter's current mean, inverse std and
clip (:mod:`cairn.policy.observation_path`). What a graph holds (:class:`ExportGraph`,
:class:`TensorSpec`) and the exporter registry are in :mod:`cairn.policy.export_hook`; this
module re-exports them. :func:`actor_critic_export_graph`, defined here, covers the
actor-critic policies: ``(action, logits | mean + log_std, value)`` through
``model.action_inputs`` and ``model.value`` and the distribution's deterministic action (the
module is :class:`~cairn.policy.export_actor_critic.ActorCriticModule`); recurrent ones take
and return their state (:mod:`cairn.policy.export_recurrent`).
DQN's own builder lives with it (``cairn.algorithms.dqn.export``); SAC's and TD3's is
``cairn.algorithms.box_actor_export``.

Graphs are built for small single-observation latency in onnxruntime: no node that computes
nothing (a reshape of an already flat input, a cast to the dtype a tensor has, a ``+ 0``).
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
from cairn.policy.export_hook import (
    BATCH,
    ExportedPolicy,
    ExportGraph,
    TensorSpec,
)
from cairn.policy.export_recurrent import recurrent_export_graph
from cairn.policy.observation_path import (
    ObservationPath,
    example_input,
    filter_description,
    input_spec,
    policy_export_graph,
)

# The data types and the observation path live in their own modules (export_hook,
# observation_path); they are re-exported here, where the export hook's users look for them.
__all__ = [
    "BATCH",
    "TensorSpec",
    "ExportGraph",
    "ObservationPath",
    "input_spec",
    "example_input",
    "filter_description",
    "actor_critic_export_graph",
    "actor_critic_outputs",
    "ActorCriticModule",
]


def actor_critic_export_graph(policy: ExportedPolicy) -> ExportGraph:
    """The export graph of an actor-critic :class:`~cairn.Policy`.

    Outputs: ``action`` (as ``compute_actions(obs, explore=False)`` returns it), the action
    distribution's inputs (``logits``, or ``mean`` and ``log_std``) and ``value`` (optional:
    exported only when asked for, see :meth:`ExportGraph.with_outputs`). Inputs: ``obs``, and
    ``action_mask`` for a masked policy (whose ``logits`` are masked as the policy's). A
    recurrent policy's graph also takes and returns its state
    (:func:`cairn.policy.export_recurrent.recurrent_export_graph`). Raises
    ExportError when the model lacks ``action_inputs(obs)``/``value(obs)`` or the
    distribution is not Categorical, MultiCategorical or DiagGaussian.
    """
    if policy.recurrent is not None:  # state inputs and outputs (docs/export.md, "Recurrent policies")
        return recurrent_export_graph(policy)
    model = policy.model
    if not (callable(getattr(model, "action_inputs", None)) and callable(getattr(model, "value", None))):
        raise ExportError(
            f"{type(policy).__name__}'s model {network_name(model)} has no "
            "action_inputs(obs) and value(obs) methods; exported models call both. Add "
            "them to the model returned by make_model(), or override export_graph()."
        )
    dist = policy.dist
    if not isinstance(dist, (Categorical, MultiCategorical, DiagGaussian)):
        raise ExportError(
            f"Cannot export action distribution {type(dist).__name__}: supported are "
            "Categorical, MultiCategorical and DiagGaussian; override export_graph()."
        )

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        action = policy.compute_actions(observations, explore=False)
        x = policy.process_observations(observations, update=False)
        with torch.inference_mode(), evaluating(model):  # as the policy acts, and the export runs
            # The methods checked above (cairn.models.ActorCriticModel's), unseen on torch.nn.Module;
            # each on its own copy, as the policy calls them (a model may write into its input).
            inputs = model.action_inputs(torch.from_numpy(x.copy())).numpy()  # type: ignore[operator]
            value = model.value(torch.from_numpy(x.copy())).numpy()  # type: ignore[operator]
        if isinstance(dist, DiagGaussian):
            return [action, inputs[:, : dist.size], inputs[:, dist.size :], value]
        return [action, inputs, value]

    return policy_export_graph(policy, ActorCriticModule(policy),
                               outputs=actor_critic_outputs(policy.action_space), reference=reference,
                               discrete_sizes=discrete_sizes(dist), network_name=network_name(model))
