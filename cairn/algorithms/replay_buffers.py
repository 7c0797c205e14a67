"""Replay for off-policy algorithms (DQN, SAC): per-policy buffers, their checkpoint
component, and the (n-step) transitions a sample batch adds to them."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from cairn.algorithms.dqn.loss import n_step_returns
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import NonFiniteSampleError, ReplayBufferNotRestoredWarning
from cairn.replay import ReplayBuffer, make_replay_buffer
from cairn.rng import replay_buffer_seed

__all__ = ["REPLAY_BUFFER_COMPONENT", "PolicyReplayBuffers", "NStepTransitions", "ReplayRatio",
           "replay_transitions", "check_finite_transitions"]

#: The checkpoint component (``components/replay_buffer/``) holding the replay buffers.
REPLAY_BUFFER_COMPONENT = "replay_buffer"


#: The columns of a sample batch that a stored transition's target reads as numbers.
_FINITE_COLUMNS = ("rewards", "obs", "next_obs")


def check_finite_transitions(policy_id: str, batch: SampleBatch) -> None:
    """NonFiniteSampleError when ``batch`` (policy ``policy_id``'s rows, bound for its replay
    buffer) holds a NaN or infinite reward or observation. Stored, such a row would be
    replayed again and again: each minibatch that draws it has a NaN loss (refused by the
    learner, :class:`~cairn.errors.NonFiniteLossError`), so learning could not go on until the
    row left the buffer. Integer and boolean columns (image frames) cannot hold one and are
    not scanned."""
    for column in _FINITE_COLUMNS:
        if column not in batch:
            continue
        values = np.asarray(batch[column])
        if values.dtype.kind not in "fc" or np.isfinite(values).all():
            continue
        bad = np.flatnonzero(~np.isfinite(values).reshape(len(values), -1).all(axis=1))
        row = int(bad[0])
        raise NonFiniteSampleError(
            f"Policy {policy_id!r} sampled {len(bad)} row(s) whose {column!r} is NaN or infinite "
            f"(rows {bad[:8].tolist()}{' ...' if len(bad) > 8 else ''}; row {row}: {values[row]!r}). "
            "A replay buffer refuses them: a stored one would make the loss of every minibatch that "
            "replays it NaN. The round's rows are not stored or counted; the environments go on. Fix: "
            "make the environment return finite rewards and observations (a wrapper that replaces or "
            "clips them, or ends the episode); config.env_runners(observation_filter='MeanStdFilter') "
            "refuses non-finite observations already when sampling.",
            policy_id=policy_id, column=column, rows=tuple(int(i) for i in bad))


def replay_transitions(batch: SampleBatch, *, gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """The rows to store for ``batch`` on its own: ``obs``, ``actions``, the n-step ``rewards``
    and the ``next_obs``/``terminateds`` of each window's last step (where the target
    bootstraps), and ``n_steps``, the window lengths (the bootstrap discount is
    ``gamma ** n_steps``). Windows stop at every piece end of ``batch``, fragment ends included;
    :class:`NStepTransitions` carries them over into the next fragment instead."""
    if n_step == 1:
        returns, last = batch["rewards"], np.arange(len(batch))
        steps = np.ones(len(batch), dtype=np.int32)
    else:
        returns, last, steps = n_step_returns(batch["rewards"], batch["ends"], gamma=gamma, n=n_step)
    return _transitions(batch, returns, last, steps)


def _transitions(rows: Mapping[str, np.ndarray], returns: np.ndarray, last: np.ndarray, steps: np.ndarray,
                 keep: Any = slice(None)) -> dict[str, np.ndarray]:
    """The stored columns of the transitions ``keep`` of ``rows``: each one's ``obs`` and
    ``actions``, its n-step return (``returns``), the ``next_obs`` and ``terminateds`` of its
    window's ``last`` row and its window length (``steps``)."""
    return {
        "obs": rows["obs"][keep],
        "actions": rows["actions"][keep],
        "rewards": returns[keep].astype(np.float32, copy=False),
        "next_obs": rows["next_obs"][last[keep]],
        "terminateds": rows["terminateds"][last[keep]],
        "n_steps": steps[keep].astype(np.int32, copy=False),
    }


