"""Incremental saves with change markers (issue 29 item 6): a policy that did not change since
this algorithm wrote the previous checkpoint is linked without its state being gathered; one
whose weights, optimizer and filter did not change keeps its arrays file linked while its JSON
file is rewritten; and any change to any part of a policy's state reaches the checkpoint.

Each test saves, changes one policy (``p0``) through one path, saves again with
``previous=`` the first checkpoint, and requires the restored state of every policy to equal the
live one bit for bit (a stale linked file would not), while the untouched ``p1`` stays linked
(so the marker path is the one under test)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.checkpointing import save_algorithm
from cairn.checkpoint import load_algorithm_state
from cairn.policy.change_marker import mark_changed
from cairn.policy.recurrent import is_recurrent
from tests.algorithms.sac.multi_agent_pendulum import MultiAgentPendulum
from tests.helpers import assert_trees_equal, make_ma_cartpole, map_by_index, small_ma_ppo

FILES = ("cairn_checkpoint.json", "policy_state.json", "policy_state.safetensors")


def _ppo() -> cairn.Algorithm:
    return (small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=64, minibatch_size=32, num_epochs=1)
            .env_runners(observation_filter="MeanStdFilter").build())


def _ppo_lstm() -> cairn.Algorithm:
    return small_ma_ppo(2, model={"hidden": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4},
                        train_batch_size=64, minibatch_size=32, num_epochs=1).build()


def _dqn() -> cairn.Algorithm:
    return (cairn.DQNConfig().environment(make_ma_cartpole, env_config={"num_agents": 2})
            .training(train_batch_size=32, minibatch_size=16, num_steps_sampled_before_learning_starts=16,
                      model={"hidden": [8]})
            .env_runners(rollout_fragment_length=16)
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
            .debugging(seed=0).build())


def two_pendulums(env_config: dict[str, Any]) -> MultiAgentPendulum:
    return MultiAgentPendulum(2)


def _sac() -> cairn.Algorithm:
    return (cairn.SACConfig().environment(two_pendulums)
            .training(train_batch_size=32, minibatch_size=16, num_steps_sampled_before_learning_starts=16,
                      model={"hidden": [8]})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn={"agent_0": "p0", "agent_1": "p1"})
            .debugging(seed=0).build())


BUILDERS: dict[str, Callable[[], cairn.Algorithm]] = {"ppo": _ppo, "ppo_lstm": _ppo_lstm, "dqn": _dqn,
                                                      "sac": _sac}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def trained(request: pytest.FixtureRequest) -> Iterator[tuple[str, cairn.Algorithm]]:
    algo = BUILDERS[request.param]()
    algo.train()
    algo.train()  # both policies learned: optimizers built, counters and filters moved
    yield request.param, algo
    algo.stop()


def _linked(a: str, b: str, pid: str) -> dict[str, bool]:
    return {name: os.stat(f"{a}/policies/{pid}/{name}").st_ino == os.stat(f"{b}/policies/{pid}/{name}").st_ino
            for name in FILES}


def _assert_saved_live_state(path: str, algo: cairn.Algorithm) -> None:
    stored = load_algorithm_state(path)["policies"]
    for pid, policy in algo.policies.items():
        assert_trees_equal(stored[pid], policy.get_state(), f"{pid}")


def _save_changed(algo: cairn.Algorithm, tmp: Path, change: Callable[[], Any]) -> dict[str, bool]:
    """Save, ``change()``, save against the first; check the second; return p0's linked files."""
    first = save_algorithm(algo, tmp / "first")
    change()
    second = save_algorithm(algo, tmp / "second", previous=first)
    _assert_saved_live_state(second, algo)
    assert all(_linked(first, second, "p1").values()), "the untouched policy was not linked"
    return _linked(first, second, "p0")


