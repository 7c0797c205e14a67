"""The mode each of a user's networks runs in, recorded by its forward as ``(gradients enabled,
training mode)``: every acting path runs it in eval mode, and every forward with gradients (the
losses) in training mode; the network rests in eval mode between learn calls. One case per
acting path: feed-forward, recurrent, masked (PPO and DQN), DQN's Q-model, SAC's and TD3's
actors and critics, IMPALA and APPO (Keras: tests/keras, test_keras_policy.py and
test_keras_dqn.py).

Forwards without gradients inside a learn function are its targets: PPO's values, IMPALA's and
APPO's V-trace values and target log-probabilities (APPO's target network too) and DQN's
targets (on a CPU learner) are taken in eval mode and checked so, and so are SAC's target
critics and TD3's target actor and critics: every target network rests and runs in eval mode. SAC's
next actions come from the online actor in training mode, as SB3 samples them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import cairn
from cairn.envs import make_cue_recall
from cairn.learners.actor import learning
from tests.models.masked_env import make_pick_legal
from tests.models.nets import (
    ModeRecorder,
    NoisyCritic,
    NoisyQ,
    NoisyTD3Actor,
    RecordingActor,
    RecordingCritic,
    RecordingMaskAware,
    RecordingTD3Actor,
)
from tests.recurrent.nets import RecordingGRU

SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}
OFF_POLICY = {"num_steps_sampled_before_learning_starts": 32, "train_batch_size": 16, "minibatch_size": 16}

CUE = {"delay": 2}
FRAGMENT = {"rollout_fragment_length": 64}
CASES: dict[str, tuple[Any, list[Any], Any]] = {
    # name: (config, the recording classes, whether the learn function's targets run in eval mode:
    # True for every class, else the classes whose forwards without gradients run in eval mode)
    "ppo": (lambda: cairn.PPOConfig().environment("CartPole-v1").training(
        **SMALL, model={"custom_model": ModeRecorder}), [ModeRecorder], True),
    "ppo_recurrent": (lambda: cairn.PPOConfig().environment(make_cue_recall, env_config=CUE).training(
        **SMALL, model={"custom_model": RecordingGRU, "max_seq_len": 3}), [RecordingGRU], True),
    "ppo_masked": (lambda: cairn.PPOConfig().environment(make_pick_legal).training(
        **SMALL, model={"custom_model": RecordingMaskAware}), [RecordingMaskAware], True),
    "dqn": (lambda: cairn.DQNConfig().environment("CartPole-v1").training(
        **OFF_POLICY, model={"custom_model": NoisyQ}).env_runners(**FRAGMENT), [NoisyQ], True),
    "dqn_masked": (lambda: cairn.DQNConfig().environment(make_pick_legal).training(
        **OFF_POLICY, model={"custom_model": NoisyQ}).env_runners(**FRAGMENT), [NoisyQ], True),
    "sac": (lambda: cairn.SACConfig().environment("Pendulum-v1").training(
        **OFF_POLICY, model={"custom_model": RecordingActor, "custom_q_model": RecordingCritic}),
        [RecordingActor, RecordingCritic], [RecordingCritic]),
    "td3": (lambda: cairn.TD3Config().environment("Pendulum-v1").training(
        **OFF_POLICY, policy_delay=1,
        model={"custom_model": RecordingTD3Actor, "custom_q_model": RecordingCritic}),
        [RecordingTD3Actor, RecordingCritic], True),
    "impala": (lambda: cairn.IMPALAConfig().environment("CartPole-v1").training(
        train_batch_size=64, model={"custom_model": ModeRecorder}), [ModeRecorder], True),
    "appo": (lambda: cairn.APPOConfig().environment("CartPole-v1").training(
        train_batch_size=64, model={"custom_model": ModeRecorder}), [ModeRecorder], True),
    "appo_recurrent": (lambda: cairn.APPOConfig().environment(make_cue_recall, env_config=CUE).training(
        train_batch_size=64, model={"custom_model": RecordingGRU, "max_seq_len": 3}), [RecordingGRU], True),
}


def _clear(classes: list[Any]) -> None:
    for cls in classes:
        cls.seen = []


@pytest.mark.parametrize("name", list(CASES))
def test_users_networks_act_in_eval_mode_and_learn_in_training_mode(name: str) -> None:
    make, classes, eval_targets = CASES[name]
    _clear(classes)
    algo = make().debugging(seed=0).build()
    try:
        policy = algo.get_policy()
        assert policy.switches_modes and not policy.model.training
        algo.train()
        algo.train()  # past the off-policy algorithms' warm-up: their actors act
        _clear(classes)
        runner = algo.env_runner_group.local
        runner.sample(16, explore=False)  # greedy (DQN's epsilon may still draw every action)
        runner.sample(16)
        acting = {(cls.__name__, mode) for cls in classes for mode in cls.seen}
        assert {mode for _, mode in acting} == {(False, False)}, acting
        assert {cls for cls, _ in acting} >= {classes[0].__name__}  # the acting network acted
        _clear(classes)
        algo.train()
        learning = {mode for cls in classes for mode in cls.seen}
        assert {training for grad, training in learning if grad} == {True}, learning  # every loss
        target_classes = classes if eval_targets is True else eval_targets
        targets = {mode for cls in target_classes for mode in cls.seen}
        assert {training for grad, training in targets if not grad} == {False}, targets
        assert not policy.model.training  # back at rest
        for name in ("target_model", "target_critic", "target_actor"):  # targets rest in eval mode too
            holder = policy if name == "target_model" else policy.model
            if hasattr(holder, name):
                assert not getattr(holder, name).training, name
    finally:
        algo.stop()


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_target_networks_run_in_eval_mode_and_copy_batchnorm_statistics(algorithm: str) -> None:
    """A user's critic (and TD3's actor) with BatchNorm and Dropout: the Bellman targets are the
    target networks' eval-mode values (the same in two passes inside a learn call: no dropout
    draw), target passes move no BatchNorm statistics, and a target update copies the online
    network's statistics (SB3's rule), so the target normalises as its source does."""
    td3_model = {"custom_model": NoisyTD3Actor, "custom_q_model": NoisyCritic}
    config = (cairn.SACConfig().training(model={"custom_q_model": NoisyCritic}) if algorithm == "sac" else
              cairn.TD3Config().training(policy_delay=1, model=td3_model))
    algo = config.environment("Pendulum-v1").debugging(seed=0).training(**OFF_POLICY).build()
    try:
        algo.train()
        algo.train()
        policy = algo.get_policy()
        model = policy.model
        pairs = [(model.target_critic, model.critic)]
        if algorithm == "td3":
            pairs.append((model.target_actor, model.actor))
        assert policy.num_grad_updates > 0
        for target, source in pairs:  # after a target update: the source's statistics, exactly
            for kept, moved in zip(target.buffers(), source.buffers(), strict=True):
                assert torch.equal(kept, moved)
        before = [b.clone() for target, _ in pairs for b in target.buffers()]
        obs, actions = torch.randn(8, 3), torch.rand(8, 1) * 2 - 1
        with learning(policy), torch.no_grad():
            assert model.training and not model.target_critic.training
            first, second = model.target_critic(obs, actions), model.target_critic(obs, actions)
            if algorithm == "td3":
                assert torch.equal(model.target_actor(obs), model.target_actor(obs))
        assert torch.equal(first, second)
        after = [b for target, _ in pairs for b in target.buffers()]
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    finally:
        algo.stop()


def test_td3s_actor_loss_runs_the_first_of_a_users_critics_alone() -> None:
    """TD3's actor loss reads Q_1 only (the built-in twin Q and SB3 compute it alone). With a
    user's critics both ran and the second's row was dropped: in training mode that moved the
    second critic's BatchNorm statistics (which its target then copies) by a pass nobody reads."""
    config = cairn.TD3Config().environment("Pendulum-v1").training(model={"custom_q_model": NoisyCritic})
    algo = config.debugging(seed=0).build()
    try:
        critic = algo.get_policy().model.critic
        obs, actions = torch.randn(8, 3), torch.rand(8, 1) * 2 - 1
        before = [[b.clone() for b in q.buffers()] for q in (critic.q1, critic.q2)]
        critic.train(True)
        first = critic.first_q(obs, actions, detach=True)
        critic.train(False)
        assert first.shape == (8,)
        moved = [not all(torch.equal(a, b) for a, b in zip(old, q.buffers(), strict=True))
                 for old, q in zip(before, (critic.q1, critic.q2), strict=True)]
        assert moved == [True, False]
    finally:
        algo.stop()
