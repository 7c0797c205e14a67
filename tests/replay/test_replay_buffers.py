"""Replay buffers: ring storage, sampling, priorities and exact state round trips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.algorithms.replay_buffers import NStepTransitions
from cairn.env_runner.sample_batch import SampleBatch
from cairn.replay import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
    make_replay_buffer,
    replay_buffer_from_state,
)


def rows(start: int, count: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + count)
    return {"obs": np.stack([ids, -ids], axis=1).astype(np.float32), "actions": ids.astype(np.int64),
            "done": ids % 2 == 0}


def test_add_fills_then_overwrites_oldest() -> None:
    buffer = ReplayBuffer(5, seed=0)
    buffer.add(rows(0, 3))
    assert (len(buffer), buffer.cursor) == (3, 3)
    slots = buffer.add(rows(3, 4))
    assert slots.tolist() == [3, 4, 0, 1]
    assert (len(buffer), buffer.cursor, buffer.num_added) == (5, 2, 7)
    assert buffer.columns["actions"].tolist() == [5, 6, 2, 3, 4]
    assert buffer.columns["obs"][:, 1].tolist() == [-5, -6, -2, -3, -4]


def test_batch_larger_than_capacity_keeps_newest_rows() -> None:
    buffer = ReplayBuffer(4, seed=0)
    buffer.add(rows(0, 1))
    buffer.add(rows(1, 10))
    assert sorted(buffer.columns["actions"].tolist()) == [7, 8, 9, 10]
    assert buffer.columns["actions"][(buffer.cursor - 1) % 4] == 10


def test_add_rejects_ragged_or_different_columns() -> None:
    buffer = ReplayBuffer(4)
    with pytest.raises(ValueError, match="equal lengths"):
        buffer.add({"a": np.zeros(2), "b": np.zeros(3)})
    buffer.add({"a": np.zeros(2)})
    with pytest.raises(ValueError, match="differ"):
        buffer.add({"b": np.zeros(2)})


def test_sample_is_uniform_over_filled_rows_and_seeded() -> None:
    buffer = ReplayBuffer(100, seed=1)
    buffer.add(rows(0, 10))
    sample = buffer.sample(5000)
    assert set(sample["actions"].tolist()) == set(range(10))
    counts = np.bincount(sample["actions"], minlength=10)
    assert counts.min() > 400 and counts.max() < 600
    np.testing.assert_array_equal(sample["obs"][:, 0], sample["actions"])
    other = ReplayBuffer(100, seed=1)
    other.add(rows(0, 10))
    np.testing.assert_array_equal(other.sample(5000)["batch_indexes"], sample["batch_indexes"])
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(3).sample(1)


def test_rows_of_another_shape_than_the_columns_are_refused() -> None:
    """numpy broadcast them without a word: an observation [7] was stored as [7, 7, 7], and a
    batch of scalars [7, 8] as rows [7, 7, 7] and [8, 8, 8]."""
    buffer = ReplayBuffer(4, seed=0)
    buffer.add(rows(0, 2))
    for obs in (np.array([[7.0]], np.float32), np.array([7.0, 8.0], np.float32)):
        with pytest.raises(ValueError, match="obs"):
            buffer.add({**rows(2, len(obs)), "obs": obs})
    assert len(buffer) == 2 and buffer.cursor == 2
    buffer.add(rows(2, 1))
    assert buffer.columns["obs"][2].tolist() == [2.0, -2.0]


def test_state_holds_only_filled_rows_and_restores_exactly() -> None:
    buffer = ReplayBuffer(1000, seed=3)
    buffer.add(rows(0, 30))
    buffer.sample(7)  # advance the generator
    state = buffer.get_state()
    assert all(len(v) == 30 for v in state["columns"].values())
    assert (state["size"], state["cursor"], state["capacity"]) == (30, 30, 1000)
    restored = replay_buffer_from_state(state)
    first, second = buffer.sample(64), restored.sample(64)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    restored.add(rows(30, 5))
    buffer.add(rows(30, 5))
    np.testing.assert_array_equal(buffer.columns["actions"][:35], restored.columns["actions"][:35])


def test_get_state_copy_false_returns_views_and_copy_true_copies() -> None:
    buffer = ReplayBuffer(8, seed=0)
    buffer.add(rows(0, 8))
    view = buffer.get_state(copy=False)["columns"]["actions"]
    snap = buffer.get_state()["columns"]["actions"]
    assert np.shares_memory(view, buffer.columns["actions"])
    assert not np.shares_memory(snap, buffer.columns["actions"])


def test_restoring_one_state_twice_does_not_share_storage() -> None:
    buffer = ReplayBuffer(4, seed=0)
    buffer.add(rows(0, 4))
    state = buffer.get_state()
    a, b = ReplayBuffer(4), ReplayBuffer(4)
    a.set_state(state)
    b.set_state(state)
    a.add(rows(100, 1))
    assert 100 not in b.columns["actions"]


def test_full_column_viewing_file_bytes_is_adopted() -> None:
    raw = bytearray(np.arange(4, dtype=np.int64).tobytes())
    adopted = np.frombuffer(raw, dtype=np.int64)
    buffer = ReplayBuffer(4, seed=0)
    buffer.add({"actions": np.zeros(4, dtype=np.int64)})
    state = buffer.get_state()
    state["columns"] = {"actions": adopted}
    restored = ReplayBuffer(4)
    restored.set_state(state)
    assert np.shares_memory(restored.columns["actions"], adopted)


def test_restore_into_other_capacity_keeps_newest_in_order() -> None:
    buffer = ReplayBuffer(5, seed=0)
    buffer.add(rows(0, 8))  # holds 3..7, oldest (3) at the cursor
    smaller = ReplayBuffer(3)
    with pytest.warns(UserWarning, match="capacity"):
        smaller.set_state(buffer.get_state())
    assert smaller.columns["actions"].tolist() == [5, 6, 7]
    larger = ReplayBuffer(10)
    with pytest.warns(UserWarning):
        larger.set_state(buffer.get_state())
    assert larger.columns["actions"][: len(larger)].tolist() == [3, 4, 5, 6, 7]


def test_set_state_rejects_other_type_and_bad_sizes() -> None:
    buffer = ReplayBuffer(4, seed=0)
    buffer.add(rows(0, 2))
    state = buffer.get_state()
    with pytest.raises(ValueError, match="uniform"):
        PrioritizedReplayBuffer(4).set_state(state)
    state["size"] = 3
    with pytest.raises(ValueError, match="size"):
        ReplayBuffer(4).set_state(state)


@pytest.mark.parametrize("capacity", [8, 4])
def test_a_state_whose_cursor_is_not_at_its_size_before_the_ring_is_full_is_refused(capacity: int) -> None:
    """Before the ring is full the next row goes to slot ``size``. A state with another cursor was
    taken as it was: the next add overwrote a stored row and sampling drew a never-written slot
    (uninitialised memory), with no error. Into another capacity, the rows were taken in the
    wrong order. Refused, and the buffer keeps what it held."""
    buffer = ReplayBuffer(8, seed=0)
    buffer.add(rows(0, 3))
    state = {**buffer.get_state(), "cursor": 5}
    target = ReplayBuffer(capacity, seed=0)
    target.add(rows(10, 2))
    with pytest.raises(ValueError, match="cursor 5 but size 3"):
        target.set_state(state)
    assert len(target) == 2 and target.columns["actions"][:2].tolist() == [10, 11]
    full = ReplayBuffer(4, seed=0)
    full.add(rows(0, 6))  # a full ring may have its cursor anywhere
    ReplayBuffer(4).set_state(full.get_state())


def test_empty_buffer_state_round_trip() -> None:
    restored = replay_buffer_from_state(ReplayBuffer(4, seed=0).get_state())
    assert len(restored) == 0 and restored.columns == {}


# ------------------------------------------------------------------------------- sum tree
@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=40), st.data())
def test_sum_tree_find_matches_cumulative_sum(priorities: list[float], data: st.DataObject) -> None:
    p = np.array(priorities)
    if p.sum() <= 0:
        p[0] = 1.0
    tree = SumTree(len(p))
    tree.update(np.arange(len(p)), p)
    assert tree.total == pytest.approx(p.sum())
    assert tree.min(len(p)) == p[p > 0].min()  # the smallest drawable priority (0 cannot be drawn)
    targets = np.array(data.draw(st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=20)))
    targets = targets * tree.total
    found = tree.find(targets)
    cumulative = np.cumsum(p)
    for target, leaf in zip(targets, found, strict=True):
        assert p[leaf] > 0
        assert cumulative[leaf] - p[leaf] <= target * (1 + 1e-12) + 1e-9
        assert target <= cumulative[leaf] * (1 + 1e-12) + 1e-9


def test_sum_tree_rebuild_is_bit_identical_to_updates() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(37)
    for _ in range(50):
        idx = rng.integers(0, 37, size=5)
        tree.update(idx, rng.random(5))
    rebuilt = SumTree(37)
    rebuilt.rebuild(tree.leaves(37).copy())
    np.testing.assert_array_equal(tree.sums, rebuilt.sums)
    np.testing.assert_array_equal(tree.mins, rebuilt.mins)


# ---------------------------------------------------------------------------- prioritized
def test_prioritized_sampling_follows_priorities() -> None:
    buffer = PrioritizedReplayBuffer(8, alpha=1.0, beta=1.0, epsilon=0.0, seed=0)
    buffer.add(rows(0, 4))
    buffer.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    sample = buffer.sample(20_000)
    freq = np.bincount(sample["batch_indexes"], minlength=4) / 20_000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.01)
    # weights (N P(i))^-beta normalised by the largest: P_min / P(i) with beta=1.
    expected = 0.1 / (np.array([1, 2, 3, 4]) / 10)
    np.testing.assert_allclose(sample["weights"], expected[sample["batch_indexes"]], rtol=1e-6)


def test_new_transitions_get_the_largest_priority() -> None:
    buffer = PrioritizedReplayBuffer(8, alpha=0.5, epsilon=0.0, seed=0)
    buffer.add(rows(0, 2))
    buffer.update_priorities(np.array([0, 1]), np.array([9.0, 1.0]))
    buffer.add(rows(2, 1))
    assert buffer.tree.leaves(3).tolist() == [3.0, 1.0, 3.0]


def test_a_zero_priority_is_never_drawn_and_does_not_zero_the_weights() -> None:
    """With epsilon=0 a TD error of exactly 0 gives priority 0. Such a transition cannot be drawn,
    so the weights are normalised by the smallest *drawable* probability: before, the minimum was
    0 and every weight came out 0 (the learner then learned nothing, with only a RuntimeWarning)."""
    buffer = PrioritizedReplayBuffer(8, alpha=1.0, beta=1.0, epsilon=0.0, seed=0)
    buffer.add(rows(0, 4))
    buffer.update_priorities(np.arange(4), np.array([0.0, 1.0, 2.0, 4.0]))
    sample = buffer.sample(20_000)
    assert 0 not in sample["batch_indexes"]
    probs = np.array([0.0, 1.0, 2.0, 4.0]) / 7.0
    expected = (probs[1] / probs)[sample["batch_indexes"]]  # P_min / P(i) with beta=1, P_min over 1..3
    np.testing.assert_allclose(sample["weights"], expected, rtol=1e-6)
    assert sample["weights"].max() == 1.0


def test_a_buffer_whose_priorities_are_all_zero_refuses_to_sample_and_names_epsilon() -> None:
    buffer = PrioritizedReplayBuffer(8, alpha=0.6, epsilon=0.0, seed=0)
    buffer.add(rows(0, 3))
    buffer.update_priorities(np.arange(3), np.zeros(3))
    with pytest.raises(ValueError, match="epsilon > 0"):
        buffer.sample(4)
    buffer.update_priorities(np.array([1]), np.array([0.5]))  # the buffer still works afterwards
    assert set(buffer.sample(16)["batch_indexes"].tolist()) == {1}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_td_errors_are_refused_and_leave_the_priorities_unchanged(bad: float) -> None:
    """A NaN priority turns the tree's sums into NaN, after which every draw walks to one slot."""
    buffer = PrioritizedReplayBuffer(8, alpha=0.6, seed=0)
    buffer.add(rows(0, 4))
    buffer.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    sums, mins = buffer.tree.sums.copy(), buffer.tree.mins.copy()
    with pytest.raises(ValueError, match="non-finite priorities"):
        buffer.update_priorities(np.array([0, 2]), np.array([0.5, bad]))
    np.testing.assert_array_equal(buffer.tree.sums, sums)
    np.testing.assert_array_equal(buffer.tree.mins, mins)
    assert buffer.max_priority == (4.0 + 1e-6) ** 0.6