# ------------------------------------------------------------------ every leaf of get_state
def _leaves(tree: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _leaves(value, (*path, i))
    elif isinstance(tree, np.ndarray) or (isinstance(tree, (int, float)) and tree is not None):
        yield path


def _perturbed(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        out = value.copy()
        flat = out.reshape(-1)
        if flat.size:
            index = min(100, flat.size - 1)  # inside the torch generator's Mersenne Twister words
            flat[index] = (flat[index] ^ 1) if out.dtype.kind in "iub" else flat[index] * 1.5 + 0.25
        return out
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return value * 1.5 + 0.25


def test_a_change_to_any_leaf_of_a_policy_state_is_saved(trained, tmp_path):
    """Every leaf of ``get_state()`` (weights, optimizer moments, steps and hyperparameters,
    filter statistics, counters, exploration, DQN's target network, SAC's alpha and target
    critics, both generators), changed through ``set_state``, reaches the next checkpoint."""
    _, algo = trained
    policy = algo.get_policy("p0")
    skipped = {"spec", "params"}  # the spec is not restored by set_state; params are indices
    paths = [p for p in _leaves(policy.get_state()) if not skipped & set(map(str, p))]
    assert len(paths) > 20
    original = policy.get_state()
    previous = save_algorithm(algo, tmp_path / "c")
    try:
        for i, path in enumerate(paths):
            state = policy.get_state()
            node = state
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = _perturbed(node[path[-1]])
            policy.set_state(state)
            current = save_algorithm(algo, tmp_path / f"c{i}", previous=previous)
            _assert_saved_live_state(current, algo)
            assert all(_linked(previous, current, "p1").values()), path
            previous = current
    finally:
        policy.set_state(original)  # the module's later tests train on


# ------------------------------------------------------- each part through its normal path
def _parameter(algo: cairn.Algorithm) -> torch.Tensor:
    return next(algo.get_policy("p0").model.parameters())


def _optimizer_step(algo: cairn.Algorithm) -> None:
    """One step of the policy's own (fused Adam) optimizer: it writes parameters and moments
    without bumping their version counters, and num_grad_updates stays."""
    policy = algo.get_policy("p0")
    policy.optimizer.zero_grad()
    sum((p * p).sum() for p in policy.model.parameters() if p.requires_grad).backward()
    policy.optimizer.step()


def _moment(algo: cairn.Algorithm) -> torch.Tensor:
    optimizer = algo.get_policy("p0").optimizer
    return next(v for slots in optimizer.state.values() for k, v in slots.items() if k == "exp_avg")


def _moments_scaled(state: dict[str, Any], factor: float) -> dict[str, Any]:
    return {**state, "state": {i: {k: v * factor if k.startswith("exp_avg") else v for k, v in slots.items()}
                               for i, slots in state["state"].items()}}


def _no_grad(fn: Callable[[], Any]) -> None:
    with torch.no_grad():
        fn()


def _add(algo: cairn.Algorithm, counter: str, n: int) -> None:
    policy = algo.get_policy("p0")
    setattr(policy, counter, getattr(policy, counter) + n)


def _act(algo: cairn.Algorithm) -> None:
    policy = algo.get_policy("p0")
    obs = np.stack([policy.observation_space.sample() for _ in range(4)])
    state = [np.stack([s] * 4) for s in policy.get_initial_state()] if is_recurrent(policy) else None
    policy.compute_actions(obs, explore=True, state=state)


CHANGES: dict[str, Callable[[cairn.Algorithm], Any]] = {
    "set_weights": lambda a: a.get_policy("p0").set_weights(
        {k: v + 1 for k, v in a.get_policy("p0").get_weights().items()}),
    "parameter edited in place under no_grad": lambda a: _no_grad(lambda: _parameter(a).mul_(1.5)),
    "parameter edited in place under inference_mode": lambda a: torch.inference_mode()(
        lambda: _parameter(a).add_(0.5))(),
    "parameter written through a numpy view, then mark_changed": lambda a: (
        _parameter(a).detach().numpy().__iadd__(0.5), mark_changed(a.get_policy("p0"))),
    "parameter storage swapped (param.data = ..., no version bump)": lambda a: setattr(
        _parameter(a), "data", _parameter(a).detach() + 1.0),
    "optimizer state loaded (new moment tensors)": lambda a: a.get_policy("p0").optimizer.load_state_dict(
        _moments_scaled(a.get_policy("p0").optimizer.state_dict(), 2.0)),
    "optimizer step": _optimizer_step,
    "optimizer moment edited in place": lambda a: _no_grad(lambda: _moment(a).add_(1.0)),
    "learning rate": lambda a: a.get_policy("p0").set_learning_rate(0.123),
    "torch generator drawn from": lambda a: torch.rand(3, generator=a.get_policy("p0").generator),
    "acting (numpy generator)": _act,
    "global_timestep": lambda a: _add(a, "global_timestep", 7),
    "num_grad_updates": lambda a: _add(a, "num_grad_updates", 1),
    "config": lambda a: a.get_policy("p0").config.__setitem__("lr", 0.5),
}
#: The changes that leave the weights, the optimizer state and the filter alone.
JSON_ONLY = {"acting (numpy generator)", "global_timestep", "learning rate", "config", "last target update",
             "epsilon"}
PER_KIND: dict[str, dict[str, Callable[[cairn.Algorithm], Any]]] = {
    "ppo": {
        "filter updated": lambda a: a.get_policy("p0").observation_filter.update(
            np.ones((3, a.get_policy("p0").preprocessor.size), dtype=np.float32)),
        "filter statistics edited in place": lambda a: a.get_policy("p0").observation_filter.mean.__iadd__(
            1.0),
    },
    "dqn": {
        "target network updated": lambda a: a.get_policy("p0").update_target(),
        "target network edited in place": lambda a: _no_grad(
            lambda: next(a.get_policy("p0").target_model.parameters()).add_(1.0)),
        "last target update": lambda a: _add(a, "last_target_update", 3),
        "epsilon": lambda a: a.get_policy("p0").set_exploration_state({"epsilon": 0.625}),
        "numpy update (no optimizer.step, no counter)": lambda a: _numpy_update(a),
    },
    "ppo_lstm": {},
    "sac": {
        "alpha": lambda a: _no_grad(lambda: a.get_policy("p0").model.log_alpha.add_(0.5)),
        "target critics soft update": lambda a: a.get_policy("p0").model.update_targets(0.5),
    },
}


def _numpy_update(algo: cairn.Algorithm) -> None:
    from cairn.algorithms.dqn.numpy_update import numpy_dqn_update

    policy = algo.get_policy("p0")
    obs = np.ones((4, policy.preprocessor.size), dtype=np.float32)
    numpy_dqn_update(policy.model, policy.optimizer, obs, np.zeros(4, dtype=np.int64),
                     np.ones(4, dtype=np.float32), loss_fn="huber", grad_clip=None)


def test_each_part_changed_through_its_usual_path_is_saved(trained, tmp_path):
    kind, algo = trained
    for i, (name, change) in enumerate({**CHANGES, **PER_KIND[kind]}.items()):
        linked = _save_changed(algo, tmp_path / str(i), lambda change=change: change(algo))
        assert not linked["policy_state.json"], name  # every change shows in the JSON or both files
        assert linked["policy_state.safetensors"] is (name in JSON_ONLY), name


def test_training_and_restoring_are_saved(trained, tmp_path):
    _, algo = trained
    older = save_algorithm(algo, tmp_path / "older")
    algo.train()
    for i, change in enumerate([lambda: algo.train(),
                                lambda: algo.restore_from_path(older, component="policies/p0"),
                                lambda: algo.restore_from_path(older, component="policies/p1/weights")]):
        first = save_algorithm(algo, tmp_path / f"a{i}")
        change()
        second = save_algorithm(algo, tmp_path / f"b{i}", previous=first)
        _assert_saved_live_state(second, algo)


# ------------------------------------------------------------------------------ self-play
def _frozen_opponent() -> cairn.Algorithm:
    return small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=64, minibatch_size=32,
                        num_epochs=1).multi_agent(policies_to_train=["p0"]).build()


def test_a_frozen_opponent_that_acts_keeps_its_arrays_linked_and_unchanged_policies_are_not_gathered(
        tmp_path, monkeypatch):
    algo = _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")
        algo.train()  # p0 learns; p1 only acts (its generator and timestep move)
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        _assert_saved_live_state(second, algo)
        assert _linked(first, second, "p1") == {"cairn_checkpoint.json": False, "policy_state.json": False,
                                                "policy_state.safetensors": True}
        assert not any(_linked(first, second, "p0").values())
        # Nothing happened since: p1's state is not even gathered, every file is linked.
        monkeypatch.setattr(algo.get_policy("p1"), "get_state", lambda **_: pytest.fail("gathered"))
        third = save_algorithm(algo, tmp_path / "c3", previous=second)
        assert all(_linked(second, third, "p1").values())
    finally:
        algo.stop()


def test_on_s3_a_frozen_opponent_that_acts_has_its_arrays_copied_server_side(s3):
    algo = _frozen_opponent()
    options = s3.storage_options
    try:
        algo.train()
        first = save_algorithm(algo, s3.url("run/c1"), storage_options=options)
        algo.train()
        s3.server.reset_requests()
        second = save_algorithm(algo, s3.url("run/c2"), storage_options=options, previous=first)
        copies = {p.split("/run/c2/", 1)[1] for m, p in s3.server.requests("COPY")}
        uploads = {p.split("/run/c2/", 1)[1] for m, p in s3.server.requests("PUT") if "/run/c2/" in p}
        assert copies == {"policies/p1/policy_state.safetensors"}
        assert {"policies/p1/policy_state.json", "policies/p1/cairn_checkpoint.json"} <= uploads
        stored = load_algorithm_state(second, storage_options=options)["policies"]
        for pid, policy in algo.policies.items():
            assert_trees_equal(stored[pid], policy.get_state(), pid)
    finally:
        algo.stop()


def test_a_previous_checkpoint_rewritten_by_another_algorithm_is_not_trusted(tmp_path):
    algo, other = _frozen_opponent(), _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")  # remembered by algo...
        other.train()
        other.train()
        save_algorithm(other, tmp_path / "c1")  # ...then replaced by another run's checkpoint
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        _assert_saved_live_state(second, algo)
    finally:
        algo.stop()
        other.stop()


def test_background_saves_of_a_manager_link_the_frozen_opponent(tmp_path):
    algo = _frozen_opponent()
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=2)
    try:
        for _ in range(3):
            manager.save(algo, algo.train(), blocking=False)
        manager.wait()
        older, latest = (c.path for c in manager.checkpoints())
        assert _linked(older, latest, "p1")["policy_state.safetensors"]
        _assert_saved_live_state(latest, algo)
    finally:
        algo.stop()


