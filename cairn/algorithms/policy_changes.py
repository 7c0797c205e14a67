"""``Algorithm.add_policy`` and ``remove_policy``: the new config, checked before anything
changes (the policy set, the mapping and the learning policies), then applied to the
algorithm's policies and runners."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cairn.algorithms.policy_specs import new_policy, probe_agents, record_specs, resolve_policy_specs
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.env_runner.make_env import close_env
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy_ids import check_policy_ids, validate_policy_id

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm

__all__ = [
    "add_policy",
    "apply_policy_change",
    "config_adding_policy",
    "config_removing_policy",
    "remove_policy",
]


def _remap(
    config: AlgorithmConfig, policy_mapping_fn: PolicyMapping | None,
    policies_to_train: Sequence[str] | None,
) -> AlgorithmConfig:
    if policy_mapping_fn is not None:
        config.multi_agent(policy_mapping_fn=policy_mapping_fn)
    if policies_to_train is not None:
        config.multi_agent(policies_to_train=policies_to_train)
    config.validate()
    return config


def config_adding_policy(
    config: AlgorithmConfig, policy_id: str, spec_or_policy: PolicySpec | Policy, *,
    policy_mapping_fn: PolicyMapping | None, policies_to_train: Sequence[str] | None,
) -> AlgorithmConfig:
    """A copy of ``config`` with ``policy_id`` added (its ID a safe directory name, unique
    ignoring case) and the mapping and learning policies replaced where given."""
    validate_policy_id(policy_id, error=True)
    check_policy_ids([*config.policies, policy_id])
    spec = spec_or_policy.spec if isinstance(spec_or_policy, Policy) else spec_or_policy
    if not isinstance(spec, PolicySpec):
        raise ConfigError(f"add_policy needs a PolicySpec or Policy, got {type(spec_or_policy).__name__}.")
    new_config = config.copy()
    new_config.policies = {**new_config.policies, policy_id: PolicySpec(
        spec.policy_class, spec.observation_space, spec.action_space, spec.config)}
    return _remap(new_config, policy_mapping_fn, policies_to_train)


def config_removing_policy(
    config: AlgorithmConfig, policy_id: str, *,
    policy_mapping_fn: PolicyMapping | None, policies_to_train: Sequence[str] | None,
) -> AlgorithmConfig:
    """A copy of ``config`` without ``policy_id`` (nor in ``policies_to_train`` unless new ones
    are given) and with the mapping replaced where given."""
    new_config = config.copy()
    new_config.policies = {k: v for k, v in new_config.policies.items() if k != policy_id}
    if policies_to_train is None and new_config.policies_to_train is not None:
        new_config.policies_to_train = [p for p in new_config.policies_to_train if p != policy_id]
    return _remap(new_config, policy_mapping_fn, policies_to_train)


def add_policy(
    algo: Algorithm, policy_id: str, spec_or_policy: PolicySpec | Policy, *,
    policy_mapping_fn: PolicyMapping | None, policies_to_train: Sequence[str] | None,
) -> Policy:
    """Behind :meth:`Algorithm.add_policy <cairn.algorithms.algorithm.Algorithm.add_policy>`:
    add ``spec_or_policy`` (a PolicySpec to build, or a Policy object) as ``policy_id``, and
    replace the mapping and the learning policies where given.

    The ID is validated (safe directory name, unique ignoring case), and the new mapping
    against the environment's agents, before anything changes. The episodes in flight keep
    their mapping; the new one applies from each env's next episode (docs/multi-agent.md).
    """
    new_config = config_adding_policy(algo.config, policy_id, spec_or_policy,
                                      policy_mapping_fn=policy_mapping_fn,
                                      policies_to_train=policies_to_train)
    apply_policy_change(algo, new_config, add=(policy_id, spec_or_policy))
    return algo.policies[policy_id]


def remove_policy(
    algo: Algorithm, policy_id: str, *,
    policy_mapping_fn: PolicyMapping | None, policies_to_train: Sequence[str] | None,
) -> None:
    """Behind :meth:`Algorithm.remove_policy
    <cairn.algorithms.algorithm.Algorithm.remove_policy>`: drop ``policy_id`` (``KeyError`` for
    an unknown ID); agents mapped to it need a new ``policy_mapping_fn``."""
    algo.get_policy(policy_id)  # KeyError for an unknown ID, before anything changes
    new_config = config_removing_policy(algo.config, policy_id,
                                        policy_mapping_fn=policy_mapping_fn,
                                        policies_to_train=policies_to_train)
    apply_policy_change(algo, new_config, remove=policy_id)


def apply_policy_change(
    algo: Algorithm, new_config: AlgorithmConfig, *,
    add: tuple[str, PolicySpec | Policy] | None = None, remove: str | None = None,
) -> None:
    """Give ``algo`` the checked ``new_config`` and its policy set: ``add`` (an ID with a spec
    to build, or a Policy object), ``remove`` (an ID); then tell the runners.

    The mapping is checked against the environment's agents first; if that fails, ``algo``
    keeps its old config and nothing has changed.
    """
    old_config = algo.config
    algo.config = new_config
    known = {pid: p.spec for pid, p in algo.policies.items()}
    if add is not None and isinstance(add[1], Policy):
        known[add[0]] = add[1].spec
    env = None
    try:
        env, agents = probe_agents(new_config)
        resolved = resolve_policy_specs(new_config, agents, known,
                                        default_class=algo.default_policy_class)
    except Exception:
        algo.config = old_config
        raise
    finally:
        close_env(env)
    if remove is not None:
        algo.policies.pop(remove)
    if add is not None:
        pid, obj = add
        algo.policies[pid] = obj if isinstance(obj, Policy) else new_policy(new_config, pid, resolved[pid])
    record_specs(new_config, resolved)
    algo.env_runner_group.update_policies(new_config, algo.policies)
    if algo.evaluation_runner is not None:
        algo.evaluation_runner.update_policies(new_config, algo.policies)