@pytest.mark.parametrize(("indexes", "td_errors", "match"), [
    (np.arange(4), np.array([5.0]), "one TD error per index"),
    (np.arange(2), np.ones((2, 1)), "one TD error per index"),
    (np.array([1, 6]), np.array([1.0, 100.0]), "slots \\[0, 4\\)"),
    (np.array([-1]), np.array([1.0]), "slots \\[0, 4\\)"),
    (np.array([1.0]), np.array([1.0]), "integer slots")])
def test_priorities_for_other_slots_or_counts_than_sampled_are_refused(
        indexes: np.ndarray, td_errors: np.ndarray, match: str) -> None:
    """One TD error was broadcast to every slot; a slot past the filled ones became drawable
    (its draws landed on the last row, 88% of them here); a negative one overwrote an inner
    node of the sum tree. All without an error; now refused, and the priorities stay."""
    buffer = PrioritizedReplayBuffer(8, alpha=1.0, epsilon=0.0, seed=0)
    buffer.add(rows(0, 4))
    buffer.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    sums = buffer.tree.sums.copy()
    with pytest.raises(ValueError, match=match):
        buffer.update_priorities(indexes, td_errors)
    np.testing.assert_array_equal(buffer.tree.sums, sums)
    assert buffer.max_priority == 4.0
    buffer.update_priorities(np.array([], dtype=np.int64), np.array([]))  # an empty update is fine


