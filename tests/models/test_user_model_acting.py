"""Users' models act as they learn (issue 36, item 5): acting runs the model's own torch code as
it is at that moment, attributes and Python branches included, so a policy's action inputs
always equal ``forward``'s. (Until issue 36 a torch.fx translation, made once, baked Python
attributes in as constants: a temperature changed after the first act was ignored.)"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.policy.action_masking import MASKED_SCORE
from tests.models.nets import (
    ActorScalesInPlace,
    CriticScalesInPlace,
    DictParts,
    GRUScalesInPlace,
    ModeRecorder,
    NoisyActor,
    NoisyHeads,
    NoisyQ,
    PenaltyMask,
    QScalesInPlace,
    RecordingScalesInPlace,
    ScalesInPlace,
    SmallActor,
    SmallQ,
    TD3ActorScalesInPlace,
    TwoHeads,
)

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
MASKED = gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})
OBS = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)


class Tempered(TwoHeads):
    """Logits scaled by a plain Python attribute, changed between acts (a temperature schedule)."""

    inv_temperature = 1.0

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = super().forward(obs)
        return logits * self.inv_temperature, value


class Flagged(TwoHeads):
    """``forward`` branches on a Python flag (say, an evaluation mode the user toggles)."""

    flipped = False

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = super().forward(obs)
        if self.flipped:
            logits = -logits.flip(-1)
        return logits, value


def _forward_now(model: Any, obs: np.ndarray) -> np.ndarray:
    """What the learner computes: the model's torch forward as it is now."""
    with torch.no_grad():
        return model(torch.from_numpy(obs))[0].numpy()  # type: ignore[no-any-return]


def test_acting_sees_a_python_attribute_changed_after_the_first_act() -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": Tempered}}, seed=0)
    np.testing.assert_allclose(policy.compute_action_inputs(OBS), _forward_now(policy.model, OBS),
                               rtol=1e-5, atol=1e-6)  # the first act (main: traced here)
    policy.model.inv_temperature = 4.0
    acted = policy.compute_action_inputs(OBS)
    gap = float(np.abs(acted - _forward_now(policy.model, OBS)).max())
    assert gap == 0.0, f"acted {gap:.3g} away from forward"  # main: 2.39 away (the trace kept 1.0)


def test_acting_follows_a_python_branch_of_forward() -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": Flagged}}, seed=0)
    before = policy.compute_action_inputs(OBS)
    policy.model.flipped = True
    after = policy.compute_action_inputs(OBS)
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, _forward_now(policy.model, OBS))


def test_training_is_seen_at_once() -> None:
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": TwoHeads}}, seed=0)
    before = policy.compute_action_inputs(OBS)
    logits, _ = policy.model(torch.from_numpy(OBS))
    logits.sum().backward()
    policy.optimizer.step()  # in place, as PPO's learner does
    after = policy.compute_action_inputs(OBS)
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, _forward_now(policy.model, OBS))


def test_a_q_model_and_its_deep_copy_act_as_they_are() -> None:
    policy = DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": SmallQ}}, seed=0)
    policy.model.numpy_q_values(OBS)
    target = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.5)
    with torch.no_grad():
        np.testing.assert_array_equal(target.numpy_q_values(OBS), target(torch.from_numpy(OBS)).numpy())
        np.testing.assert_array_equal(policy.model.numpy_q_values(OBS),
                                      policy.model(torch.from_numpy(OBS)).numpy())
    assert not np.allclose(target.numpy_q_values(OBS), policy.model.numpy_q_values(OBS))


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_sac_actors_and_dict_readers_act_as_their_forward(action_space: Any) -> None:
    actor = SmallActor(BOX, gym.spaces.Box(-1, 1, (2,)), 2, {})
    with torch.no_grad():
        np.testing.assert_array_equal(actor.numpy_forward(OBS), torch.cat(actor(torch.from_numpy(OBS)), -1))
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                             "mode": gym.spaces.Discrete(3)})
    model = DictParts(space, action_space, 2, {})
    rows = np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32)
    np.testing.assert_array_equal(model.numpy_action_inputs(rows), _forward_now(model, rows))


def _in_eval_mode(model: torch.nn.Module, fn: Any) -> Any:
    mode = model.training
    model.train(False)
    try:
        with torch.no_grad():
            return fn()
    finally:
        model.train(mode)


