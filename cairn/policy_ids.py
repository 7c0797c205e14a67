"""Policy IDs become directory names, so they must be safe ones on every OS."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from cairn.errors import ConfigError

__all__ = [
    "DEFAULT_POLICY_ID", "validate_policy_id", "check_policy_ids", "check_mapped_policy_id",
    "normalize_policy_ids", "snapshot_id", "is_snapshot_id",
]

DEFAULT_POLICY_ID = "default_policy"
MAX_POLICY_ID_LENGTH = 64

_ALLOWED = re.compile(r"[A-Za-z0-9_.\-]+")
_WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"COM{i}" for i in range(1, 10)]
    + [f"LPT{i}" for i in range(1, 10)]
)


#: IDs found valid so far (a save checks each of hundreds of policy IDs several times).
_VALID: set[str] = set()


def _problem(policy_id: Any) -> str | None:
    """Return why ``policy_id`` is not a valid policy ID, or None when it is."""
    if type(policy_id) is str and policy_id in _VALID:
        return None
    if not isinstance(policy_id, str):
        return f"policy IDs must be str, got {type(policy_id).__name__} {policy_id!r}"
    if not 1 <= len(policy_id) <= MAX_POLICY_ID_LENGTH:
        return f"policy ID {policy_id!r} must have 1 to {MAX_POLICY_ID_LENGTH} characters"
    if not _ALLOWED.fullmatch(policy_id):
        bad = sorted({c for c in policy_id if not _ALLOWED.fullmatch(c)})
        return (
            f"policy ID {policy_id!r} contains {bad}; only ASCII letters, digits, '_', '-' "
            "and '.' are allowed"
        )
    if policy_id[0] in ".-":
        return f"policy ID {policy_id!r} must not start with {policy_id[0]!r}"
    if policy_id.endswith("."):
        return f"policy ID {policy_id!r} must not end with '.'"
    if policy_id.split(".")[0].upper() in _WINDOWS_RESERVED:
        return f"policy ID {policy_id!r} is a reserved device name on Windows"
    if type(policy_id) is str and len(_VALID) < 4096:
        _VALID.add(policy_id)
    return None


def validate_policy_id(policy_id: Any, *, error: bool = False) -> bool:
    """Return whether ``policy_id`` can be used as a policy ID (and so as a directory name).

    Allowed: 1 to 64 ASCII letters, digits, ``_``, ``-`` and ``.``; not starting with ``.`` or
    ``-``; not ending with ``.``; not a Windows reserved device name such as ``CON`` or
    ``com1.txt``. With ``error=True`` an invalid ID raises :class:`~cairn.errors.ConfigError`
    instead of returning False.

    >>> validate_policy_id("attacker_v2")
    True
    >>> validate_policy_id("../evil")
    False
    """
    problem = _problem(policy_id)
    if problem is not None and error:
        raise ConfigError(f"Invalid policy ID: {problem}. Choose a name such as 'policy_1'.")
    return problem is None


def check_policy_ids(policy_ids: Iterable[Any]) -> None:
    """Raise ConfigError unless every ID is valid and no two are equal ignoring case."""
    seen: dict[str, str] = {}
    for pid in policy_ids:
        validate_policy_id(pid, error=True)
        other = seen.setdefault(pid.lower(), pid)
        if other != pid:
            raise ConfigError(
                f"Policy IDs {other!r} and {pid!r} differ only in case; they would share a "
                "directory on case-insensitive file systems. Rename one of them."
            )


def check_mapped_policy_id(agent: Any, policy_id: str, policy_ids: Iterable[str]) -> str:
    """``policy_id`` (what ``policy_mapping_fn`` returned for ``agent``), or ConfigError when
    it is not one of ``policy_ids``: the one check of a mapping's result (config validation,
    building and restoring policies, and the env runners all call it).

    >>> check_mapped_policy_id("agent_0", "p0", ["p0", "p1"])
    'p0'
    """
    known = list(policy_ids)
    if policy_id not in known:
        raise ConfigError(
            f"policy_mapping_fn maps agent {agent!r} to {policy_id!r}, which is not one of the "
            f"policies {sorted(known)}. Return one of those IDs (or add the policy first), or "
            "pass a new policy_mapping_fn (e.g. to from_checkpoint(..., policy_mapping_fn=...)) "
            "when policies were dropped."
        )
    return policy_id


def normalize_policy_ids(policy_ids: str | Iterable[str] | None) -> list[str] | None:
    """The ``policy_ids=`` argument of a restore as a list: None (all policies) stays None, a
    str is one ID, and a list, tuple or set gives its IDs (a set sorted; repeats dropped).

    Anything else, or an element that is not a str, raises :class:`~cairn.errors.ConfigError`
    (a str is not split into characters: ``"p1"`` means ``["p1"]``).

    >>> normalize_policy_ids("p1")
    ['p1']
    >>> normalize_policy_ids(("p0", "p1", "p0"))
    ['p0', 'p1']
    """
    if policy_ids is None:
        return None
    if isinstance(policy_ids, str):
        return [policy_ids]
    if isinstance(policy_ids, (bytes, Mapping)) or not isinstance(policy_ids, Iterable):
        raise ConfigError(
            f"policy_ids must be a policy ID (str), a list of them or None, got "
            f"{type(policy_ids).__name__} {policy_ids!r:.100}; pass e.g. policy_ids=['p0']."
        )
    ids = list(policy_ids)
    for pid in ids:
        if not isinstance(pid, str):
            raise ConfigError(
                f"policy_ids must hold policy IDs (str), got {type(pid).__name__} {pid!r:.100} "
                f"in {ids!r:.200}; pass the IDs as strings, e.g. policy_ids=['p0']."
            )
    return list(dict.fromkeys(sorted(ids) if isinstance(policy_ids, (set, frozenset)) else ids))


def snapshot_id(main: str, n: int) -> str:
    """The policy ID of a league's ``n``-th snapshot of ``main``: ``"<main>_v<n>"``
    (:mod:`cairn.league.snapshots`; here, below the league and the checkpoint manager, which
    both read the form)."""
    return f"{main}_v{n}"


def is_snapshot_id(main: str, policy_id: str) -> bool:
    """Whether ``policy_id`` has the form of a :func:`snapshot_id` of ``main``.

    >>> is_snapshot_id("main", "main_v12"), is_snapshot_id("main", "main_vx")
    (True, False)
    """
    return re.fullmatch(rf"{re.escape(main)}_v[0-9]+", policy_id) is not None
