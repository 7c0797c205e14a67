"""Incremental saves link a file from the previous checkpoint only when its content is proven
equal to what a full save would write now (issue 36 item 2; docs/checkpoints.md, "Incremental
saves").

Each test saves, changes policy ``p0`` through one of the ways a user can, saves again with
``previous=`` the first checkpoint, and requires the restored state of every policy to equal the
live one bit for bit (a stale linked file would not), while the untouched ``p1`` stays linked
(so the reuse path is the one under test). Most ways below change tensors without bumping
torch's version counters, or swap their storage: what fooled the change markers this proof
replaced (16 of 81 such edits were linked stale)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.save_restore import save_algorithm
from cairn.checkpoint import load_algorithm_state
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


@pytest.fixture(scope="module")
def algorithms() -> Iterator[dict[str, cairn.Algorithm]]:
    """One trained algorithm of each kind, built on first use and shared by the module's tests."""
    built: dict[str, cairn.Algorithm] = {}
    yield built
    for algo in built.values():
        algo.stop()


def trained(algorithms: dict[str, cairn.Algorithm], kind: str) -> cairn.Algorithm:
    if kind not in algorithms:
        algo = algorithms[kind] = BUILDERS[kind]()
        algo.train()
        algo.train()  # both policies learned: optimizers built, counters and filters moved
    return algorithms[kind]


def linked(a: str, b: str, pid: str) -> dict[str, bool]:
    """Which of policy ``pid``'s files checkpoint ``b`` took (hard-linked) from ``a``."""
    return {name: os.stat(f"{a}/policies/{pid}/{name}").st_ino == os.stat(f"{b}/policies/{pid}/{name}").st_ino
            for name in FILES}


def assert_saved_live_state(path: str, algo: cairn.Algorithm) -> None:
    """The checkpoint at ``path`` restores every policy's live state bit for bit."""
    stored = load_algorithm_state(path)["policies"]
    for pid, policy in algo.policies.items():
        assert_trees_equal(stored[pid], policy.get_state(), f"{pid}")


# --------------------------------------------------------------- the ways a user changes state
def _networks(policy: cairn.Policy) -> list[torch.nn.Module]:
    target = getattr(policy, "target_model", None)
    return [policy.model] + ([target] if isinstance(target, torch.nn.Module) else [])


def _tensors(policy: cairn.Policy) -> list[torch.Tensor]:
    """Every floating tensor of the policy's networks (SAC's target critics and alpha, DQN's
    target network, the LSTM's weights included), in a fixed order."""
    return [t for module in _networks(policy) for t in (*module.parameters(), *module.buffers())
            if t.is_floating_point()]


