"""APPOPolicy: PPO's actor-critic policy with APPO's target network and adaptive KL weight."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from cairn.config.fields import number
from cairn.policy.policy import Policy
from cairn.policy.weights import check_target_state, load_weights, weights_to_numpy
from cairn.registry import register_class

__all__ = ["APPOPolicy"]


@register_class
class APPOPolicy(Policy):
    """cairn's actor-critic :class:`~cairn.policy.Policy` (same networks, masks, custom models,
    export) plus what APPO trains with beyond the weights:

    - ``target_model``: a frozen copy of the network, the policy ``pi_target`` that APPO's ratio
      and V-trace's importance weights are taken against; copied from the network every
      ``target_network_update_freq`` train batches (:meth:`update_target`).
    - ``kl_coeff``: the current weight of the KL penalty (starts at the config's ``kl_coeff``,
      adapted at each target update when ``use_kl_loss``).
    - ``num_train_batches``: train batches learnt, which phases the target updates.

    All three are part of the policy's state (``state["target"]``), so a checkpoint resumes
    exactly and a policy restored alone can go on training.
    """

    DEFAULT_CONFIG: dict[str, Any] = {**Policy.DEFAULT_CONFIG, "kl_coeff": 1.0}

    def check_setup(self, action_space: Any, config: Mapping[str, Any]) -> None:
        number(0.0, 1e6)("kl_coeff", config["kl_coeff"])

    def finish_setup(self) -> None:
        # A copy of the (initialised, or still empty when restoring) network: a restore
        # overwrites both from the saved state.
        self.target_model = copy.deepcopy(self.model)
        self.target_model.requires_grad_(False)
        # A target is a frozen estimate: eval mode always (a user's Dropout does not draw in it,
        # a BatchNorm reads the statistics it was copied with), as SB3 keeps its targets.
        self.target_model.train(False)
        self.kl_coeff = float(self.config["kl_coeff"])
        self.num_train_batches = 0

    def networks(self) -> list[torch.nn.Module]:
        return [self.model, self.target_model]

    def update_target(self) -> None:
        """Copy the network's weights into the target network."""
        self.target_model.load_state_dict(self.model.state_dict())

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        state = super().get_state(copy=copy)
        state["target"] = {"weights": weights_to_numpy(self.target_model, copy=copy),
                           "kl_coeff": self.kl_coeff, "num_train_batches": self.num_train_batches}
        return state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`Policy.check_state`, and the target part (``state["target"]``): weights that
        fit the target network, ``kl_coeff`` and ``num_train_batches``, so that a state refused
        for its target changes nothing (not the online weights either)."""
        super().check_state(state)
        check_target_state(self.target_model, state, ("kl_coeff", "num_train_batches"))

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        target = state["target"]
        load_weights(self.target_model, target["weights"])
        self.kl_coeff = float(target["kl_coeff"])
        self.num_train_batches = int(target["num_train_batches"])
