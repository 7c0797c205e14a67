"""Snapshots of main: when one is due, and taking one (a frozen copy added with
``add_policy``, not in ``policies_to_train``); the league drops one with ``remove_policy``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cairn.policy.policy import Policy
from cairn.policy.training_state import seeded_generators_state
from cairn.policy_ids import is_snapshot_id, snapshot_id
from cairn.rng import policy_init_seed

__all__ = ["PolicyPool", "snapshot_due", "is_snapshot_id", "snapshot_id", "add_snapshot"]


class PolicyPool(Protocol):
    """What a league needs of the Algorithm that owns it (the league layer sits below the
    algorithms and never imports them): its iteration count and its policies, to add and
    remove snapshots (and to tell, after an add or removal that raised, which it holds)."""

    iteration: int

    @property
    def policies(self) -> Mapping[str, Policy]: ...

    @property
    def policies_to_train(self) -> list[str]: ...

    def get_policy(self, policy_id: str) -> Policy: ...

    def add_policy(self, policy_id: str, spec_or_policy: Policy, *,
                   policies_to_train: Sequence[str] | None = None) -> Policy: ...

    def remove_policy(self, policy_id: str) -> None: ...


def snapshot_due(settings: Mapping[str, Any], iteration: int, *, has_snapshot: bool,
                 recent_scores: list[float]) -> bool:
    """Whether a snapshot is taken at the end of iteration ``iteration`` (counted from 1).

    ``snapshot_every_iterations=K``: at the end of iterations K, 2K, ... (snapshot n at n*K).
    ``snapshot_win_rate=p``: when main's mean score over the last ``win_rate_window`` games
    against snapshots (a full window since the last snapshot) reaches p; a league with no
    snapshot yet takes its first at once, since main has nothing else to be measured against.
    """
    every = settings["snapshot_every_iterations"]
    if every is not None and iteration % every == 0:
        return True
    rate = settings["snapshot_win_rate"]
    if rate is None:
        return False
    if not has_snapshot:
        return True
    window = settings["win_rate_window"]
    return len(recent_scores) >= window and sum(recent_scores) / len(recent_scores) >= rate


def add_snapshot(algo: PolicyPool, main: str, policy_id: str, seed: int | None) -> None:
    """Add a frozen copy of ``main`` as ``policy_id``: its weights, filter and counters copied
    once, built without random init, and kept out of ``policies_to_train``.

    Its optimizer state is a fresh one (main's hyperparameters, no moments), as a new policy's
    is: a frozen snapshot never steps its optimizer, and Adam's moments (twice the weights) would
    double its memory and its files in every checkpoint. A snapshot a user puts back into
    training starts from that fresh state.

    Its random generators are its own, seeded as those of a new policy ``policy_id`` of a
    config seeded ``seed`` are (:func:`cairn.rng.policy_init_seed`), not copies of main's: with
    those, main and the snapshot drew the same numbers move for move, and in a symmetric game
    right after the snapshot (the same weights too) they played the same moves, every game a
    draw."""
    trained = [pid for pid in algo.policies_to_train if pid != policy_id]
    # Views of main's live arrays, copied once by from_state(copy=True); the moments are not read.
    state = algo.get_policy(main).get_state(copy=False)
    groups = [dict(group) for group in state["optimizer"]["param_groups"]]
    state["optimizer"] = {"state": {}, "param_groups": groups}
    state["rng"] = seeded_generators_state(policy_init_seed(seed, policy_id))
    copy = Policy.from_state(state, copy=True)
    algo.add_policy(policy_id, copy, policies_to_train=trained)