def test_a_rebuilt_tree_with_zero_priorities_equals_the_updated_one() -> None:
    tree = SumTree(10)
    tree.update(np.arange(10), np.array([0.0, 3.0, 0.0, 1.0, 2.0, 0.0, 5.0, 0.5, 0.0, 4.0]))
    tree.update(np.array([3, 7]), np.array([0.0, 0.25]))
    assert tree.min(10) == 0.25
    rebuilt = SumTree(10)
    rebuilt.rebuild(tree.leaves(10).copy())
    np.testing.assert_array_equal(tree.sums, rebuilt.sums)
    np.testing.assert_array_equal(tree.mins, rebuilt.mins)


def test_prioritized_state_round_trip_is_exact() -> None:
    buffer = make_replay_buffer({"type": "prioritized", "capacity": 50, "alpha": 0.7}, seed=5)
    rng = np.random.default_rng(1)
    for start in range(0, 80, 10):
        buffer.add(rows(start, 10))
        sample = buffer.sample(8)
        buffer.update_priorities(sample["batch_indexes"], rng.normal(size=8))
    state = buffer.get_state()
    assert len(state["priorities"]) == 50
    restored = replay_buffer_from_state(state)
    assert isinstance(restored, PrioritizedReplayBuffer) and restored.alpha == 0.7
    np.testing.assert_array_equal(buffer.tree.sums, restored.tree.sums)
    for _ in range(3):
        a, b = buffer.sample(16), restored.sample(16)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        buffer.update_priorities(a["batch_indexes"], a["obs"][:, 0])
        restored.update_priorities(b["batch_indexes"], b["obs"][:, 0])


