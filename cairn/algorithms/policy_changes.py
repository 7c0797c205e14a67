"""``Algorithm.add_policy`` and ``remove_policy``: the new config (the policy set, the mapping
and the learning policies) and the new policy set, both checked and built before the algorithm
takes them and tells its runners."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn.algorithms.policy_specs import new_policy, probe_agents, record_specs, resolve_policy_specs
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.env_runner.make_env import close_env, is_turn_based_env
from cairn.env_runner.recurrent_state import refuse_recurrent_policies
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy_ids import check_policy_ids, validate_policy_id

__all__ = ["config_adding_policy", "config_removing_policy", "policies_after_change"]


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
    """A copy of ``config`` with ``policy_id`` added (its ID a safe directory name, new, and
    unique ignoring case) and the mapping and learning policies replaced where given."""
    validate_policy_id(policy_id, error=True)
    if policy_id in config.policies:  # replacing it would drop its weights and training state silently
        raise ConfigError(f"add_policy({policy_id!r}, ...): a policy with that ID already exists. Choose "
                          f"another ID, or call remove_policy({policy_id!r}) first to replace it.")
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


def _refuse_an_alias(policies: Mapping[str, Policy], policy_id: str, policy: Policy) -> None:
    """A ConfigError when ``policy`` (to be added as ``policy_id``) is already one of
    ``policies``: one object under two IDs shares weights, optimizer and observation filter, so
    a "frozen" copy would go on learning with the other, and a checkpoint (which saves each ID
    apart) would restore two objects that act differently from the live run."""
    for pid, existing in policies.items():
        if existing is policy:
            raise ConfigError(
                f"add_policy({policy_id!r}, ...): that Policy object is already this algorithm's "
                f"policy {pid!r}; under two IDs it would share its weights, optimizer and observation "
                f"filter (a frozen copy would keep learning). Fix: add a copy, "
                f"Policy.from_state(algo.get_policy({pid!r}).get_state()), or map the agents to "
                f"{pid!r} to share it.")


def policies_after_change(
    policies: Mapping[str, Policy], new_config: AlgorithmConfig, *, default_class: type[Policy],
    add: tuple[str, PolicySpec | Policy] | None = None, remove: str | None = None,
) -> dict[str, Policy]:
    """The policy set the checked ``new_config`` describes: ``policies`` without ``remove`` (an
    ID) and with ``add`` (an ID with a spec to build, or a Policy object) last; the resolved
    specs are recorded in ``new_config``. Behind :meth:`Algorithm.add_policy
    <cairn.algorithms.algorithm.Algorithm.add_policy>` and ``remove_policy``, which then give
    the algorithm ``new_config`` and this set and tell its runners.

    The mapping is checked against the environment's agents and the new policy is built
    before anything is returned (a recurrent one is refused for a turn-based environment, as
    when building); if either fails, ``policies`` is as it was.
    """
    if add is not None and isinstance(add[1], Policy):
        _refuse_an_alias(policies, add[0], add[1])
    known = {pid: p.spec for pid, p in policies.items()}
    if add is not None and isinstance(add[1], Policy):
        known[add[0]] = add[1].spec
    env = None
    try:
        env, agents = probe_agents(new_config)
        resolved = resolve_policy_specs(new_config, agents, known, default_class=default_class)
        turn_based = is_turn_based_env(env)
    finally:
        close_env(env)
    changed = {pid: policy for pid, policy in policies.items() if pid != remove}
    if add is not None:
        pid, obj = add
        changed[pid] = obj if isinstance(obj, Policy) else new_policy(new_config, pid, resolved[pid])
        if turn_based:  # as building refuses them (the runners carry no state there)
            refuse_recurrent_policies({pid: changed[pid]})
    record_specs(new_config, resolved)
    return changed