def test_a_model_with_dropout_and_batchnorm_acts_in_eval_mode_and_learns_in_training_mode() -> None:
    """Acting is what an exported model does (eval mode): before, a user's Dropout made greedy
    actions random (two calls on the same observations differed) and BatchNorm's statistics moved
    with every act. The learner still trains the model in training mode."""
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": NoisyHeads}}, seed=0)
    model = policy.model
    assert not model.training  # a policy's networks rest in eval mode
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}
    first = policy.compute_action_inputs(OBS)
    np.testing.assert_array_equal(policy.compute_action_inputs(OBS), first)
    expected = _in_eval_mode(model, lambda: model(torch.from_numpy(OBS))[0].numpy())
    np.testing.assert_array_equal(first, expected)
    actions = [policy.compute_actions(OBS, explore=False)[0] for _ in range(3)]
    assert all(np.array_equal(actions[0], a) for a in actions[1:])
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats.items())  # statistics unmoved
    assert not model.training
    # A model the user put in training mode acts in eval mode all the same, and is handed back so.
    model.train()
    np.testing.assert_array_equal(policy.compute_action_inputs(OBS), first)
    assert model.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats.items())

    algo = (cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                      model={"custom_model": NoisyHeads}).build())
    try:
        model = algo.get_policy().model
        before = {k: v.clone() for k, v in model.state_dict().items() if "running_mean" in k}
        algo.train()
        assert not model.training  # back at rest after the learn function
        # The minibatches ran in training mode: BatchNorm's statistics moved.
        assert any(not torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    finally:
        algo.stop()


def test_learn_functions_run_in_training_mode_and_leave_eval_mode_also_when_they_raise() -> None:
    """Every forward with gradients (the losses) runs in training mode, every forward without
    (acting, GAE's values) in eval mode; a learn function that raises leaves the networks at rest
    in eval mode, and the next iteration learns in training mode again."""
    ModeRecorder.seen = []
    ModeRecorder.fail_learning = False
    algo = (cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                      model={"custom_model": ModeRecorder}).build())
    try:
        model = algo.get_policy().model
        algo.train()
        seen = set(ModeRecorder.seen)
        assert seen == {(True, True), (False, False)}, seen
        ModeRecorder.fail_learning = True
        with pytest.raises(RuntimeError, match="a loss that fails"):
            algo.train()
        assert not model.training
        ModeRecorder.fail_learning = False
        ModeRecorder.seen = []
        algo.train()
        assert set(ModeRecorder.seen) == {(True, True), (False, False)}
        assert not model.training
    finally:
        ModeRecorder.fail_learning = False
        algo.stop()


def test_a_users_q_model_rests_in_eval_mode_and_learns_in_training_mode() -> None:
    NoisyQ.seen = []
    algo = (cairn.DQNConfig().environment("CartPole-v1").debugging(seed=0)
            .training(num_steps_sampled_before_learning_starts=32, train_batch_size=16, minibatch_size=16,
                      model={"custom_model": NoisyQ}).env_runners(rollout_fragment_length=64).build())
    try:
        policy = algo.get_policy()
        assert policy.switches_modes and not policy.model.training
        assert not policy.target_model.training  # a target network is in eval mode always
        algo.train()
        assert not policy.model.training
        assert {training for grad, training in NoisyQ.seen if grad} == {True}  # the losses
        assert {training for grad, training in NoisyQ.seen if not grad} == {False}  # acting
    finally:
        algo.stop()


MODE_FREE = (nn.Linear, nn.Conv2d, nn.ReLU, nn.Tanh, nn.ELU, nn.SiLU, nn.Identity, nn.Flatten, nn.Sequential,
             nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


@pytest.mark.parametrize("make", [
    lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"vf_share_layers": False}}),
    lambda: cairn.Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {}),
    lambda: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"use_lstm": True}}),
    lambda: cairn.Policy(IMAGE, gym.spaces.Discrete(3), {}),
    lambda: cairn.Policy(gym.spaces.Dict({"image": IMAGE, "vec": BOX}), gym.spaces.Discrete(3), {}),
    lambda: cairn.Policy(MASKED, gym.spaces.Discrete(3), {}),
    lambda: DQNPolicy(BOX, gym.spaces.Discrete(3), {"dueling": True}),
    lambda: DQNPolicy(IMAGE, gym.spaces.Discrete(3), {}),
    lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {}),
    lambda: TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)), {}),
    lambda: APPOPolicy(BOX, gym.spaces.Discrete(3), {}),
], ids=["mlp", "box", "lstm", "cnn", "dict", "masked", "dqn", "dqn_cnn", "sac", "td3", "appo"])
def test_cairns_own_networks_hold_no_mode_dependent_layer(make: Any) -> None:
    """Why a built-in network's mode is never switched: both modes compute the same. Every
    module is a torch layer without mode-dependent output (an LSTM without dropout) or cairn's
    own, whose code never reads the mode."""
    policy = make()
    assert not policy.switches_modes
    for network in policy.networks():
        for module in network.modules():
            if isinstance(module, nn.LSTM):
                assert module.dropout == 0.0
            elif type(module).__module__.startswith("cairn."):
                assert ".training" not in inspect.getsource(type(module)), type(module)
            else:
                assert type(module) in MODE_FREE, type(module)


