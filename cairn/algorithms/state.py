"""An Algorithm as a state tree, and back: the layout of ``Algorithm.get_state()``.

The tree holds the class reference, the config, the counters and random generator, every
policy's state, the env runners' and the evaluation runner's states, the recent episodes
behind the metrics, and two subclass hooks: ``extra`` (:meth:`Algorithm.get_extra_state
<cairn.algorithms.algorithm.Algorithm.get_extra_state>`, small values such as DQN's replay
credit) and ``components`` (:meth:`~cairn.algorithms.algorithm.Algorithm.get_components`,
large parts stored as their own checkpoint components, such as replay buffers), and
``league`` (cairn.league) when the algorithm trains in a league.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from cairn.checkpoint.validate import require_counts, require_types
from cairn.core import AlgorithmLike
from cairn.errors import CheckpointError, CheckpointFormatError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy.state_check import check_policy_state
from cairn.policy_ids import check_policy_ids
from cairn.registry import class_reference, resolve_class
from cairn.rng import rng_state, set_rng_state

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm

__all__ = ["algorithm_state", "set_algorithm_state", "check_algorithm_state", "REQUIRED_KEYS"]

#: The keys every algorithm state holds, with their JSON types (:func:`algorithm_state` writes
#: them; :func:`check_algorithm_state` requires them of a tree read from a checkpoint). The
#: others (``policies``, ``evaluation_runner``, ``extra``, ``components``) may be absent.
REQUIRED_KEYS: dict[str, type] = {
    "algorithm_class": str, "config": dict, "iteration": int, "counters": dict, "rng": dict,
    "policy_ids": list, "env_runners": list, "recent_episodes": list,
}


def algorithm_state(algo: Algorithm, *, copy: bool = True) -> dict[str, Any]:
    """The state tree of ``algo`` (:meth:`Algorithm.get_state
    <cairn.algorithms.algorithm.Algorithm.get_state>`), from its public attributes and hooks.

    ``copy=False`` may return views of live arrays (policy weights, a replay buffer), for a
    caller that writes them at once.
    """
    return {
        "algorithm_class": class_reference(type(algo)),
        "config": algo.config.to_dict(),
        "iteration": algo.iteration,
        "counters": dict(algo.counters),
        "rng": rng_state(algo.rng),
        "policy_ids": list(algo.policies),
        "policies": {pid: p.get_state(copy=copy) for pid, p in algo.policies.items()},
        "env_runners": algo.env_runner_group.get_state(),
        "evaluation_runner": algo.get_evaluation_runner_state(),
        "recent_episodes": list(algo.recent_episodes),
        "extra": algo.get_extra_state(),
        "components": algo.get_components(copy=copy),
        **({} if algo.league is None else {"league": algo.league.get_state()}),
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


def set_algorithm_state(algo: Algorithm, state: Mapping[str, Any]) -> None:
    """Load ``state`` (from :func:`algorithm_state`) into ``algo`` in place, through its public
    attributes and hooks (:meth:`Algorithm.set_state
    <cairn.algorithms.algorithm.Algorithm.set_state>`).

    Policies in the state replace those with the same ID; new IDs are added (with their spec
    in the config, and known to the env runners) but no agent is mapped to them unless the
    current ``policy_mapping_fn`` does so. The rest of ``algo``'s config is kept.
    """
    added = []
    for pid, policy_state in state.get("policies", {}).items():
        if pid in algo.policies:
            algo.policies[pid].set_state(policy_state)
        else:
            check_policy_ids([*algo.policies, pid])
            policy = Policy.from_state(policy_state)
            algo.policies[pid] = policy
            algo.config.policies[pid] = PolicySpec(
                type(policy), policy.observation_space, policy.action_space,
                policy_state["spec"].get("config"))
            added.append(pid)
    if added:
        algo.env_runner_group.update_policies(algo.config, algo.policies)
    algo.iteration = int(state["iteration"])
    algo.counters.update({k: int(v) for k, v in state["counters"].items()})
    set_rng_state(algo.rng, state["rng"])
    algo.env_runner_group.set_state(list(state.get("env_runners") or []))
    algo.set_evaluation_runner_state(state.get("evaluation_runner"))
    episodes = algo.recent_episodes  # cleared in place: the window's length stays
    episodes.clear()
    episodes.extend(state.get("recent_episodes") or [])
    if algo.league is not None and state.get("league") is not None:
        algo.league.set_state(state["league"], algo.policies)
    algo.set_extra_state(state.get("extra") or {})
    algo.set_components(state.get("components") or {})