def test_a_buffer_restored_from_its_own_view_state_keeps_its_priorities() -> None:
    """get_state(copy=False) gives the tree's leaves as a view; set_state rebuilt the tree by
    zeroing it first and then reading that view: every priority became 0 (the old rows never
    drawn again once new ones came, or sample() refusing an all-zero buffer)."""
    buffer = make_replay_buffer({"type": "prioritized", "capacity": 8}, seed=5)
    twin = make_replay_buffer({"type": "prioritized", "capacity": 8}, seed=5)
    for b in (buffer, twin):
        b.add(rows(0, 5))
        b.update_priorities(np.arange(5), np.arange(5.0) + 1)
    leaves = buffer.tree.leaves(5).copy()
    assert (leaves > 0).all()
    buffer.set_state(buffer.get_state(copy=False))
    np.testing.assert_array_equal(buffer.tree.leaves(5), leaves)
    np.testing.assert_array_equal(buffer.tree.sums, twin.tree.sums)
    tree = SumTree(8)
    tree.update(np.arange(3), np.array([1.0, 2.0, 3.0]))
    tree.rebuild(tree.leaves(3))  # the tree's own leaves, not a copy
    assert tree.leaves(3).tolist() == [1.0, 2.0, 3.0] and tree.total == 6.0


def _prioritized_with_td_errors(alpha: float, epsilon: float,
                                td_errors: np.ndarray) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(16, alpha=alpha, epsilon=epsilon, seed=0)
    buffer.add(rows(0, len(td_errors)))
    buffer.update_priorities(np.arange(len(td_errors)), td_errors)
    return buffer


