"""IMPALAConfig and APPOConfig: RLlib's names and defaults, JSON round trip, refused values."""

from __future__ import annotations

import json

import pytest

import cairn
from cairn.errors import ConfigError


def test_defaults_are_rllibs():
    # RLlib 2.60's values (ray/rllib/algorithms/impala/impala.py, appo/appo.py; RLlib itself
    # does not import here, it needs dm-tree). target_network_update_freq is the exception that
    # docs/impala.md explains: RLlib's 2 counts circular-buffer units, cairn's 1 train batches.
    config = cairn.APPOConfig()
    assert (config.vtrace, config.vtrace_clip_rho_threshold, config.vtrace_clip_pg_rho_threshold) == \
        (True, 1.0, 1.0)
    assert (config.rollout_fragment_length, config.train_batch_size, config.lr, config.grad_clip) == \
        (50, 500, 0.0005, 40.0)
    assert (config.vf_loss_coeff, config.entropy_coeff, config.broadcast_interval) == (0.5, 0.01, 1)
    assert (config.num_epochs, config.minibatch_size) == (1, None)
    assert (config.clip_param, config.use_kl_loss, config.kl_coeff, config.kl_target) == \
        (0.4, False, 1.0, 0.01)
    assert (config.target_network_update_freq, config.target_worker_clipping) == (1, 2.0)
    assert config.max_requests_in_flight_per_env_runner == 1
    assert not hasattr(cairn.IMPALAConfig(), "clip_param")


@pytest.mark.parametrize("config_cls", [cairn.IMPALAConfig, cairn.APPOConfig])
def test_to_dict_from_dict_round_trip(config_cls):
    config = config_cls().environment("CartPole-v1").training(
        vtrace_clip_rho_threshold=2.0, vtrace_clip_pg_rho_threshold=None, vf_loss_coeff=0.25,
        entropy_coeff=0.001, broadcast_interval=3, minibatch_size=64).env_runners(
        max_requests_in_flight_per_env_runner=3)
    if config_cls is cairn.APPOConfig:
        config.training(clip_param=0.3, use_kl_loss=True, kl_coeff=0.5, kl_target=0.02,
                        target_network_update_freq=4, target_worker_clipping=1.5)
    data = json.loads(json.dumps(config.to_dict()))
    again = cairn.AlgorithmConfig.from_dict(data)
    assert type(again) is config_cls
    assert again.to_dict() == config.to_dict()
    assert data["algo_class"] == config_cls.algo_class_name
    assert again.max_requests_in_flight_per_env_runner == data["max_requests_in_flight_per_env_runner"] == 3


@pytest.mark.parametrize("value", [0, -1, 1.5, True, None, "2"])
def test_requests_in_flight_must_be_a_positive_int(value):
    with pytest.raises(ConfigError, match="max_requests_in_flight_per_env_runner"):
        cairn.APPOConfig().env_runners(max_requests_in_flight_per_env_runner=value)
    data = cairn.IMPALAConfig().environment("CartPole-v1").to_dict()
    data["max_requests_in_flight_per_env_runner"] = value
    with pytest.raises(ConfigError, match="max_requests_in_flight_per_env_runner"):
        cairn.AlgorithmConfig.from_dict(data).validate()


def test_requests_in_flight_is_impala_and_appos_only():
    # PPO samples synchronously: the setting would do nothing, so it is refused by name.
    with pytest.raises(ConfigError, match="max_requests_in_flight_per_env_runner"):
        cairn.PPOConfig().env_runners(max_requests_in_flight_per_env_runner=2)


@pytest.mark.parametrize(("key", "value", "match"), [
    ("vtrace", False, "always correct"),
    ("vtrace_clip_rho_threshold", 0.0, "vtrace_clip_rho_threshold"),
    ("vtrace_clip_pg_rho_threshold", -1.0, "vtrace_clip_pg_rho_threshold"),
    ("broadcast_interval", 0, "broadcast_interval"),
    ("minibatch_size", 0, "minibatch_size"),
    ("clip_param", 0.0, "clip_param"),
    ("kl_target", 0.0, "kl_target"),
    ("target_network_update_freq", 0, "target_network_update_freq"),
    ("use_kl_loss", "yes", "use_kl_loss"),
])
def test_bad_values_are_refused_with_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        cairn.APPOConfig().training(**{key: value})


def test_appo_settings_are_not_impalas():
    with pytest.raises(ConfigError, match="clip_param"):
        cairn.IMPALAConfig().training(clip_param=0.3)


def test_stored_bad_value_is_refused_on_validate():
    data = cairn.IMPALAConfig().environment("CartPole-v1").to_dict()
    data["vtrace_clip_rho_threshold"] = -2.0
    with pytest.raises(ConfigError, match="vtrace_clip_rho_threshold"):
        cairn.AlgorithmConfig.from_dict(data).validate()


def test_minibatch_larger_than_train_batch_is_refused():
    config = cairn.IMPALAConfig().environment("CartPole-v1").training(train_batch_size=100,
                                                                      minibatch_size=200)
    with pytest.raises(ConfigError, match="minibatch_size"):
        config.validate()


@pytest.mark.parametrize("config_cls", [cairn.IMPALAConfig, cairn.APPOConfig])
def test_recurrent_policies_are_accepted_and_bad_lstm_settings_refused(config_cls):
    # LSTMs learn over sequences as PPO's (tests/algorithms/impala/test_impala_recurrent.py).
    config_cls().environment("CartPole-v1").training(model={"use_lstm": True}).validate()
    with pytest.raises(ConfigError, match="max_seq_len"):
        config_cls().environment("CartPole-v1").training(
            model={"use_lstm": True, "max_seq_len": 0}).validate()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_cli_trains_and_saves(tmp_path, algo_name):
    from cairn.cli import main

    out = tmp_path / "run"
    assert main(["train", "--algo", algo_name, "--env", "CartPole-v1", "--stop-iters", "1", "--config",
                 "train_batch_size=64", "rollout_fragment_length=32", "minibatch_size=null",
                 "--out", str(out)]) == 0
    restored = cairn.Algorithm.from_checkpoint(out / "checkpoints" / "checkpoint_000001")
    try:
        assert type(restored).__name__ == algo_name and restored.config.minibatch_size is None
    finally:
        restored.stop()