def _pairs(algo: cairn.Algorithm) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(p0's tensor, p1's matching tensor): the league idiom copies one policy into another."""
    pairs = list(zip(_tensors(algo.get_policy("p0")), _tensors(algo.get_policy("p1")), strict=True))
    assert pairs and all(a.shape == b.shape for a, b in pairs)
    return pairs


def _copy_data(algo: cairn.Algorithm) -> None:
    """The league idiom: ``p.data.copy_(q.data)`` (no version counter moves)."""
    for p, q in _pairs(algo):
        p.data.copy_(q.data * 1.25 + 0.5)  # never what p0 held, even where p1 equals p0


def _add_data(algo: cairn.Algorithm) -> None:
    for p in _tensors(algo.get_policy("p0")):
        p.data.add_(0.75)


def _in_place_no_grad(algo: cairn.Algorithm) -> None:
    with torch.no_grad():
        for p in _tensors(algo.get_policy("p0")):
            p.mul_(1.5).add_(0.25)


def _numpy_view(algo: cairn.Algorithm) -> None:
    for p in _tensors(algo.get_policy("p0")):
        view = p.detach().numpy()
        view += 0.5


def _dlpack_view(algo: cairn.Algorithm) -> None:
    for p in _tensors(algo.get_policy("p0")):
        torch.from_dlpack(p.detach()).sub_(0.375)  # another tensor (its own counter), same memory


def _storage_fill(algo: cairn.Algorithm) -> None:
    for p in _tensors(algo.get_policy("p0")):
        p.untyped_storage().fill_(63)  # every byte 0x3f: finite floats


def _set_alias(algo: cairn.Algorithm) -> None:
    """Each of p0's tensors made an alias of new memory (``set_``), then that memory written
    through the other name."""
    sources = []
    with torch.no_grad():
        for p, q in _pairs(algo):
            source = q.detach().clone()
            p.set_(source)
            sources.append(source)
    for source in sources:
        source.add_(2.0)


def _load_state_dict(algo: cairn.Algorithm) -> None:
    for mine, theirs in zip(_networks(algo.get_policy("p0")), _networks(algo.get_policy("p1")), strict=True):
        mine.load_state_dict({k: v + 0.5 if v.is_floating_point() else v
                              for k, v in theirs.state_dict().items()})


def _set_weights(algo: cairn.Algorithm) -> None:
    algo.get_policy("p0").set_weights({k: v - 1.0 for k, v in algo.get_policy("p1").get_weights().items()})


def _set_state(algo: cairn.Algorithm) -> None:
    """The whole state of the other policy (weights, optimizer, filter, generators, counters)."""
    algo.get_policy("p0").set_state(algo.get_policy("p1").get_state())


def _moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for slots in optimizer.state.values() for k, v in slots.items() if k.startswith("exp_avg")]


def _optimizer_load_state_dict(algo: cairn.Algorithm) -> None:
    optimizer = algo.get_policy("p0").optimizer
    state = optimizer.state_dict()
    optimizer.load_state_dict({**state, "state": {
        i: {k: v * 2.0 + 1.0 if k.startswith("exp_avg") else v for k, v in slots.items()}
        for i, slots in state["state"].items()}})


def _optimizer_moments_through_data(algo: cairn.Algorithm) -> None:
    for moment in _moments(algo.get_policy("p0").optimizer):
        moment.data.add_(1.0)


def _new_optimizer(algo: cairn.Algorithm) -> None:
    policy = algo.get_policy("p0")
    policy.optimizer = policy.make_optimizer()  # no moments yet


def _new_optimizer_trained(algo: cairn.Algorithm) -> None:
    """A new optimizer that stepped once: moments and parameters written by a fused kernel."""
    policy = algo.get_policy("p0")
    optimizer = policy.make_optimizer()
    policy.optimizer = optimizer
    optimizer.zero_grad()
    sum((p * p).sum() for p in policy.model.parameters() if p.requires_grad).backward()
    optimizer.step()


def _filter_update(algo: cairn.Algorithm) -> None:
    policy = algo.get_policy("p0")
    policy.observation_filter.update(np.ones((3, policy.preprocessor.size), dtype=np.float32))


def _filter_in_place(algo: cairn.Algorithm) -> None:
    state = algo.get_policy("p0").observation_filter.get_state(copy=False)
    arrays = [v for v in state.values() if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    assert arrays, "the filter holds no arrays"
    for array in arrays:
        array += 1.0


def _torch_generator_drawn(algo: cairn.Algorithm) -> None:
    torch.rand(3, generator=algo.get_policy("p0").generator)


def _torch_generator_reseeded(algo: cairn.Algorithm) -> None:
    algo.get_policy("p0").generator.manual_seed(12345)


def _numpy_generator(algo: cairn.Algorithm) -> None:
    algo.get_policy("p0").np_random.random(5)


def _act(algo: cairn.Algorithm) -> None:
    policy = algo.get_policy("p0")
    obs = np.stack([policy.observation_space.sample() for _ in range(4)])
    state = [np.stack([s] * 4) for s in policy.get_initial_state()] if is_recurrent(policy) else None
    policy.compute_actions(obs, explore=True, state=state)


WAYS: dict[str, Callable[[cairn.Algorithm], Any]] = {
    "p.data.copy_(q.data)": _copy_data,
    "p.data.add_": _add_data,
    "in place under torch.no_grad": _in_place_no_grad,
    "through a numpy view from .numpy()": _numpy_view,
    "through a DLPack view": _dlpack_view,
    "untyped_storage().fill_": _storage_fill,
    "set_() alias, then written through the alias": _set_alias,
    "module.load_state_dict": _load_state_dict,
    "set_weights": _set_weights,
    "set_state": _set_state,
    "optimizer.load_state_dict": _optimizer_load_state_dict,
    "optimizer moments through .data": _optimizer_moments_through_data,
    "a new optimizer": _new_optimizer,
    "a new optimizer that stepped": _new_optimizer_trained,
    "torch generator drawn from": _torch_generator_drawn,
    "torch generator reseeded": _torch_generator_reseeded,
    "numpy generator drawn from": _numpy_generator,
    "acting": _act,
}
#: Changes to the observation filter: only the PPO algorithm here has one (MeanStdFilter).
FILTER_WAYS: dict[str, Callable[[cairn.Algorithm], Any]] = {
    "filter updated": _filter_update,
    "filter statistics edited in place": _filter_in_place,
}
CASES = [(kind, way) for kind in sorted(BUILDERS) for way in WAYS] + [("ppo", way) for way in FILTER_WAYS]


@pytest.mark.parametrize(("kind", "way"), CASES, ids=[f"{k}-{w}" for k, w in CASES])
def test_every_way_of_changing_a_policy_reaches_the_next_incremental_save(algorithms, kind, way, tmp_path):
    algo = trained(algorithms, kind)
    change = {**WAYS, **FILTER_WAYS}[way]
    first = save_algorithm(algo, tmp_path / "first")
    before = algo.get_policy("p0").get_state()
    change(algo)
    with pytest.raises(AssertionError):  # the change is real: it shows in the state
        assert_trees_equal(algo.get_policy("p0").get_state(), before)
    second = save_algorithm(algo, tmp_path / "second", previous=first)
    assert_saved_live_state(second, algo)
    assert all(linked(first, second, "p1").values()), "the untouched policy was not linked"
    # And once more from the second checkpoint, the changed policy now unchanged: linked whole.
    third = save_algorithm(algo, tmp_path / "third", previous=second)
    assert_saved_live_state(third, algo)
    assert all(linked(second, third, "p0").values())


# ------------------------------------------------------------- every leaf of get_state
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


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_a_change_to_any_leaf_of_a_policy_state_is_saved(algorithms, kind, tmp_path):
    """Every leaf of ``get_state()`` (weights, optimizer moments, steps and hyperparameters,
    filter statistics, counters, exploration, DQN's target network, SAC's alpha and target
    critics, both generators), changed through ``set_state``, reaches the next checkpoint."""
    algo = trained(algorithms, kind)
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
            assert_saved_live_state(current, algo)
            assert all(linked(previous, current, "p1").values()), path
            previous = current
    finally:
        policy.set_state(original)  # the module's later tests go on from here


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_training_and_restoring_are_saved(algorithms, kind, tmp_path):
    algo = trained(algorithms, kind)
    older = save_algorithm(algo, tmp_path / "older")
    algo.train()
    for i, change in enumerate([lambda: algo.train(),
                                lambda: algo.restore_from_path(older, component="policies/p0"),
                                lambda: algo.restore_from_path(older, component="policies/p1/weights")]):
        first = save_algorithm(algo, tmp_path / f"a{i}")
        change()
        second = save_algorithm(algo, tmp_path / f"b{i}", previous=first)
        assert_saved_live_state(second, algo)


# ---------------------------------------------------------------------------- self-play
def _frozen_opponent() -> cairn.Algorithm:
    return small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=64, minibatch_size=32,
                        num_epochs=1).multi_agent(policies_to_train=["p0"]).build()


def test_a_frozen_opponent_that_acts_keeps_its_arrays_linked_and_an_idle_one_is_linked_whole(tmp_path):
    algo = _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")
        algo.train()  # p0 learns; p1 only acts (its generator and timestep move)
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        assert_saved_live_state(second, algo)
        assert linked(first, second, "p1") == {"cairn_checkpoint.json": False, "policy_state.json": False,
                                               "policy_state.safetensors": True}
        assert not any(linked(first, second, "p0").values())
        third = save_algorithm(algo, tmp_path / "c3", previous=second)  # nothing happened since
        assert all(linked(second, third, "p1").values()) and all(linked(second, third, "p0").values())
    finally:
        algo.stop()


def test_after_a_restart_the_previous_checkpoint_is_reused_by_content(tmp_path):
    """A new Algorithm restored from the previous checkpoint (as a new process would be) links
    what is proven equal, and nothing it changed behind torch's back (the league idiom)."""
    algo = _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")
    finally:
        algo.stop()
    resumed = cairn.Algorithm.from_checkpoint(first)
    try:
        second = save_algorithm(resumed, tmp_path / "c2", previous=first)
        assert all(linked(first, second, "p1").values()) and all(linked(first, second, "p0").values())
        resumed.train()  # p0 learns, p1 acts
        third = save_algorithm(resumed, tmp_path / "c3", previous=second)
        assert linked(second, third, "p1")["policy_state.safetensors"]
        assert not any(linked(second, third, "p0").values())
        learner, opponent = resumed.get_policy("p0").model, resumed.get_policy("p1").model
        for p, q in zip(opponent.parameters(), learner.parameters()):
            p.data.copy_(q.data)  # the league idiom: the opponent becomes the learner's copy
        fourth = save_algorithm(resumed, tmp_path / "c4", previous=third)
        assert not linked(third, fourth, "p1")["policy_state.safetensors"]
        assert_saved_live_state(fourth, resumed)
    finally:
        resumed.stop()


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


def test_a_previous_checkpoint_rewritten_by_another_algorithm_is_compared_as_it_is_now(tmp_path):
    algo, other = _frozen_opponent(), _frozen_opponent()
    try:
        algo.train()
        first = save_algorithm(algo, tmp_path / "c1")
        other.train()
        other.train()
        save_algorithm(other, tmp_path / "c1")  # replaced by another run's checkpoint
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        assert_saved_live_state(second, algo)
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
        assert linked(older, latest, "p1")["policy_state.safetensors"]
        assert_saved_live_state(latest, algo)
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
        assert_saved_live_state(second, algo)
        algo.remove_policy("p1", policy_mapping_fn=all_to_p0)
        algo.add_policy("p1", cairn.Policy.from_state(algo.get_policy("p0").get_state()))
        third = save_algorithm(algo, tmp_path / "c3", previous=second)
        assert_saved_live_state(third, algo)
        assert all(linked(second, third, "p2").values()) and not any(linked(second, third, "p1").values())
    finally:
        algo.stop()
