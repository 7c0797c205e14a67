"""CPU time of one learn call: cairn APPO's (V-trace, target network, after-batch step) against
cairn PPO's (GAE), on batches of the same size learnt in the same passes.

Both sample one batch of ``--batch`` CartPole-v1 steps (1 env in this process; APPO in fragments
of ``--fragment`` steps), then learn on it ``--reps`` times, ``--epochs`` passes of one gradient
step on the whole batch each (PPO: ``minibatch_size=batch``; APPO: ``minibatch_size=None``), or
of minibatches of ``--minibatch`` rows,
64x64 tanh actor and critic, 1 torch thread. Timed: ``time.process_time()`` around APPO's
``learn_on_fragments`` (learn call and the target network's step) and PPO's ``learn(ppo_learn,
...)``, medians over repetitions in alternating order after ``--warmup`` untimed calls each.
This is the learn step whose share of an iteration the asynchronous runner can overlap
(``appo_throughput.py``).

Run: ``PYTHONPATH=$PWD python bench/appo_learn_cost.py --epochs 1 8 32``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import cairn_code_line, command_line, fmt, load_average, machine_lines, median, table, write_report


def build(kind: str, args: Any, epochs: int) -> Any:
    """cairn ``kind`` ("PPO" or "APPO") on CartPole-v1 with the shared settings."""
    import cairn

    if kind == "PPO":
        config: Any = cairn.PPOConfig().training(minibatch_size=args.minibatch or args.batch)
    else:
        config = (cairn.APPOConfig().env_runners(rollout_fragment_length=args.fragment)
                  .training(minibatch_size=args.minibatch, use_kl_loss=args.kl))
    return (config.environment("CartPole-v1").env_runners(num_env_runners=0, num_envs_per_env_runner=1)
            .training(train_batch_size=args.batch, num_epochs=epochs, model={"hidden": [64, 64]})
            .resources(torch_num_threads=1).debugging(seed=0).build())


def learn_calls(algos: dict[str, Any]) -> dict[str, Any]:
    """One function per algorithm that runs one learn call on the same batch, sampled once by
    APPO (PPO learns on the same rows, joined)."""
    import numpy as np

    from cairn.algorithms.impala.fragments import join_fragments
    from cairn.algorithms.ppo.learn import ppo_learn

    appo, ppo = algos["APPO"], algos["PPO"]
    fragments = appo.sample_fragments()
    batch = join_fragments(fragments, "default_policy")
    rng = np.random.default_rng(0)

    def ppo_call() -> Any:
        perms = [rng.permutation(len(batch)) for _ in range(ppo.config.num_epochs)]
        return ppo.learn(ppo_learn, "default_policy", batch=batch, rewards=batch["rewards"],
                         permutations=perms)

    return {"PPO": ppo_call, "APPO": lambda: appo.learn_on_fragments(fragments)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--fragment", type=int, default=50)
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--minibatch", type=int, default=None,
                        help="rows per gradient step (None: the whole batch)")
    parser.add_argument("--kl", action="store_true", help="APPO with use_kl_loss=True")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    rows = []
    for epochs in args.epochs:
        algos = {kind: build(kind, args, epochs) for kind in ("PPO", "APPO")}
        calls = learn_calls(algos)
        for call in calls.values():
            for _ in range(args.warmup):
                call()
        times: dict[str, list[float]] = {"PPO": [], "APPO": []}
        for rep in range(args.reps):
            for kind in (("PPO", "APPO") if rep % 2 == 0 else ("APPO", "PPO")):
                start = time.process_time()
                calls[kind]()
                times[kind].append(time.process_time() - start)
        for algo in algos.values():
            algo.stop()
        ppo, appo = median(times["PPO"]), median(times["APPO"])
        rows.append([str(epochs), fmt(ppo * 1e3), fmt(appo * 1e3), f"{appo / ppo:.2f}x"])
        print(rows[-1], flush=True)
    lines = ["# Learn call CPU time: cairn APPO vs cairn PPO", "", f"Command: `{command_line()}`", "",
             *machine_lines([cairn_code_line(), f"- Load average (1 min) after: {load_average()}"]), "",
             f"CartPole-v1, batch {args.batch} (APPO fragments of {args.fragment}), minibatches of "
             f"{args.minibatch or args.batch} rows, 64x64 tanh, 1 torch thread, use_kl_loss={args.kl}; "
             f"medians of {args.reps} calls after {args.warmup} warm-up calls each.", "",
             *table(["epochs", "PPO ms CPU", "APPO ms CPU", "APPO / PPO"], rows), ""]
    write_report(args.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
