"""The networks that act in numpy on views of their parameters (cairn's MLP, DQN's Q network,
the LSTM, SAC's actor, the Keras MLP; a user's model acts in torch) act with the parameters the
network holds now, also after a parameter was replaced (``load_state_dict(..., assign=True)``),
given other storage (``param.data = x``) or its layer replaced (``model.action_head = ...``):
changes their views could not see (cairn.numpy_acting.LiveViews)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.numpy_acting import LiveViews
from tests.models.nets import TwoHeads

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
OBS = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
STATE = [np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32) for _ in range(2)]
LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "hidden": [6]}


def _mlp(model: Any) -> tuple[np.ndarray, np.ndarray]:
    return model.numpy_action_inputs(OBS), model.action_inputs(torch.from_numpy(OBS)).numpy()


def _q(model: Any) -> tuple[np.ndarray, np.ndarray]:
    return model.numpy_q_values(OBS), model(torch.from_numpy(OBS)).numpy()


def _lstm(model: Any) -> tuple[np.ndarray, np.ndarray]:
    # [h, c] of 8 units for a shared LSTM, 16 (the actor's, then the critic's) for a critic of its own;
    # the critic's half of the state out is compared too.
    state = [np.tile(s, model.get_initial_state()[0].shape[0] // 8) for s in STATE]
    with torch.no_grad():
        inputs, _, out = model(torch.from_numpy(OBS)[:, None], [torch.from_numpy(s) for s in state])
    numpy_inputs, numpy_out = model.numpy_step(OBS, state)
    return (np.concatenate([numpy_inputs, *numpy_out], axis=-1),
            np.concatenate([inputs[:, 0], *out], axis=-1))


def _sac(actor: Any) -> tuple[np.ndarray, np.ndarray]:
    return actor.numpy_forward(OBS), torch.cat(actor(torch.from_numpy(OBS)), dim=-1).numpy()


def _model(made: Any) -> Any:
    return made.model if isinstance(made, cairn.Policy) else made


NETWORKS: dict[str, tuple[Callable[[], Any], Callable[[Any], tuple[np.ndarray, np.ndarray]]]] = {
    "mlp, Box actions (log_std)": (lambda: cairn.Policy(BOX, gym.spaces.Box(-1, 1, (2,)), seed=0), _mlp),
    "mlp, Discrete actions": (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), seed=0), _mlp),
    "dqn, dueling": (lambda: DQNPolicy(BOX, gym.spaces.Discrete(3), {"dueling": True}, seed=0), _q),
    "lstm, Box actions": (lambda: cairn.Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": LSTM}, seed=0),
                          _lstm),
    "lstm, shared layers": (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3),
                                                 {"model": {**LSTM, "vf_share_layers": True}}, seed=0),
                            _lstm),
    "user model": (lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": TwoHeads}},
                                        seed=0), _mlp),
    "sac actor": (lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"hidden": [6]}},
                                    seed=0).model.actor, _sac),
}
#: The layer each network's actions are read from (its output head), by attribute name.
HEADS = {"mlp, Box actions (log_std)": "action_head", "mlp, Discrete actions": "action_head",
         "dqn, dueling": "advantage_head", "lstm, Box actions": "action_head",
         "lstm, shared layers": "action_head", "user model": "pi",
         "sac actor": "mean_head"}


def _new_values(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(value.shape, generator=generator, dtype=value.dtype)
            for name, value in model.state_dict().items()}


def _assert_acts_as_torch(outputs: Callable[[Any], tuple[np.ndarray, np.ndarray]], model: Any) -> np.ndarray:
    with torch.no_grad():
        got, expected = outputs(model)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    return got


@pytest.mark.parametrize("name", list(NETWORKS))
def test_numpy_acting_follows_replaced_and_moved_parameters(name: str) -> None:
    make, outputs = NETWORKS[name]
    model = _model(make())
    before = _assert_acts_as_torch(outputs, model)  # the views are taken

    model.load_state_dict(_new_values(model, 1), assign=True)  # new Parameter objects
    replaced = _assert_acts_as_torch(outputs, model)
    assert not np.allclose(replaced, before)

    with torch.no_grad():
        for parameter, value in zip(model.parameters(), _new_values(model, 2).values(), strict=False):
            parameter.data = value.reshape(parameter.shape)  # same objects, other storage
    moved = _assert_acts_as_torch(outputs, model)
    assert not np.allclose(moved, replaced)


def test_the_keras_mlp_follows_parameters_given_other_storage() -> None:
    model = cairn.Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"framework": "keras"}}, seed=0).model
    before = _assert_acts_as_torch(_mlp, model)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data + 0.5
    assert not np.allclose(_assert_acts_as_torch(_mlp, model), before)


@pytest.mark.parametrize("name", list(NETWORKS))
def test_numpy_acting_follows_a_replaced_layer(name: str) -> None:
    """A new layer object in place of the old one: every table entry the old views were
    watching still holds its tensor, unchanged (today's main acted with the old layer)."""
    make, outputs = NETWORKS[name]
    model = _model(make())
    net = model.net if hasattr(model, "net") else model
    before = _assert_acts_as_torch(outputs, model)
    old = getattr(net, HEADS[name])
    new = torch.nn.Linear(old.in_features, old.out_features)
    with torch.no_grad():
        new.weight.copy_(old.weight + 1.0)
        new.bias.copy_(old.bias)
    setattr(net, HEADS[name], new)
    assert not np.allclose(_assert_acts_as_torch(outputs, model), before)


#: The trunks (``nn.Sequential`` of Linear and activation modules) each network acts through.
TRUNKS = {"mlp, Box actions (log_std)": ["actor"], "mlp, Discrete actions": ["actor"],
          "lstm, Box actions": ["trunk", "critic_trunk"], "lstm, shared layers": ["trunk"]}
#: Changes to a trunk's modules (not to any tensor), each made after the views were taken.
TRUNK_EDITS: dict[str, Callable[[torch.nn.Sequential], None]] = {
    "activation replaced": lambda trunk: trunk.__setitem__(1, torch.nn.ReLU()),
    "every activation replaced": lambda trunk: [trunk.__setitem__(i, torch.nn.ELU())
                                                         for i in range(1, len(trunk), 2)],
    "activation with other settings": lambda trunk: trunk.__setitem__(1, torch.nn.ELU(alpha=3.0)),
    "module appended": lambda trunk: trunk.append(torch.nn.LayerNorm(trunk[0].out_features)),
    "module inserted": lambda trunk: trunk.insert(1, torch.nn.Hardtanh(-0.1, 0.1)),
}


@pytest.mark.parametrize("edit", list(TRUNK_EDITS))
@pytest.mark.parametrize("name", list(TRUNKS))
def test_numpy_acting_follows_the_modules_of_its_trunks(name: str, edit: str) -> None:
    """The torch forward runs a trunk's modules; numpy acting ran the activation the network was
    built with through the trunk's Linear layers, and watched only the entries holding those: an
    activation replaced or a module added acted differently in numpy than in torch."""
    make, outputs = NETWORKS[name]
    for trunk_name in TRUNKS[name]:
        model = _model(make())
        if getattr(model, trunk_name) is None:
            continue
        before = _assert_acts_as_torch(outputs, model)  # the views are taken
        TRUNK_EDITS[edit](getattr(model, trunk_name))
        _assert_acts_as_torch(outputs, model)
        if trunk_name != "critic_trunk":  # the critic's state changes, not the actions
            assert not np.allclose(_assert_acts_as_torch(outputs, model), before)


def _linear_views(views: LiveViews[Any], layer: torch.nn.Module) -> tuple[np.ndarray, np.ndarray]:
    return views.get(layer)  # type: ignore[no-any-return]


def test_live_views_see_replaced_removed_and_moved_tensors_and_nothing_else() -> None:
    layer = torch.nn.Linear(2, 2)
    views: LiveViews[Any] = LiveViews(lambda m, view: (view(m.weight).T, view(m.bias)))
    first = _linear_views(views, layer)
    with torch.no_grad():
        layer.weight.add_(1.0)  # in place: the views see it
        layer.load_state_dict({"weight": torch.zeros(2, 2), "bias": torch.zeros(2)})  # copies in place
    assert not views.stale() and _linear_views(views, layer) is first
    layer.bias = torch.nn.Parameter(torch.ones(2))
    assert views.stale()
    np.testing.assert_array_equal(_linear_views(views, layer)[1], np.ones(2, np.float32))
    layer.register_parameter("bias", None)
    assert views.stale()
    for _ in range(2):  # the take fails, and nothing half-taken is kept to serve the next call
        with pytest.raises(AttributeError):
            _linear_views(views, layer)
    parent = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    views = LiveViews(lambda m, view: view(m[0].weight))
    views.get(parent)
    parent[1].weight.data = torch.zeros(2, 2)
    assert not views.stale()  # a tensor the views do not read
    parent[0].weight.data = torch.zeros(2, 2)
    assert views.stale()
    views.get(parent)
    parent[0] = torch.nn.Linear(2, 2)
    assert views.stale()


def test_live_views_see_a_tensor_given_another_layout_at_the_same_address() -> None:
    """``param.data = param.data.t()`` keeps a square weight's object and address and swaps its
    strides: views that compared addresses alone acted with the untransposed weight."""
    layer = torch.nn.Linear(3, 3)
    with torch.no_grad():
        layer.weight.copy_(torch.arange(9.0).reshape(3, 3))
    views: LiveViews[Any] = LiveViews(lambda m, view: view(m.weight))
    views.get(layer)
    address = layer.weight.data_ptr()
    layer.weight.data = layer.weight.data.t()
    assert layer.weight.data_ptr() == address and views.stale()
    np.testing.assert_array_equal(views.get(layer), layer.weight.detach().numpy().copy())
    np.testing.assert_array_equal(views.get(layer), np.arange(9.0, dtype=np.float32).reshape(3, 3).T)
    layer.register_buffer("counts", torch.zeros(2))
    views = LiveViews(lambda m, view: view(m.counts))
    views.get(layer)
    layer.counts.data = layer.counts.data.view(torch.int32)  # the same bytes as another dtype
    assert views.stale() and views.get(layer).dtype == np.int32


def test_live_views_refuse_a_tensor_the_module_does_not_hold_and_start_empty_in_a_copy() -> None:
    import copy

    layer = torch.nn.Linear(2, 2)
    outside = torch.zeros(2)
    with pytest.raises(TypeError, match="not one of its parameters or buffers"):
        LiveViews(lambda m, view: view(outside)).get(layer)
    views: LiveViews[Any] = LiveViews(lambda m, view: view(m.weight))
    views.get(layer)
    copied = copy.deepcopy(views)
    assert copied.stale() is False and copied.get(torch.nn.Linear(2, 2)) is not views.get(layer)