def test_q_models_and_sac_actors_with_dropout_act_deterministically_when_greedy() -> None:
    dqn = DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": NoisyQ}}, seed=0)
    q = dqn.model.numpy_q_values(OBS)
    np.testing.assert_array_equal(dqn.model.numpy_q_values(OBS), q)
    expected = _in_eval_mode(dqn.model, lambda: dqn.model(torch.from_numpy(OBS)).numpy())
    np.testing.assert_array_equal(q, expected)
    assert not dqn.model.training  # a user's network rests in eval mode
    actor = NoisyActor(BOX, gym.spaces.Box(-1, 1, (2,)), 2, {})
    out = actor.numpy_forward(OBS)
    np.testing.assert_array_equal(actor.numpy_forward(OBS), out)
    assert actor.training  # a module outside a policy is handed back in its own mode


@pytest.mark.parametrize("act", [
    lambda obs: cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": ScalesInPlace}},
                             seed=0).compute_actions(obs, explore=False),
    lambda obs: DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": QScalesInPlace}},
                          seed=0).compute_actions(obs, explore=False),
    lambda obs: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)), {"model": {"custom_model": ActorScalesInPlace}},
                          seed=0).compute_actions(obs, explore=False),
], ids=["ppo", "dqn", "sac"])
def test_a_model_writing_into_its_input_leaves_the_callers_observations_as_they_were(act: Any) -> None:
    """A model may write into ``obs`` (``obs *= scale``): the learner's rows are its own tensor.
    Acting handed the model a tensor sharing the caller's array, so every act scaled the user's
    observations (main: doubled by each call) and the runner stored the scaled rows for learning,
    which the learner then scaled again: it learned from other observations than it acted on."""
    obs = OBS.copy()
    act(obs)
    np.testing.assert_array_equal(obs, OBS)


def test_a_runner_stores_the_observations_a_model_writing_into_its_input_acted_on() -> None:
    algo = (cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                      model={"custom_model": ScalesInPlace}).build())
    try:
        batch = algo.env_runner_group.local.sample(32)["default_policy"]
        model = algo.get_policy().model
        obs, logp = np.asarray(batch["obs"]), np.asarray(batch["action_logp"])
        with torch.no_grad():
            logits = model(torch.from_numpy(obs.copy()))[0]
        relearned = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(np.asarray(batch["actions"]))
                                                         .long().view(-1, 1)).squeeze(-1).numpy()
        # The learner's log-probabilities of the stored rows are the behaviour ones (main: up to
        # a factor 2 off in the observations, so the ratio started away from 1).
        np.testing.assert_allclose(relearned, logp, rtol=1e-5, atol=1e-5)
    finally:
        algo.stop()


def test_ppo_learns_from_the_rows_a_model_writing_into_its_input_acted_on() -> None:
    """PPO's value pass for GAE ran the model on the batch's own tensor (on a CPU learner, the
    sample batch's memory): a model writing into its input scaled every row there, and each
    minibatch then read the scaled rows and scaled them again. The first minibatch, before any
    step, must see the policy that acted: a ratio of 1 (main: approx_kl 5.6e-4, TwoHeads ~1e-8)."""
    algo = (cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=64, num_epochs=1, lr=1e-9,
                      model={"custom_model": ScalesInPlace}).build())
    try:
        kl = algo.train()["learners"]["default_policy"]["approx_kl"]
        assert abs(kl) < 1e-6, kl
    finally:
        algo.stop()


@pytest.mark.parametrize("config", [cairn.PPOConfig, cairn.IMPALAConfig, cairn.APPOConfig])
def test_every_loss_reads_the_rows_a_model_writing_into_its_input_acted_on(config: Any) -> None:
    """The whole-batch passes without gradients (PPO's GAE values; IMPALA's and APPO's V-trace
    values, APPO's target log-probabilities) ran the model on the batch's own tensor, so a model
    writing into its input scaled the rows there, and every later pass and minibatch read them
    scaled again (main, two epochs: IMPALA's losses read the rows 3x as large on average, APPO's
    6x; PPO's 2x before its fix)."""
    RecordingScalesInPlace.acted, RecordingScalesInPlace.learned = [], []
    algo = (config().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=64, num_epochs=2,
                      model={"custom_model": RecordingScalesInPlace}).build())
    try:
        algo.train()
        acted, learned = torch.cat(RecordingScalesInPlace.acted), torch.cat(RecordingScalesInPlace.learned)
        assert len(learned) == 2 * len(acted)  # each acted row, once per epoch
        np.testing.assert_allclose(learned.sum(0).numpy(), 2 * acted.sum(0).numpy(), rtol=1e-4, atol=1e-3)
    finally:
        algo.stop()


