"""A user's recurrent model (cairn.models.RecurrentActorCriticModel) trains, acts and restores."""

import numpy as np

import cairn
from cairn.envs import make_cue_recall
from tests.helpers import assert_trains_identically
from tests.recurrent.nets import TinyGRU


def gru_config():
    return (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
            .env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size=64, minibatch_size=20, num_epochs=2,
                      model={"custom_model": TinyGRU, "custom_model_config": {"width": 6}, "max_seq_len": 3})
            .debugging(seed=0))


def test_custom_recurrent_model_with_one_state_component_trains_and_resumes(tmp_path):
    algo = gru_config().build()
    policy = algo.get_policy()
    assert [s.shape for s in policy.get_initial_state()] == [(6,)]
    cue = np.array([1, 0, 0], np.float32)
    action, state = policy.compute_single_action(cue, state=policy.get_initial_state())
    assert action in (0, 1) and state[0].shape == (6,)
    algo.train()
    stats = algo.train()["learners"]["default_policy"]
    # 64 steps, 2 envs, episodes of 3 steps and max_seq_len 3: one sequence per episode piece.
    assert stats["num_sequences"] >= 64 / 3
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert isinstance(restored.get_policy().model, TinyGRU)
    assert_trains_identically(algo, restored, iterations=1)


def test_a_recurrent_model_with_dropout_acts_and_takes_gae_values_in_eval_mode():
    """As feed-forward users' models (docs/models.md): acting runs the model in eval mode, so a
    Dropout leaves greedy actions and the next state unchanged between two calls (before, the
    recurrent torch path ran it in training mode: random), and PPO's GAE values are taken so
    too; the losses train in training mode, and the model rests in eval mode between learn
    calls (docs/models.md)."""
    import gymnasium as gym
    import torch

    from tests.recurrent.nets import NoisyGRU

    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    policy = cairn.Policy(box, gym.spaces.Discrete(5), {"model": {"custom_model": NoisyGRU}}, seed=0)
    obs = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    state = [np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)]
    first, _ = policy.compute_actions(obs, state=state, explore=False)
    x = policy.process_observations(obs, update=False)
    inputs, out = policy.recurrent_acting._step(x, state)
    again, again_out = policy.recurrent_acting._step(x, state)
    np.testing.assert_array_equal(inputs, again)
    np.testing.assert_array_equal(out[0], again_out[0])
    model = policy.model
    model.train(False)
    with torch.no_grad():
        expected, _, _ = model(torch.from_numpy(x).unsqueeze(1), [torch.from_numpy(state[0])])
    model.train(True)
    np.testing.assert_array_equal(inputs, expected[:, 0].numpy())
    np.testing.assert_array_equal(first, policy.compute_actions(obs, state=state, explore=False)[0])
    assert model.training

    algo = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
            .training(train_batch_size=32, minibatch_size=16, num_epochs=1,
                      model={"custom_model": NoisyGRU, "max_seq_len": 3}).debugging(seed=0).build())
    try:
        model = algo.get_policy().model
        algo.train()
        assert model.no_grad_modes and not any(model.no_grad_modes)  # acting and GAE's values
        assert not model.training  # back at rest after the learn function
    finally:
        algo.stop()


def test_a_recurrent_model_with_batch_statistics_is_refused_when_built():
    """The learners run a recurrent model over sequences padded at their end (each padded step a
    copy of its sequence's first row): a BatchNorm in it normalised the real steps by statistics
    that included the padding, and moved its running statistics by them, with no error. Such a
    model is refused when the policy is built (and restored); a per-step LayerNorm is fine."""
    import gymnasium as gym
    import pytest

    from cairn.errors import ConfigError
    from tests.recurrent.nets import BatchNormGRU, LayerNormGRU

    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    with pytest.raises(ConfigError, match=r"BatchNormGRU .*BatchNorm1d at 'norm.0'.*padded.*nn.LayerNorm"):
        cairn.Policy(box, gym.spaces.Discrete(2), {"model": {"custom_model": BatchNormGRU}}, seed=0)
    with pytest.raises(ConfigError, match="BatchNorm1d"):
        (cairn.APPOConfig().environment(make_cue_recall, env_config={"delay": 2})
         .training(model={"custom_model": BatchNormGRU}).build())
    policy = cairn.Policy(box, gym.spaces.Discrete(2), {"model": {"custom_model": LayerNormGRU}}, seed=0)
    action, _ = policy.compute_single_action(np.zeros(4, np.float32), state=policy.get_initial_state())
    assert action in (0, 1)
