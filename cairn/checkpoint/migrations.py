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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.checkpoint.format import FORMAT_VERSION
from cairn.errors import CheckpointFormatError, UnsupportedCheckpointVersionError

__all__ = ["COMPONENT_KIND", "Migration", "MigrationRegistry", "MIGRATIONS", "register_migration", "migrate",
           "parse_version"]

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