class NStepTransitions:
    """n-step transitions of one policy, whole across sample fragments.

    A row whose n-step window reaches the end of its sampled fragment while its episode goes
    on is held back, and completed with the first rows of the same trajectory (the same
    ``streams`` id) in a later batch, so that every stored window has ``n_step`` rewards unless
    its episode ended first. A held trajectory whose sequel does not continue it is stored with
    the shorter windows it has: the sequel continues it only when its first row is not the
    first step of an episode (``firsts``: its env was not reset meanwhile, e.g. after an error
    or by a restore without this state) and starts from the observation the held rows ended
    with (:func:`_continues`). ``n_step == 1`` holds nothing back. Batches without ``streams``
    are taken on their own (:func:`replay_transitions`); rows still held then (restored from a
    run with a longer ``n_step``) are stored before them, with the windows they have.
    """

    def __init__(self, gamma: float, n_step: int) -> None:
        self.gamma, self.n_step = gamma, n_step
        self.pending: dict[int, dict[str, np.ndarray]] = {}  # stream id -> held rows

    def add(self, batch: SampleBatch) -> dict[str, np.ndarray]:
        """The completed transitions of the held rows and ``batch`` (see the class doc)."""
        if self.n_step == 1 or "streams" not in batch:
            rows = replay_transitions(batch, gamma=self.gamma, n_step=self.n_step)
            if not self.pending:
                return rows
            # Rows held under a longer n_step (restored with n_step=1 now, say): nothing joins
            # them any more, so they are stored with the windows they have, before the batch.
            stored = self.end(list(self.pending))
            assert stored is not None  # some rows are held
            return {k: np.concatenate([stored[k], rows[k]]) for k in rows}
        joined, waits = self._join(batch)
        returns, last, steps = n_step_returns(joined["rewards"], joined["ends"],
                                              gamma=self.gamma, n=self.n_step)
        hold = waits[last] & (steps < self.n_step)
        for stream in np.unique(joined["streams"][hold]):
            rows = hold & (joined["streams"] == stream)
            self.pending[int(stream)] = {k: v[rows] for k, v in joined.items()}
        return _transitions(joined, returns, last, steps, ~hold)

    def end(self, streams: Iterable[int]) -> dict[str, np.ndarray] | None:
        """The transitions of the rows held for ``streams``, with the windows they have (each
        stops where its fragment was cut and bootstraps from there), since their sequel will
        never be added (its sample round was refused); None when those streams hold none. The
        rows are held no more."""
        held = [self.pending.pop(stream) for stream in dict.fromkeys(int(s) for s in streams)
                if stream in self.pending]
        if not held:
            return None
        rows = SampleBatch({k: np.concatenate([h[k] for h in held]) for k in _HELD_COLUMNS})
        return replay_transitions(rows, gamma=self.gamma, n_step=self.n_step)

    def _join(self, batch: SampleBatch) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``batch`` with each stream's held rows in front of its first row (when that row does
        not continue them, they end there, as a piece of their own), and which rows end a piece
        that may still continue (a fragment end inside an episode)."""
        size = len(batch)
        streams, first_rows = np.unique(batch["streams"], return_index=True)
        held_parts: list[dict[str, np.ndarray]] = []
        inserts: list[tuple[int, int, int]] = []  # (row of batch, offset of held rows, count)
        offset = size
        for stream, row in zip(streams.tolist(), first_rows.tolist(), strict=True):
            held = self.pending.pop(int(stream), None)
            if held is None:
                continue
            held["ends"] = held["ends"].copy()
            held["ends"][-1] = not _continues(held, batch, row)
            held_parts.append(held)
            inserts.append((row, offset, len(held["ends"])))
            offset += len(held["ends"])
        cut = batch["ends"] & ~batch["terminateds"] & ~batch["truncateds"]
        if not held_parts:
            return {k: batch[k] for k in _HELD_COLUMNS}, cut
        order: list[np.ndarray] = []
        previous = 0
        for row, start, count in sorted(inserts):
            order += [np.arange(previous, row), np.arange(start, start + count)]
            previous = row
        order.append(np.arange(previous, size))
        index = np.concatenate(order)
        joined = {k: np.concatenate([batch[k], *(h[k] for h in held_parts)])[index] for k in _HELD_COLUMNS}
        waits = np.concatenate([cut, np.zeros(offset - size, dtype=bool)])[index]
        return joined, waits

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The held rows, as one table (``{}`` when none)."""
        if not self.pending:
            return {}
        return {k: np.concatenate([rows[k] for rows in self.pending.values()]) for k in _HELD_COLUMNS}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.pending = {}
        if not state:
            return
        streams = np.asarray(state["streams"])
        for stream in dict.fromkeys(streams.tolist()):
            rows = streams == stream
            self.pending[int(stream)] = {k: np.array(state[k])[rows] for k in _HELD_COLUMNS}


