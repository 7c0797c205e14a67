"""APPOPolicy: PPO's actor-critic policy with APPO's target network and adaptive KL weight."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.config.fields import number
from cairn.policy.policy import Policy
from cairn.policy.target_network import TargetNetworkPolicy
from cairn.registry import register_class

__all__ = ["APPOPolicy"]


@register_class
class APPOPolicy(TargetNetworkPolicy):
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
    target_numbers = {"kl_coeff": ("kl_coeff", float), "num_train_batches": ("num_train_batches", int)}

    def check_setup(self, action_space: Any, config: Mapping[str, Any]) -> None:
        number(0.0, 1e6)("kl_coeff", config["kl_coeff"])

    def finish_setup(self) -> None:
        super().finish_setup()
        self.kl_coeff = float(self.config["kl_coeff"])
        self.num_train_batches = 0