@pytest.mark.filterwarnings("ignore:Restoring a replay buffer of capacity")
@pytest.mark.parametrize("capacity", [16, 6])
def test_a_state_restored_under_another_alpha_and_epsilon_takes_their_priorities(capacity: int) -> None:
    """config_overrides={"replay_buffer_config": {"alpha": ...}} on restore: the stored priorities
    are (|td| + epsilon)^alpha of the saved run. Kept as they were, restored rows were drawn by
    the old rule and new ones by the new rule, with no error; they are re-expressed instead, as
    if this buffer had seen the same TD errors."""
    td_errors = np.array([0.0, 0.3, -2.0, 5.0, 0.01, -0.7, 1.5, 0.2])
    saved = _prioritized_with_td_errors(0.5, 0.01, td_errors)
    restored = PrioritizedReplayBuffer(capacity, alpha=1.0, epsilon=0.001, seed=0)
    restored.set_state(saved.get_state())
    expected = _prioritized_with_td_errors(1.0, 0.001, td_errors)
    kept = len(restored)
    np.testing.assert_allclose(restored.tree.leaves(kept), expected.tree.leaves(8)[8 - kept:], rtol=1e-9)
    np.testing.assert_allclose(restored.max_priority, expected.max_priority, rtol=1e-9)
    assert restored.max_priority == pytest.approx((5.0 + 0.001) ** 1.0)
    # A restore under the same alpha and epsilon stays exact.
    same = PrioritizedReplayBuffer(16, alpha=0.5, epsilon=0.01, seed=0)
    same.set_state(saved.get_state())
    np.testing.assert_array_equal(same.tree.sums, saved.tree.sums)


def test_priorities_saved_with_alpha_0_stay_those_of_new_rows() -> None:
    """With alpha 0 every priority is 1 and holds no TD error: the rows stay at 1, the largest
    priority of a fresh buffer, until they are replayed."""
    saved = _prioritized_with_td_errors(0.0, 1e-6, np.array([0.5, 3.0, 0.0]))
    restored = PrioritizedReplayBuffer(16, alpha=0.6, epsilon=1e-6, seed=0)
    restored.set_state(saved.get_state())
    assert restored.tree.leaves(3).tolist() == [1.0, 1.0, 1.0] and restored.max_priority == 1.0