def _continues(held: Mapping[str, np.ndarray], batch: Mapping[str, np.ndarray], row: int) -> bool:
    """Whether row ``row`` of ``batch`` continues the ``held`` rows of its stream: it is not an
    episode's first step (an env reset between the two fragments, after an error say, may
    reach the very observation the held rows ended with: equal observations alone prove
    nothing), and it starts from their last next observation. A batch without ``firsts``
    (made by hand) is judged by the observations alone."""
    if "firsts" in batch and batch["firsts"][row]:
        return False
    return bool(np.array_equal(held["next_obs"][-1], batch["obs"][row]))


#: The columns of held rows (``ends`` marks the last of each stream's).
_HELD_COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "ends", "next_obs", "streams")


class PolicyReplayBuffers:
    """One replay buffer per policy ID, made on first use from ``replay_buffer_config`` and
    seeded from the algorithm's seed and the policy ID (so a run repeats exactly).

    ``buffers`` maps policy IDs to their buffers, ``n_step`` to their
    :class:`NStepTransitions` (the rows held back for their sequel). A plain holder of the
    algorithm's buffers: their state goes into checkpoints through :meth:`component`.
    """

    def __init__(self, replay_buffer_config: Mapping[str, Any], seed: int | None, *,
                 gamma: float = 0.99, n_step: int = 1) -> None:
        self.replay_buffer_config = dict(replay_buffer_config)
        self.seed = seed
        self.gamma, self.n_step_length = gamma, n_step
        self.buffers: dict[str, ReplayBuffer] = {}
        self.n_step: dict[str, NStepTransitions] = {}

    def add(self, pid: str, batch: SampleBatch) -> None:
        """Store the (n-step) transitions of ``batch`` in policy ``pid``'s buffer; rows whose
        window continues into the next fragment wait for it (:class:`NStepTransitions`)."""
        if pid not in self.n_step:
            self.n_step[pid] = NStepTransitions(self.gamma, self.n_step_length)
        rows = self.n_step[pid].add(batch)
        if len(rows["rewards"]):
            self.buffer(pid).add(rows)

    def refuse(self, pid: str, batch: SampleBatch) -> None:
        """``batch`` of policy ``pid`` will not be stored (its sample round was refused, or the
        policy does not train now) while its episodes go on: the rows held for its trajectories
        can never be completed, so they are stored now, with the windows they have. Kept, they
        would be completed with the first rows of the trajectory's next stored fragment whenever
        it starts from the observation they ended with (an env whose observations repeat), the
        window spanning the steps not stored as if they were not there."""
        n_step = self.n_step.get(pid)
        if n_step is None or "streams" not in batch:
            return
        rows = n_step.end(batch["streams"])
        if rows is not None and len(rows["rewards"]):
            self.buffer(pid).add(rows)

    def buffer(self, pid: str) -> ReplayBuffer:
        """Policy ``pid``'s buffer, made empty on first use."""
        if pid not in self.buffers:
            self.buffers[pid] = make_replay_buffer(
                self.replay_buffer_config,
                seed=replay_buffer_seed(self.seed, pid),
            )
        return self.buffers[pid]

    def component(self, *, copy: bool) -> dict[str, Any]:
        """The ``replay_buffer`` checkpoint component: every buffer's state, and the rows held
        back for their next fragment (``n_step_pending``, only for policies that hold some)."""
        held = {pid: state for pid, n_step in self.n_step.items() if (state := n_step.get_state(copy=copy))}
        return {REPLAY_BUFFER_COMPONENT: {
            "policies": {pid: buf.get_state(copy=copy) for pid, buf in self.buffers.items()},
            **({"n_step_pending": held} if held else {}),
        }}

    def fitting_components(self, components: Mapping[str, Any], gamma: Any,
                           policy_ids: Iterable[str]) -> Mapping[str, Any]:
        """``components`` without the stored buffers (of ``policy_ids``) that hold n-step returns
        (rows of more than one step) summed with a ``gamma`` (the stored config's) other than
        this one's, with a ReplayBufferNotRestoredWarning for each: those policies start with
        empty buffers, as after a checkpoint without them. Restored, their targets would add
        returns discounted by one ``gamma`` to values bootstrapped by this one's
        ``gamma ** n_steps``, with no error. One-step rows hold plain rewards (any ``gamma``
        applies to them), and rows held for their next fragment are summed when stored."""
        stored = components.get(REPLAY_BUFFER_COMPONENT)
        if (stored is None or isinstance(gamma, bool) or not isinstance(gamma, (int, float))
                or float(gamma) == self.gamma):
            return components
        stale = {}
        for pid in policy_ids:
            n_steps = ((stored["policies"].get(pid) or {}).get("columns") or {}).get("n_steps")
            if n_steps is not None and len(n_steps) and int(np.max(n_steps)) > 1:
                stale[pid] = int(np.max(n_steps))
        for pid, longest in stale.items():
            warnings.warn(
                f"The stored replay buffer of policy {pid!r} holds n-step returns (windows of up to "
                f"{longest} steps) summed with gamma={gamma}, but this config has gamma={self.gamma}: "
                "restored, its targets would mix both discounts, so it starts empty (training refills it "
                f"and does not repeat the original run). Restore with gamma={gamma} to keep it.",
                ReplayBufferNotRestoredWarning,
                stacklevel=3,  # fitting_components <- set_state <- caller
            )
        if not stale:
            return components
        policies = {pid: state for pid, state in stored["policies"].items() if pid not in stale}
        return {**components, REPLAY_BUFFER_COMPONENT: {**stored, "policies": policies}}

    def restore(self, components: Mapping[str, Any], policy_ids: Any, *, algorithm: str) -> None:
        """Replace the buffers by those stored in ``components`` (for the policies in
        ``policy_ids``); none stored: empty buffers, with a warning that says how to keep them.
        A stored buffer that this config's buffers refuse (another kind) raises ValueError and
        leaves the buffers as they were."""
        stored = components.get(REPLAY_BUFFER_COMPONENT)
        if stored is None:
            self.buffers, self.n_step = {}, {}
            warnings.warn(
                f"This {algorithm} state has no replay buffer, so training continues with empty "
                "buffers (and does not repeat the original run exactly). Save with "
                "config.checkpointing(store_replay_buffer=True) (on the command line: --config "
                "store_replay_buffer=true) to keep them.",
                ReplayBufferNotRestoredWarning,
                stacklevel=4,  # restore <- set_components <- set_state <- caller
            )
            return
        restored = PolicyReplayBuffers(self.replay_buffer_config, self.seed, gamma=self.gamma,
                                       n_step=self.n_step_length)
        for pid, buffer_state in stored["policies"].items():
            if pid in policy_ids:
                restored.buffer(pid).set_state(buffer_state)
        for pid, held in (stored.get("n_step_pending") or {}).items():
            if pid in policy_ids:
                restored.n_step[pid] = NStepTransitions(self.gamma, self.n_step_length)
                restored.n_step[pid].set_state(held)
        self.buffers, self.n_step = restored.buffers, restored.n_step


