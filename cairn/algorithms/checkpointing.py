"""What Algorithm's checkpoint and export entry points do, apart from the class body.

``Algorithm.from_state`` rebuilds an algorithm from a state tree (``from_checkpoint`` reads one
and calls it); ``export_policy_checkpoint`` and ``export_policy_model`` write one policy on its
own, through the policy's :meth:`~cairn.policy.policy.Policy.export_checkpoint` and
:meth:`~cairn.policy.policy.Policy.export_model`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cairn.config.algorithm_config import PolicyMapping
from cairn.config.restore import restored_config
from cairn.errors import UnknownPolicyIdError
from cairn.registry import resolve_class

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.policy.policy import Policy

__all__ = ["algorithm_from_state", "policy_to_export"]


def algorithm_from_state(
    state: Mapping[str, Any],
    *,
    policy_ids: str | Sequence[str] | None,
    policy_mapping_fn: PolicyMapping | None,
    policies_to_train: Sequence[str] | None,
    config_overrides: Mapping[str, Any] | None,
    copy: bool,
) -> Algorithm:
    """The body of :meth:`Algorithm.from_state <cairn.algorithms.algorithm.Algorithm.from_state>`:
    the stored class, built from the restored config and the kept policies' states, then given
    the rest of the state."""
    from cairn.algorithms.algorithm import Algorithm

    algo_cls = resolve_class(state["algorithm_class"], Algorithm)
    config = restored_config(state, policy_ids, policy_mapping_fn, policies_to_train,
                             config_overrides)
    policy_states = {pid: s for pid, s in state["policies"].items() if pid in config.policies}
    algo = algo_cls(config, _policy_states=policy_states, _copy_states=copy)
    algo.set_state({**state, "policies": {}})
    return algo


def policy_to_export(policies: Mapping[str, Policy], policy_id: str, call: str) -> Policy:
    """``policies[policy_id]``, or :class:`~cairn.errors.UnknownPolicyIdError` naming ``call``,
    the ID and the IDs there are."""
    if policy_id not in policies:
        raise UnknownPolicyIdError(
            f"{call}: this algorithm has no policy {policy_id!r}; its policies are "
            f"{sorted(policies)}. Pass one of those as policy_id=..."
        )
    return policies[policy_id]
