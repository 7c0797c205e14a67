"""Completing PolicySpecs from an environment's agents, and checking the agent mapping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.config.checks import spaces_equal
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.registry import resolve_class

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["resolve_policy_specs"]


def resolve_policy_specs(
    config: AlgorithmConfig,
    agents: Mapping[Any, tuple[Any, Any]],
    known: Mapping[str, PolicySpec],
    *,
    default_class: type[Policy],
) -> dict[str, PolicySpec]:
    """Fill in each PolicySpec's class and spaces, and check the agent -> policy mapping.

    Spaces come from the spec, else from ``known`` (existing or restored policies), else
    from the environment's agents mapped to the policy, which must all agree.
    """
    mapped: dict[str, list[Any]] = {pid: [] for pid in config.policies}
    for agent in agents:
        pid = config.map_agent(agent)
        if pid not in mapped:
            raise ConfigError(
                f"policy_mapping_fn maps agent {agent!r} to {pid!r}, which is not one of the "
                f"policies {sorted(mapped)}. Return one of those IDs, or pass a new "
                "policy_mapping_fn (e.g. to from_checkpoint(..., policy_mapping_fn=...)) when "
                "policies were dropped."
            )
        mapped[pid].append(agent)
    resolved = {}
    compared: dict[tuple[int, int], bool] = {}  # many agents usually share space objects

    def same(a: Any, b: Any) -> bool:
        key = (id(a), id(b))
        if key not in compared:
            compared[key] = a is b or spaces_equal(a, b)
        return compared[key]

    for pid, spec in config.policies.items():
        fallback = known.get(pid)
        obs_space = spec.observation_space or (fallback.observation_space if fallback else None)
        act_space = spec.action_space or (fallback.action_space if fallback else None)
        for agent in mapped[pid]:
            a_obs, a_act = agents[agent]
            for name, given, actual in (("observation", obs_space, a_obs), ("action", act_space, a_act)):
                if given is not None and not same(given, actual):
                    raise ConfigError(
                        f"Policy {pid!r} has {name} space {given}, but agent {agent!r} mapped "
                        f"to it has {actual}. Map agents with different spaces to different "
                        "policies, or fix the PolicySpec."
                    )
            obs_space, act_space = obs_space or a_obs, act_space or a_act
        if obs_space is None or act_space is None:
            raise ConfigError(
                f"Policy {pid!r} has no agents mapped to it, so its spaces cannot be inferred; "
                "give observation_space and action_space in its PolicySpec."
            )
        cls = spec.policy_class or (fallback.policy_class if fallback else None) or default_class
        if isinstance(cls, str):
            cls = resolve_class(cls, Policy)
        resolved[pid] = PolicySpec(cls, obs_space, act_space, config.policy_config(pid))
    return resolved
