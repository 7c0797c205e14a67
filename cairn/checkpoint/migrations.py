"""One-step migrations between checkpoint format versions.

Loading a checkpoint of version ``v`` applies the registered migrations ``v -> v+1 -> ... ->``
:data:`~cairn.checkpoint.format.FORMAT_VERSION`, each a pure function on the loaded state of one
Algorithm, one Policy, or one component (kind ``"component:<name>"``; a migration registered
for the kind ``"component"`` serves every component without one of its own). A change to the
format adds a version, its frozen fixtures, and a migration from the previous version here.

Versions:

* ``"1"``: cairn 0.1.
* ``"2"``: the manifest may hold ``metadata`` (JSON data given to ``save(..., metadata=...)``;
  docs/checkpoint-format.md, section 3). No state tree changed, so ``"1" -> "2"`` is the
  identity for every kind.
* ``"3"``: ``model.vf_share_layers`` means the same for every built-in network (False: the critic
  has its own layers). Up to 2, ``use_lstm`` with ``vf_share_layers=False`` meant a shared trunk
  and LSTM read by the value head with its gradient stopped, which is now
  ``vf_share_layers=True, vf_stop_gradient=True``; ``"2" -> "3"`` rewrites every model config a
  state holds to that (:func:`rename_lstm_value_sharing`), and leaves everything else as it was.
* ``"4"``: a parallel multi-agent env runner's state keeps the rows that wait for their agent's
  next observation across a fragment's end (key ``pending`` of each ``current_obs`` entry;
  docs/checkpoint-format.md, section 10). Up to 3 no such row was kept: ``"3" -> "4"`` gives
  every parallel runner state (the env runners' and the evaluation runner's) an empty
  ``pending`` list per env (:func:`add_empty_pending`), and leaves Policy and component states
  as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from cairn.checkpoint.format import FORMAT_VERSION
from cairn.errors import CheckpointFormatError, UnsupportedCheckpointVersionError

__all__ = ["COMPONENT_KIND", "Migration", "MigrationRegistry", "MIGRATIONS", "register_migration", "migrate",
           "parse_version", "rename_lstm_value_sharing", "add_empty_pending"]

#: ``fn(state) -> state`` for one kind ("Algorithm" or "Policy") and one version step.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
#: ``{(kind, from_version): (to_version, fn)}``
MigrationRegistry = dict[tuple[str, str], tuple[str, Migration]]

MIGRATIONS: MigrationRegistry = {}
#: The kind whose migrations serve every ``"component:<name>"`` without one of its own.
COMPONENT_KIND = "component"


def parse_version(version: Any) -> int:
    """Format versions are decimal strings ("1", "2", ...)."""
    if not (isinstance(version, str) and version.isdigit() and len(version) <= 6):
        raise CheckpointFormatError(
            f"Format version {version!r:.40} is not a decimal string such as '1'."
        )
    return int(version)


def register_migration(
    kind: str, from_version: str, to_version: str, registry: MigrationRegistry | None = None
) -> Callable[[Migration], Migration]:
    """Register ``fn`` as the migration of ``kind`` states from one version to the next."""
    if parse_version(to_version) != parse_version(from_version) + 1:
        raise ValueError(f"migrations go one version at a time, not {from_version} -> {to_version}")
    target = MIGRATIONS if registry is None else registry

    def decorator(fn: Migration) -> Migration:
        target[(kind, from_version)] = (to_version, fn)
        return fn

    return decorator


def migrate(
    kind: str,
    state: dict[str, Any],
    version: str,
    *,
    target: str = FORMAT_VERSION,
    registry: MigrationRegistry | None = None,
) -> dict[str, Any]:
    """Bring ``state`` written at ``version`` up to ``target`` through one-step migrations."""
    registry = MIGRATIONS if registry is None else registry
    current, goal = parse_version(version), parse_version(target)
    if current > goal:
        raise UnsupportedCheckpointVersionError(
            f"Checkpoint format version {version} is newer than {target}, the newest this cairn "
            "reads. Upgrade cairn (pip install -U cairn-rl) to load it."
        )
    while current < goal:
        step = registry.get((kind, str(current)))
        if step is None and kind.startswith(f"{COMPONENT_KIND}:"):
            step = registry.get((COMPONENT_KIND, str(current)))
        if step is None:
            raise UnsupportedCheckpointVersionError(
                f"No migration for {kind} checkpoints from format version {current}; this cairn "
                f"cannot read that version."
            )
        to_version, fn = step
        state = fn(state)
        current = parse_version(to_version)
    return state


def _unchanged(state: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added an optional manifest key (``metadata``); state trees are as in 1."""
    return state


for _kind in ("Algorithm", "Policy", COMPONENT_KIND):
    register_migration(_kind, "1", "2")(_unchanged)