def test_a_recurrent_model_writing_into_its_input_and_state_leaves_the_callers_arrays_as_they_were() -> None:
    """A recurrent model acted on tensors sharing the caller's observation and state arrays: one
    writing into them changed the user's arrays (main: obs doubled, state halved by each act),
    and a runner's stored rows and state column with them."""
    policy = cairn.Policy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": GRUScalesInPlace}}, seed=0)
    obs, state = OBS.copy(), [np.full((len(OBS), 8), 0.25, np.float32)]
    expected_state = state[0].copy()
    _, out = policy.compute_actions(obs, state=state, explore=False)
    np.testing.assert_array_equal(obs, OBS)
    np.testing.assert_array_equal(state[0], expected_state)
    with torch.no_grad():
        _, _, (h,) = policy.model(torch.from_numpy(OBS.copy()).unsqueeze(1),
                                  [torch.from_numpy(expected_state.copy())])
    np.testing.assert_array_equal(out[0], h.numpy())


def test_double_q_targets_read_the_replayed_next_observations_once() -> None:
    """DQN's double-Q targets ran the target network, then the online one, on the replayed
    ``next_obs`` array itself: a model writing into its input doubled the rows the online
    network then read (and the replayed sample's), so its argmax chose among Q-values of other
    states. Each network must see the next observations as replayed."""
    from cairn.algorithms.dqn.learn import dqn_targets

    config = cairn.DQNConfig().training(double_q=True, gamma=0.9)
    policy = DQNPolicy(BOX, gym.spaces.Discrete(3), {"model": {"custom_model": QScalesInPlace}}, seed=0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.3)  # the online network differs from the target one
    n = len(OBS)
    sample = {"next_obs": OBS.copy(), "rewards": np.ones(n, np.float32), "terminateds": np.zeros(n, bool),
              "n_steps": np.ones(n, np.int64)}
    targets = dqn_targets(config, policy, sample)
    np.testing.assert_array_equal(sample["next_obs"], OBS)
    with torch.no_grad():
        online = policy.model(torch.from_numpy(OBS.copy())).numpy()
        target = policy.target_model(torch.from_numpy(OBS.copy())).numpy()
    expected = 1.0 + 0.9 * target[np.arange(n), online.argmax(1)]
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: SACPolicy(BOX, gym.spaces.Box(-1, 1, (2,)),
                      {"model": {"custom_q_model": CriticScalesInPlace}}, seed=0),
    lambda: TD3Policy(BOX, gym.spaces.Box(-1, 1, (2,)),
                      {"model": {"custom_model": TD3ActorScalesInPlace,
                                 "custom_q_model": CriticScalesInPlace}}, seed=0),
], ids=["sac", "td3"])
def test_twin_critics_and_td3s_actor_read_the_rows_they_are_given(make: Any) -> None:
    """The twin critics ran on one obs tensor: a critic writing into its input doubled the rows
    the second critic then read (Q_2 of other states), and TD3's actor doubled the rows its
    actor loss's critic read (the critic learnt Q(s, a), the actor climbed Q(2s, pi(s)))."""
    model = make().model
    obs, actions = torch.from_numpy(OBS.copy()), torch.zeros(len(OBS), 2)
    with torch.no_grad():
        q = model.critic(obs, actions)
        expected = torch.stack([critic(torch.from_numpy(OBS.copy()), actions)
                                for critic in (model.critic.q1, model.critic.q2)])
        torch.testing.assert_close(q, expected, rtol=0, atol=0)
        model.actor(obs)
    np.testing.assert_array_equal(obs.numpy(), OBS)


def test_a_model_writing_into_its_action_mask_is_masked_by_the_observed_mask() -> None:
    """A mask-aware model got a view of the rows' mask columns, which cairn then masked its
    outputs with: a model turning its mask into a penalty in place (``mask.sub_(1).mul_(1e4)``)
    left no entry above 0.5, so every action's score was MASKED_SCORE (main: uniform logits,
    in acting and in the learner's forward alike, with no error)."""
    policy = cairn.Policy(MASKED, gym.spaces.Discrete(3), {"model": {"custom_model": PenaltyMask}}, seed=0)
    mask = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 1], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.int8)
    rows = policy.process_observations([{"observation": o, "action_mask": m} for o, m in zip(OBS, mask)],
                                       update=False)
    with torch.no_grad():
        expected = policy.model.net.pi(policy.model.net.trunk(torch.from_numpy(OBS))).numpy()
    expected = np.where(mask > 0, expected, MASKED_SCORE)
    np.testing.assert_allclose(policy.compute_action_inputs(rows), expected, rtol=1e-6, atol=1e-5)
    with torch.no_grad():
        learned = policy.model(torch.from_numpy(rows.copy()))[0].numpy()
    np.testing.assert_allclose(learned, expected, rtol=1e-6, atol=1e-5)