@pytest.mark.parametrize("bad", [{"alpha": -1.0}, {"epsilon": float("nan")}, {"alpha": "0.6"}])
def test_a_state_with_an_invalid_alpha_or_epsilon_is_refused_and_changes_nothing(bad: dict) -> None:
    buffer = _prioritized_with_td_errors(0.6, 1e-6, np.array([0.5, 3.0]))
    sums = buffer.tree.sums.copy()
    state = {**_prioritized_with_td_errors(0.6, 1e-6, np.array([1.0, 2.0, 4.0])).get_state(), **bad}
    with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
        buffer.set_state(state)
    np.testing.assert_array_equal(buffer.tree.sums, sums)
    assert len(buffer) == 2


@pytest.mark.parametrize(("key", "value", "match"), [
    ("priorities", -3.0, "not finite numbers >= 0"), ("priorities", np.nan, "not finite numbers >= 0"),
    ("max_priority", np.inf, "max_priority=inf"), ("max_priority", -1.0, "max_priority=-1.0")])
def test_a_state_with_a_negative_or_non_finite_priority_is_refused(key: str, value: float,
                                                                   match: str) -> None:
    """A negative stored priority unbalanced the sum tree (the rows before it were never drawn,
    silently) and a NaN one made sampling fail with advice about epsilon; a damaged
    max_priority was given to every new row. Refused, and the buffer keeps what it held."""
    state = _prioritized_with_td_errors(0.6, 1e-6, np.arange(6.0)).get_state()
    if key == "priorities":
        state["priorities"] = state["priorities"].copy()
        state["priorities"][2] = value
    else:
        state[key] = value
    buffer = _prioritized_with_td_errors(0.6, 1e-6, np.array([0.5, 3.0]))
    sums = buffer.tree.sums.copy()
    with pytest.raises(ValueError, match=match):
        buffer.set_state(state)
    np.testing.assert_array_equal(buffer.tree.sums, sums)
    assert len(buffer) == 2


def test_make_replay_buffer_rejects_unknown_type() -> None:
    with pytest.raises(ValueError, match="Unknown replay buffer type"):
        make_replay_buffer({"type": "reservoir"})


def _fragment(first_obs: int, length: int) -> SampleBatch:
    """``length`` steps of one episode of one stream, going on past the fragment's end:
    obs ``first_obs, first_obs + 1, ...``, reward 1 each."""
    obs = np.arange(first_obs, first_obs + length, dtype=np.float32)[:, None]
    flags = np.zeros(length, dtype=bool)
    return SampleBatch({
        "obs": obs, "actions": np.zeros(length, np.int64), "rewards": np.ones(length, np.float32),
        "terminateds": flags, "truncateds": flags, "ends": np.r_[flags[:-1], True],
        "firsts": np.r_[first_obs == 0, flags[1:]], "next_obs": obs + 1, "streams": np.full(length, 7),
    })


@pytest.mark.parametrize("streams", [True, False], ids=["streams", "no_streams"])
def test_rows_held_under_a_longer_n_step_are_stored_when_nothing_can_join_them(streams: bool) -> None:
    """Rows held back for their sequel (n_step=3), restored where nothing joins them any more
    (n_step=1 on restore; or a batch without streams) are stored, each with the window it has,
    before the new rows. They stayed pending for good: lost from replay without a word, and
    carried in every later checkpoint."""
    held = NStepTransitions(0.5, 3)
    stored = held.add(_fragment(0, 4))
    assert stored["obs"][:, 0].tolist() == [0.0, 1.0]  # obs 2 and 3 wait for the next fragment
    restored = NStepTransitions(0.5, 1 if streams else 3)
    restored.set_state(held.get_state())
    sequel = _fragment(4, 2)
    if not streams:
        del sequel["streams"]
    rows = restored.add(sequel)
    assert restored.pending == {} and restored.get_state() == {}
    assert rows["obs"][:, 0].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert rows["next_obs"][:, 0].tolist() == ([3.0, 4.0, 5.0, 6.0] if streams else [4.0, 4.0, 6.0, 6.0])
    assert rows["rewards"].tolist() == ([1.0] * 4 if streams else [1.5, 1.0, 1.5, 1.0])
    assert rows["n_steps"].tolist() == ([1] * 4 if streams else [2, 1, 2, 1])