def test_a_state_with_a_key_no_marker_compares_is_always_gathered(tmp_path, monkeypatch):
    algo = _frozen_opponent()
    try:
        algo.train()
        policy, extra = algo.get_policy("p1"), [0]
        own = policy.get_state
        monkeypatch.setattr(policy, "get_state", lambda **kw: {**own(**kw), "extra": extra[0]})
        first = save_algorithm(algo, tmp_path / "c1")
        extra[0] = 1  # nothing a marker sees
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        assert load_algorithm_state(second)["policies"]["p1"]["extra"] == 1
    finally:
        algo.stop()


def all_to_p0(agent_id: str, **kwargs: Any) -> str:
    return "p0"


def test_policies_added_and_removed_between_saves(tmp_path):
    """League play: a frozen copy of the learner is added, an old one removed."""
    algo = _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")
        snapshot = cairn.Policy.from_state(algo.get_policy("p0").get_state())
        algo.add_policy("p2", snapshot)
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        _assert_saved_live_state(second, algo)
        algo.remove_policy("p1", policy_mapping_fn=all_to_p0)
        algo.add_policy("p1", snapshot)  # another policy under an ID the previous checkpoint has
        third = save_algorithm(algo, tmp_path / "c3", previous=second)
        _assert_saved_live_state(third, algo)
        assert all(_linked(second, third, "p2").values()) and not any(_linked(second, third, "p1").values())
    finally:
        algo.stop()