class ReplayRatio:
    """Gradient updates owed to each policy by a replay ratio, ``training_intensity``: the
    transitions replayed per transition sampled, in minibatches of ``minibatch_size``.

    ``due(pid, rows)`` after ``rows`` new transitions adds ``rows * intensity / minibatch_size``
    updates to ``pid``'s ``credit`` (part of the algorithm's state) and returns the whole ones
    it holds; :meth:`made` takes one off for each update that was made. So an update that
    raises, and those a round owed after it, stay owed and are made in the next round; the
    fraction carries over.
    """

    def __init__(self, intensity: float, minibatch_size: int) -> None:
        self.intensity, self.minibatch_size = intensity, minibatch_size
        self.credit: dict[str, float] = {}

    def due(self, pid: str, rows: int) -> int:
        """Gradient updates owed to ``pid`` after ``rows`` new transitions (its credit's whole
        updates, those owed from earlier rounds included); the credit keeps them until
        :meth:`made` takes each."""
        credit = self.credit[pid] = self.credit.get(pid, 0.0) + rows * self.intensity / self.minibatch_size
        return int(credit)

    def made(self, pid: str) -> None:
        """One update of ``pid`` that :meth:`due` called for was made (it completed, or its
        policy counted it before raising: SAC's and TD3's critics stepped): take it from the credit
        (exactly: subtracting 1 from a float below 2**53 rounds nothing, so the credit left is
        bit for bit the one of taking a round's updates at once)."""
        self.credit[pid] -= 1.0

    def get_state(self, *, copy: bool = True) -> dict[str, float]:
        return dict(self.credit)

    def set_state(self, state: Mapping[str, Any] | None) -> None:
        self.credit = {str(k): float(v) for k, v in (state or {}).items()}