#: What format 2's ``use_lstm`` with ``vf_share_layers=False`` is in format 3.
SHARED_STOPPED = {"vf_share_layers": True, "vf_stop_gradient": True}


def _value_sharing(model: Mapping[str, Any]) -> dict[str, bool]:
    """What a complete format-2 ``model`` config's critic is, in format 3's keys."""
    shared = bool(model.get("vf_share_layers", False))
    if model.get("use_lstm", False) and not shared:  # format 2's LSTM: shared, gradient stopped
        return dict(SHARED_STOPPED)
    return {"vf_share_layers": shared, "vf_stop_gradient": False}


def _merged(model: Any, override: Any) -> dict[str, Any]:
    """A policy's model config: the shared one with its PolicySpec's ``model`` over it (keys of
    ``model`` are not nested: AlgorithmConfig.policy_config's merge)."""
    return {**(model if isinstance(model, Mapping) else {}),
            **(override if isinstance(override, Mapping) else {})}


def rename_lstm_value_sharing(model: Any) -> Any:
    """A format-2 ``model`` config in format 3's keys: ``use_lstm`` with ``vf_share_layers`` False
    becomes ``vf_share_layers=True, vf_stop_gradient=True``; any other config (or non-dict) is
    returned as it was."""
    if not isinstance(model, Mapping) or _value_sharing(model) != SHARED_STOPPED:
        return model
    return {**model, **_value_sharing(model)}


def _algorithm_2_to_3(state: dict[str, Any]) -> dict[str, Any]:
    """``config.model`` and each ``config.policies[pid].config.model`` in format 3's keys, such that
    every policy's merged model (shared, then its spec's override) means what it meant: an
    override is given the two keys where the shared config's rewrite would change its policy."""
    config = state.get("config")
    if not isinstance(config, Mapping):
        return state
    config = copy.deepcopy(dict(config))
    shared, specs = config.get("model"), config.get("policies")
    specs = {pid: spec for pid, spec in specs.items() if isinstance(spec, Mapping)
             and isinstance(spec.get("config") or {}, Mapping)} if isinstance(specs, Mapping) else {}
    wanted = {pid: _value_sharing(_merged(shared, (spec.get("config") or {}).get("model")))
              for pid, spec in specs.items()}
    config["model"] = rename_lstm_value_sharing(shared)
    for pid, spec in specs.items():
        spec_config = dict(spec.get("config") or {})
        override = spec_config.get("model")
        merged = _merged(config["model"], override)
        if {key: bool(merged.get(key, False)) for key in wanted[pid]} != wanted[pid]:
            spec_config["model"] = {**(override if isinstance(override, Mapping) else {}), **wanted[pid]}
            config["policies"][pid] = {**spec, "config": spec_config}
    return {**state, "config": config}


def _policy_2_to_3(state: dict[str, Any]) -> dict[str, Any]:
    """``spec.config.model`` (the policy's complete model config) in format 3's keys."""
    spec = state.get("spec")
    if not (isinstance(spec, Mapping) and isinstance(spec.get("config"), Mapping)):
        return state
    model = rename_lstm_value_sharing(spec["config"].get("model"))
    return {**state, "spec": {**spec, "config": {**spec["config"], "model": model}}}


register_migration("Algorithm", "2", "3")(_algorithm_2_to_3)
register_migration("Policy", "2", "3")(_policy_2_to_3)
register_migration(COMPONENT_KIND, "2", "3")(_unchanged)


def add_empty_pending(runner: Any) -> Any:
    """A format-3 env runner state in format 4: a parallel multi-agent runner's ``current_obs``
    entries each get ``pending: []`` (format 3 kept no waiting rows); any other state (single-agent,
    turn-based, none) is returned as it was."""
    if not (isinstance(runner, Mapping) and runner.get("multi_agent") and not runner.get("turn_based")
            and isinstance(runner.get("current_obs"), list)):
        return runner
    entries = [{**entry, "pending": []} if isinstance(entry, Mapping) and "pending" not in entry else entry
               for entry in runner["current_obs"]]
    return {**runner, "current_obs": entries}


def _algorithm_3_to_4(state: dict[str, Any]) -> dict[str, Any]:
    """Every env runner state the Algorithm state holds (``env_runners`` and
    ``evaluation_runner``) through :func:`add_empty_pending`."""
    out = dict(state)
    if isinstance(state.get("env_runners"), list):
        out["env_runners"] = [add_empty_pending(runner) for runner in state["env_runners"]]
    if "evaluation_runner" in state:
        out["evaluation_runner"] = add_empty_pending(state["evaluation_runner"])
    return out


register_migration("Algorithm", "3", "4")(_algorithm_3_to_4)
register_migration("Policy", "3", "4")(_unchanged)
register_migration(COMPONENT_KIND, "3", "4")(_unchanged)
