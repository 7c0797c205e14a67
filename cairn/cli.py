"""The ``cairn`` command line: train, export and inspect.

    cairn train --algo PPO --env CartPole-v1 --stop-iters 20 --out runs/cartpole
    cairn export runs/cartpole --format onnx --opset 18 --out model_dir
    cairn info runs/cartpole
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from cairn.errors import CairnError

__all__ = ["main"]


def _parse_assignment(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string such as MeanStdFilter
    return key, value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an algorithm and save a checkpoint")
    train.add_argument("--algo", required=True, help="algorithm name, e.g. PPO or DQN")
    train.add_argument("--env", required=True, help="Gymnasium ID or registered env name")
    train.add_argument("--stop-iters", type=int, default=None, help="stop after N iterations")
    train.add_argument("--stop-timesteps", type=int, default=None, help="stop after N env steps")
    train.add_argument("--stop-reward", type=float, default=None,
                       help="stop when episode_return_mean reaches R")
    train.add_argument("--config", type=_parse_assignment, nargs="*", default=[], metavar="KEY=VALUE",
                       help="config settings by their to_dict() keys; values are JSON (lr=0.001)")
    train.add_argument("--out", default=None, help="checkpoint directory to write at the end")

    export = sub.add_parser("export", help="export a policy's model as ONNX or a torch program")
    export.add_argument("checkpoint", help="Algorithm or Policy checkpoint directory")
    export.add_argument("--policy-id", default=None, help="policy of an Algorithm checkpoint")
    export.add_argument("--format", choices=["onnx", "torch"], required=True)
    export.add_argument("--opset", type=int, default=None, help="ONNX opset (default 18)")
    export.add_argument("--out", required=True, help="output directory")

    info = sub.add_parser("info", help="print a checkpoint's manifest summary as JSON")
    info.add_argument("checkpoint")
    return parser


def _train(args: argparse.Namespace) -> int:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.registry import resolve_class

    try:
        algo_cls = resolve_class(args.algo, Algorithm)
    except CairnError:
        print(f"cairn train: unknown --algo {args.algo!r}; try PPO or DQN.", file=sys.stderr)
        return 2
    if args.stop_iters is None and args.stop_timesteps is None and args.stop_reward is None:
        args.stop_iters = 10
    base = algo_cls.config_class().environment(args.env)
    data = base.to_dict()
    for key, value in args.config:
        data[key] = value
    config = type(base).from_dict(data)
    algo = config.build()
    try:
        while True:
            result = algo.train()
            ret = result["episode_return_mean"]
            print(
                f"iter {result['training_iteration']:4d} | env steps "
                f"{result['num_env_steps_sampled_lifetime']:8d} | return_mean "
                f"{'nan' if math.isnan(ret) else f'{ret:8.2f}'} | len_mean "
                f"{result['episode_len_mean']:7.1f} | {result['time_this_iter_s']:.2f}s",
                flush=True,
            )
            if (
                (args.stop_iters is not None and result["training_iteration"] >= args.stop_iters)
                or (args.stop_timesteps is not None
                    and result["num_env_steps_sampled_lifetime"] >= args.stop_timesteps)
                or (args.stop_reward is not None and not math.isnan(ret) and ret >= args.stop_reward)
            ):
                break
        path = algo.save(args.out)
        print(f"checkpoint: {path}")
    finally:
        algo.stop()
    return 0


def _export(args: argparse.Namespace) -> int:
    from cairn.export import export_model
    from cairn.policy.policy import Policy

    if args.opset is not None and args.format != "onnx":
        print("cairn export: --opset applies to --format onnx only.", file=sys.stderr)
        return 2

    loaded = Policy.from_checkpoint(args.checkpoint)
    if isinstance(loaded, dict):
        if args.policy_id is None:
            if len(loaded) != 1:
                print(f"cairn export: the checkpoint has policies {sorted(loaded)}; choose one "
                      "with --policy-id.", file=sys.stderr)
                return 2
            policy = next(iter(loaded.values()))
        elif args.policy_id in loaded:
            policy = loaded[args.policy_id]
        else:
            print(f"cairn export: no policy {args.policy_id!r}; the checkpoint has "
                  f"{sorted(loaded)}.", file=sys.stderr)
            return 2
    else:
        policy = loaded
    if args.format == "onnx":
        export_model(policy, args.out, onnx=args.opset or 18)
    else:
        export_model(policy, args.out)
    print(f"exported {args.format} model to {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command (and ``python -m cairn``)."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "export":
            return _export(args)
        from cairn.checkpoint.reader import get_checkpoint_info

        info = get_checkpoint_info(args.checkpoint)
        info.pop("files")
        print(json.dumps(info, indent=2))
        return 0
    except CairnError as exc:
        print(f"cairn {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
