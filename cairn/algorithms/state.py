"""The schema of an Algorithm's state tree (``Algorithm.get_state()``), and its check.

The tree holds the class reference, the config, the counters and random generator, every
policy's state, the env runners' and the evaluation runner's states, the recent episodes
behind the metrics, and what a subclass adds, which it declares through two hooks rather than
being recognised: ``extra`` (:meth:`Algorithm.get_extra_state
<cairn.algorithms.algorithm.Algorithm.get_extra_state>`, small values such as DQN's replay
credit or PPO's reward normalisers) and ``components``
(:meth:`~cairn.algorithms.algorithm.Algorithm.get_components`, large parts stored as their own
checkpoint components, such as replay buffers); and ``league`` (cairn.league) when the
algorithm trains in a league. The Algorithm writes and reads the tree itself
(``get_state``/``set_state``); :data:`REQUIRED_KEYS` are the keys every tree holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from cairn.checkpoint.validate import require_counts, require_types
from cairn.core import AlgorithmLike
from cairn.errors import CheckpointError, CheckpointFormatError
from cairn.policy.policy import Policy
from cairn.policy.state_check import check_policy_state
from cairn.registry import resolve_class

__all__ = ["REQUIRED_KEYS", "check_algorithm_state"]

#: The keys every algorithm state holds, with their JSON types (``Algorithm.get_state`` writes
#: them; :func:`check_algorithm_state` requires them of a tree read from a checkpoint). The
#: others (``policies``, ``evaluation_runner``, ``extra``, ``components``) may be absent.
REQUIRED_KEYS: dict[str, type] = {
    "algorithm_class": str, "config": dict, "iteration": int, "counters": dict, "rng": dict,
    "policy_ids": list, "env_runners": list, "recent_episodes": list,
}


def check_algorithm_state(state: Mapping[str, Any], where: Any) -> None:
    """Check that an Algorithm state tree read from a checkpoint has what an Algorithm is built
    from (:data:`REQUIRED_KEYS`; its ``algorithm_class`` resolves to an algorithm), and each of
    its policies' states what a Policy is built from."""
    require_types(state, REQUIRED_KEYS, where, "algorithm")
    resolve_class(state["algorithm_class"], cast("type[Any]", AlgorithmLike))
    require_counts({"iteration": state["iteration"], **state["counters"]}, where, "algorithm")
    if not isinstance(state["config"].get("policies"), dict):
        raise CheckpointFormatError(f"{where}: the stored config has no 'policies' dict.")
    for pid, policy_state in (state.get("policies") or {}).items():
        try:
            check_policy_state(policy_state, where, base=Policy)
        except CheckpointError as exc:
            raise type(exc)(f"Policy {pid!r}: {exc}") from exc
