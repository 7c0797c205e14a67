"""Building an algorithm's policies: completing PolicySpecs from an environment's agents,
checking the agent mapping, and making (or restoring) each policy."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from cairn.env_runner.env_runner import DEFAULT_AGENT_ID
from cairn.env_runner.make_env import env_agents, make_env
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy_ids import check_mapped_policy_id
from cairn.registry import resolve_class
from cairn.rng import policy_init_seed
from cairn.space_json import mismatched_space, spaces_equal

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["probe_agents", "resolve_policy_specs", "new_policy", "build_policies", "record_specs"]


def probe_agents(config: AlgorithmConfig) -> tuple[Any, dict[Any, tuple[Any, Any]]]:
    """Create one env and return it with ``{agent_id: (observation_space, action_space)}``.

    The caller keeps the env for its local env runner to reuse (building a large multi-agent
    env twice was most of a partial restore's time).
    """
    env = make_env(config)
    return env, env_agents(env, DEFAULT_AGENT_ID)


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
        mapped[check_mapped_policy_id(agent, config.map_agent(agent), mapped)].append(agent)
    resolved = {}
    compared: dict[tuple[int, int], bool] = {}  # many agents usually share space objects

    def same(a: Any, b: Any) -> bool:
        key = (id(a), id(b))
        if key not in compared:
            compared[key] = spaces_equal(a, b)
        return compared[key]

    for pid, spec in config.policies.items():
        fallback = known.get(pid)
        obs_space = spec.observation_space or (fallback.observation_space if fallback else None)
        act_space = spec.action_space or (fallback.action_space if fallback else None)
        for agent in mapped[pid]:
            a_obs, a_act = agents[agent]
            mismatch = mismatched_space((obs_space, act_space), (a_obs, a_act), equal=same)
            if mismatch is not None:
                name, given, actual = mismatch
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


def new_policy(config: AlgorithmConfig, policy_id: str, spec: PolicySpec) -> Policy:
    """A new policy from a resolved spec, its weights seeded from ``config.seed`` and its ID."""
    return Policy.from_spec(spec, seed=policy_init_seed(config.seed, policy_id))


def build_policies(
    config: AlgorithmConfig, resolved: Mapping[str, PolicySpec], states: Mapping[str, Any], *,
    copy: bool = True, followed: Collection[str] | None = None,
) -> dict[str, Policy]:
    """The policies of ``resolved`` specs: restored from ``states`` where one is given (its
    spaces checked against the environment's agents), else new. A restored policy takes the
    keys ``followed`` of its spec's config (None: all; a restore's ``config_overrides``) and
    keeps its stored value of the others: what it used when it was saved."""
    policies: dict[str, Policy] = {}
    for pid, spec in resolved.items():
        if pid not in states:
            policies[pid] = new_policy(config, pid, spec)
            continue
        policy = Policy.from_state(states[pid], copy=copy)
        mismatch = mismatched_space((spec.observation_space, spec.action_space),
                                    (policy.observation_space, policy.action_space))
        if mismatch is not None:
            name, agents_space, policy_space = mismatch
            raise ConfigError(
                f"Restored policy {pid!r} has {name} space {policy_space}, but the environment's "
                f"agents mapped to it have {agents_space}."
            )
        # The overridden lr and exploration settings win over the stored ones, before the env
        # runners copy the policy; the others stay the policy's own (its set_learning_rate).
        settings = {key: value for key, value in (spec.config or {}).items()
                    if followed is None or key in followed}
        if settings:
            policy.follow_config(settings)
        policies[pid] = policy
    return policies


def record_specs(config: AlgorithmConfig, resolved: Mapping[str, PolicySpec]) -> None:
    """Keep the resolved class and spaces in ``config``, so that it describes the policies
    completely (a restore then needs no environment agent to infer them)."""
    for pid, spec in resolved.items():
        own = config.policies[pid]
        config.policies[pid] = PolicySpec(spec.policy_class, spec.observation_space,
                                          spec.action_space, own.config)
