"""Write the frozen fixture checkpoints of the current format version.

    python scripts/make_fixture_checkpoints.py

Writes tests/fixtures/checkpoints/<FORMAT_VERSION>/{ppo_single,ppo_multi,policy,sac_single,td3_single,
ppo_lstm,impala_single,appo_single,ppo_parallel_pending}/ (and {sac,td3}_single.expected.json, the
greedy actions those fixtures must keep computing, ppo_lstm.expected.json: the LSTM's greedy
actions, logits and values, {impala,appo}_single.expected.json: the greedy actions, logits and
values, and APPO's target network logits, KL weight and train batch count, and
ppo_parallel_pending.expected.json: the rows its parallel env runner keeps waiting across the
fragment's end, format version 4 on). Run it once per format version, commit the output, and
never regenerate an existing fixture: the fixtures prove that checkpoints written by earlier
releases keep loading. The script writes only the fixtures missing from the version folder and
never overwrites one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import cairn
from cairn.checkpoint.format import FORMAT_VERSION
from cairn.envs import make_multi_agent_cartpole

ROOT = Path(__file__).resolve().parent.parent
#: The ``metadata`` of the ppo_single fixture (a manifest key since format version 2).
FIXTURE_METADATA = {"note": "frozen fixture", "tags": ["ppo", "cartpole"], "score": 1.5,
                    "nested": {"ok": True}}
SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "model": {"hidden": [16, 16]}}


def main() -> int:
    out = ROOT / "tests" / "fixtures" / "checkpoints" / FORMAT_VERSION
    if not (out / "sac_single").exists():
        write_sac(out)
    if not (out / "td3_single").exists():
        write_td3(out)
    if not (out / "ppo_lstm").exists():
        write_lstm(out)
    for algo_name in ("IMPALA", "APPO"):
        if not (out / f"{algo_name.lower()}_single").exists():
            write_vtrace(out, algo_name)
    if not (out / "ppo_parallel_pending").exists():
        write_parallel_pending(out)
    if (out / "ppo_single").exists():
        print(f"{out}/ppo_* exist; fixtures of a released format version are never regenerated.")
        return 0
    single = (cairn.PPOConfig().environment("CartPole-v1").training(**SMALL)
              .env_runners(observation_filter="MeanStdFilter").debugging(seed=0).build())
    single.train()
    single.save(out / "ppo_single", metadata=FIXTURE_METADATA)  # format version 2 on
    single.get_policy().export_checkpoint(out / "policy")

    multi = (cairn.PPOConfig()
             .environment(make_multi_agent_cartpole, env_config={"num_agents": 3})
             .training(**SMALL)
             .multi_agent(policies=["p0", "p1", "p2"],
                          policy_mapping_fn={"agent_0": "p0", "agent_1": "p1", "agent_2": "p2"})
             .debugging(seed=0).build())
    multi.train()
    multi.save(out / "ppo_multi")
    print(f"wrote fixtures to {out}")
    return 0


#: The observations whose greedy actions the SAC fixture records (Pendulum's cos, sin, speed).
SAC_OBS = [[1.0, 0.0, 0.0], [0.0, 1.0, -3.0], [-0.6, 0.8, 7.5], [0.28, -0.96, 1.2]]


def write_sac(out: Path) -> None:
    """A SAC Pendulum checkpoint with its replay buffer (and n-step rows held for the next
    fragment), and the greedy actions it computes for :data:`SAC_OBS`."""
    sac = (cairn.SACConfig().environment("Pendulum-v1")
           .training(train_batch_size=64, minibatch_size=16, model={"hidden": [16, 16]}, n_step=2,
                     train_freq=2, gradient_steps=2, num_steps_sampled_before_learning_starts=32,
                     critic_lr=1e-3, replay_buffer_config={"capacity": 256})
           .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    sac.train()
    sac.save(out / "sac_single")
    actions = [sac.compute_single_action(np.array(o, dtype=np.float32)).tolist() for o in SAC_OBS]
    expected = {"obs": SAC_OBS, "actions": actions}
    (out / "sac_single.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    sac.stop()


def write_td3(out: Path) -> None:
    """A TD3 Pendulum checkpoint with its replay buffer, saved between two delayed actor
    updates (an odd gradient-step count), and the greedy actions it computes for :data:`SAC_OBS`."""
    td3 = (cairn.TD3Config().environment("Pendulum-v1")
           .training(train_batch_size=64, minibatch_size=16, model={"hidden": [16, 16]}, n_step=2,
                     train_freq=2, gradient_steps=1, num_steps_sampled_before_learning_starts=32,
                     replay_buffer_config={"capacity": 256})
           .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    td3.train()
    if td3.get_policy().num_grad_updates % 2 != 1:  # the fixture's point: a phase to keep
        raise RuntimeError("the TD3 fixture must be saved between two delayed actor updates")
    td3.save(out / "td3_single")
    actions = [td3.compute_single_action(np.array(o, dtype=np.float32)).tolist() for o in SAC_OBS]
    expected = {"obs": SAC_OBS, "actions": actions}
    (out / "td3_single.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    td3.stop()


#: A CartPole episode's observations, fed in order to the LSTM fixture (its state carried along).
LSTM_OBS = [[0.01, -0.02, 0.03, 0.0], [0.02, 0.2, 0.02, -0.3], [0.03, 0.4, 0.0, -0.6],
            [0.05, 0.2, -0.01, -0.3], [0.06, 0.0, -0.02, 0.0], [0.06, -0.2, -0.02, 0.3]]


def write_lstm(out: Path) -> None:
    """A PPO CartPole checkpoint of the built-in LSTM with the model config's defaults, and the
    greedy actions, action inputs (logits) and values it computes for :data:`LSTM_OBS` as one episode
    (the state carried
    from step to step). Format 2 wrote it with ``vf_share_layers=False``, which meant then what
    ``vf_share_layers=True, vf_stop_gradient=True`` means from format 3 on (migrations.py)."""
    import torch

    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=2,
                      model={"hidden": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4})
            .debugging(seed=0).build())
    algo.train()
    algo.save(out / "ppo_lstm")
    policy = algo.get_policy()
    state = policy.get_initial_state()
    actions = []
    for o in LSTM_OBS:
        action, state = policy.compute_single_action(np.array(o, dtype=np.float32), state=state,
                                                     explore=False)
        actions.append(int(action))
    obs = torch.from_numpy(policy.process_observations(np.array(LSTM_OBS, dtype=np.float32), update=False))
    with torch.inference_mode():
        inputs, values, _ = policy.model(obs.unsqueeze(0),
                                         [torch.from_numpy(s)[None] for s in policy.get_initial_state()])
    expected = {"obs": LSTM_OBS, "actions": actions, "action_inputs": inputs[0].tolist(),
                "values": values[0].tolist()}
    (out / "ppo_lstm.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    algo.stop()


#: CartPole observations whose greedy actions, logits and values the IMPALA and APPO fixtures record.
CARTPOLE_OBS = [[0.01, -0.02, 0.03, 0.0], [0.1, 0.5, -0.05, -0.8], [-0.3, -1.0, 0.12, 1.5]]


def write_vtrace(out: Path, algo_name: str) -> None:
    """An IMPALA or APPO CartPole checkpoint (MeanStdFilter; APPO with the KL loss, saved between
    two target updates, so that the target network differs from the network), and what it
    computes for :data:`CARTPOLE_OBS`."""
    import torch

    config_cls = cairn.IMPALAConfig if algo_name == "IMPALA" else cairn.APPOConfig
    config = (config_cls().environment("CartPole-v1")
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16,
                           observation_filter="MeanStdFilter")
              .training(train_batch_size=64, minibatch_size=32, num_epochs=2, model={"hidden": [16, 16]})
              .debugging(seed=0))
    if algo_name == "APPO":
        config.training(use_kl_loss=True, kl_target=1e-4, target_network_update_freq=2)
    algo = config.build()
    for _ in range(3):
        algo.train()
    name = f"{algo_name.lower()}_single"
    algo.save(out / name)
    policy = algo.get_policy()
    rows = np.array(CARTPOLE_OBS, dtype=np.float32)
    obs = torch.from_numpy(policy.process_observations(rows, update=False))
    with torch.inference_mode():
        inputs, values = policy.model(obs)
    expected = {"obs": CARTPOLE_OBS, "actions": [int(algo.compute_single_action(o)) for o in rows],
                "action_inputs": inputs.tolist(), "values": values.tolist()}
    if algo_name == "APPO":
        if policy.num_train_batches % 2 != 1:  # the fixture's point: a target network to keep
            raise RuntimeError("the APPO fixture must be saved between two target updates")
        with torch.inference_mode():
            expected["target_action_inputs"] = policy.target_model(obs)[0].tolist()
        expected.update(kl_coeff=policy.kl_coeff, num_train_batches=policy.num_train_batches)
    (out / f"{name}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    algo.stop()


#: The config of the ppo_parallel_pending fixture (and of the run its test compares it with):
#: 2 envs of 10 steps each after one train(), so each env is at t = 3 of its second episode, a1's
#: row of t = 2 waiting for its observation of t = 4.
PENDING_SETTINGS = {"train_batch_size": 20, "minibatch_size": 10, "num_epochs": 1,
                    "model": {"hidden": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 3}}


def write_parallel_pending(out: Path) -> None:
    """A PPO checkpoint of a parallel multi-agent env (a recurrent policy per agent) saved with a
    row waiting across the fragment's end in each env (``pending``, format version 4 on), and
    those rows as the runner's state held them."""
    if str(ROOT) not in sys.path:  # the env is the test package's (its reference is frozen in it)
        sys.path.insert(0, str(ROOT))
    from tests.checkpoint.fixture_envs import make_waiting_parallel

    algo = (cairn.PPOConfig().environment(make_waiting_parallel)
            .training(**PENDING_SETTINGS)
            .env_runners(rollout_fragment_length=5, num_envs_per_env_runner=2)
            .multi_agent(policies=["p0", "p1"], policy_mapping_fn={"a0": "p0", "a1": "p1"})
            .debugging(seed=0).build())
    algo.train()
    entries = algo.env_runner_group.local.get_state()["current_obs"]
    pending = [entry["pending"] for entry in entries]
    if [[row["agent"] for row in rows] for rows in pending] != [["a1"], ["a1"]]:
        raise RuntimeError(f"the fixture's point is a1's row waiting in each env, got {pending!r:.300}")
    algo.save(out / "ppo_parallel_pending")
    expected = {"pending": [[{key: value.tolist() if isinstance(value, np.ndarray)
                              else [s.tolist() for s in value] if key == "state_in" and value is not None
                              else value
                              for key, value in row.items()} for row in rows] for rows in pending]}
    (out / "ppo_parallel_pending.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    algo.stop()


if __name__ == "__main__":
    sys.exit(main())
