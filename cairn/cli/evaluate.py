"""``cairn evaluate CKPT``: greedy episodes of a trained algorithm, their return and length
(mean, std, min, max), optionally a GIF or MP4 of one episode; with ``--opponent``, greedy games
of a two-player game against a fixed opponent, counted as wins, draws and losses
(:mod:`cairn.cli.evaluate_games`).

``--seed`` plays on a fresh evaluation runner seeded from it, so that the numbers repeat
(``Algorithm.evaluate(num_episodes=N, seed=S)`` is the Python twin and gives the same ones);
without it the checkpoint's own evaluation runner goes on with its seed stream.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from typing import TYPE_CHECKING, Any

from cairn.cli.common import CommandError, UsageError, check_seed, json_safe
from cairn.cli.env_names import ENV_HELP, add_import_option, resolve_env
from cairn.cli.episode_watch import EpisodeWatch, stderr_unless
from cairn.cli.evaluate_games import DEFAULT_GAMES, DEFAULT_MAIN, check_arguments, run_games
from cairn.errors import ReplayBufferNotRestoredWarning

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["add_parser", "run", "render_episode", "first_episode_seed", "write_frames"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn evaluate`` to the subcommands ``sub``."""
    p = sub.add_parser("evaluate", parents=[common],
                       help="play greedy episodes of a checkpoint (two-player games: against --opponent)",
                       description="Play greedy episodes of an Algorithm checkpoint and report "
                                   "their return and length (mean, std, min, max); with --opponent, "
                                   "greedy games of a two-player game against a fixed opponent, "
                                   "reported as wins, draws and losses.")
    p.add_argument("checkpoint",
                   help="an Algorithm checkpoint (e.g. RUN/checkpoints/checkpoint_000010), "
                        "or a run directory RUN (or RUN/checkpoints) for its newest checkpoint")
    p.add_argument("--episodes", type=int, default=None, metavar="N",
                   help="episodes to play (default: the config's evaluation_duration, 10)")
    p.add_argument("--env", default=None, metavar="ENV", help="evaluate on this environment instead of the "
                                                             f"checkpoint's (same spaces): {ENV_HELP}")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="seed the episodes: equal seeds, equal numbers")
    p.add_argument("--max-episode-steps", type=int, default=None, metavar="N",
                   help="truncate each episode (and the --render one) after N steps, as a time limit does")
    p.add_argument("--render", default=None, metavar="FILE",
                   help="also record one greedy episode into FILE: .gif (Pillow) or .mp4 (imageio-ffmpeg); "
                        "with --seed it is the first episode of the report")
    p.add_argument("--fps", type=int, default=30, help="frames per second of --render (default 30)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON document")
    games = p.add_argument_group("games against a fixed opponent (two-player games)")
    games.add_argument("--opponent", default=None, metavar="OPP",
                       help="play greedy games against OPP and print wins/draws/losses: a policy ID of "
                            "the checkpoint, random_legal, or a scripted opponent package.module:function "
                            "(or :Class); e.g. cairn.envs.connect_four:connect_four_heuristic")
    games.add_argument("--games", type=int, default=None, metavar="N",
                       help=f"games to play with --opponent, half of them as first player "
                            f"(default {DEFAULT_GAMES})")
    games.add_argument("--policy-id", default=None, metavar="ID",
                       help=f"the checkpoint's policy that plays against --opponent (default: its only "
                            f"policy, else {DEFAULT_MAIN!r})")
    add_import_option(p)
    p.set_defaults(run=run, parser=p)


def write_frames(path: str, frames: list[Any], fps: int) -> None:
    """Write RGB frames (``H x W x 3`` uint8 arrays) as a GIF or MP4 with imageio."""
    try:
        import imageio.v3 as iio
    except ImportError:
        raise UsageError("--render needs imageio: pip install 'cairn-rl[cli]'.") from None
    if path.lower().endswith(".gif"):
        iio.imwrite(path, frames, extension=".gif", duration=1000 / fps, loop=0)
    else:
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise UsageError("--render to .mp4 needs imageio-ffmpeg: pip install 'cairn-rl[cli]'.") from None
        import imageio

        imageio.mimwrite(path, frames, fps=fps, macro_block_size=1)


def first_episode_seed(seed: int | None) -> int | None:
    """The reset seed of the first episode that ``Algorithm.evaluate(seed=seed)`` plays, as
    evaluation says (:func:`cairn.algorithms.evaluation.first_episode_seed`); so that
    ``--render`` records that episode (a test holds the two together)."""
    from cairn.algorithms.evaluation import first_episode_seed as evaluation_first_seed

    return evaluation_first_seed(seed)


def render_episode(algo: Algorithm, seed: int | None,
                   max_steps: int | None = None) -> tuple[list[Any], float, int]:
    """Play one greedy episode on a fresh ``render_mode="rgb_array"`` copy of the algorithm's
    environment, reset with ``seed`` (and ended after ``max_steps`` steps); returns (frames: the
    reset one and one per step, return, length)."""
    from cairn.env_runner.env_runner import DEFAULT_AGENT_ID
    from cairn.env_runner.make_env import close_env, is_multi_agent_env, make_env
    from cairn.policy.recurrent import is_recurrent

    # pygame-based renderers (Gymnasium's classic control) need no display for rgb_array frames.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    config = algo.config.copy()
    config.environment(env_config={**(config.env_config or {}), "render_mode": "rgb_array"})
    env = make_env(config)
    try:
        if is_multi_agent_env(env):
            raise UsageError("--render records single-agent environments only; leave it out for this one.")
        policy = algo.get_policy(config.map_agent(DEFAULT_AGENT_ID))
        obs, _ = env.reset(seed=seed)
        frames, total, length = [env.render()], 0.0, 0
        if frames[0] is None:
            raise UsageError(f"environment {config.env!r} renders no rgb_array frames; --render needs them.")
        state = policy.get_initial_state() if is_recurrent(policy) else None
        done = False
        while not done:
            if state is None:
                action = policy.compute_single_action(obs, explore=False)
            else:  # a recurrent policy carries its state from step to step
                action, state = policy.compute_single_action(obs, explore=False, state=state)
            obs, reward, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            total, length = total + float(reward), length + 1
            done = bool(terminated or truncated) or (max_steps is not None and length >= max_steps)
        return frames, total, length
    finally:
        close_env(env)


def _restore(checkpoint: str, overrides: dict[str, Any]) -> Any:
    """The checkpoint's algorithm, with ``overrides``. A MuJoCo env that cannot load the OpenGL
    backend ``MUJOCO_GL`` names fails while the restore builds it; that is this machine's setup,
    so it is said as such, not as a checkpoint that does not fit its objects."""
    from cairn.algorithms.algorithm import Algorithm
    from cairn.envs.mujoco_gl import mujoco_gl_problem

    try:
        return Algorithm.from_checkpoint(checkpoint, config_overrides=overrides)
    except Exception as exc:
        problem = mujoco_gl_problem(exc)
        if problem is None:
            raise
        raise CommandError(problem) from exc


def without_fixed_opponents(checkpoint: str) -> dict[str, Any]:
    """The ``config_overrides`` that restore ``checkpoint``'s league, if it has one with fixed
    opponents, without them (``{}`` otherwise). ``cairn evaluate`` never plays them: games
    against ``--opponent`` play the checkpoint's policies and that opponent only, and evaluation
    episodes map main to every seat (docs/league.md), so a fixed opponent whose module this
    process cannot import (a script's, a project not installed here) must not stop it. Read from
    the algorithm state's JSON alone; no opponent is resolved. (Read before the restore, which
    reads the state again: a checkpoint replaced in between gets the other's league settings,
    which cairn evaluate does not use either.)"""
    from cairn.checkpoint import load_algorithm_state

    settings = (load_algorithm_state(checkpoint, policy_ids=[]).get("config") or {}).get("league_config")
    if not isinstance(settings, dict) or not settings.get("opponents"):
        return {}
    return {"league_config": {**settings, "opponents": {}}}


def _env_label(config: AlgorithmConfig) -> str:
    """The environment as the report names it: its ID or registered name; for a creator, its
    name, after the game or module its env_config names (``ALE/Pong-v5 (make_atari_env)``)."""
    if isinstance(config.env, str):
        return config.env
    name = getattr(config.env, "__name__", "env")
    named = [value for key in ("env_id", "env_module")
             if isinstance(value := (config.env_config or {}).get(key), str)]
    return f"{named[0]} ({name})" if named else name


def _record(algo: Algorithm, args: argparse.Namespace) -> dict[str, Any]:
    """``--render``: record one greedy episode into ``args.render``; what the report says of it."""
    with warnings.catch_warnings():
        # glfw warns (two lines each) before MuJoCo fails without a display; the failure says it.
        warnings.filterwarnings("ignore", module="glfw")
        frames, total, length = render_episode(algo, first_episode_seed(args.seed), args.max_episode_steps)
    write_frames(args.render, frames, args.fps)
    return {"path": args.render, "frames": len(frames), "episode_return": total, "episode_len": length}


def _evaluate(algo: Algorithm, args: argparse.Namespace) -> dict[str, Any]:
    """``algo.evaluate(args.episodes, seed=args.seed)``, played on envs wrapped by an
    :class:`EpisodeWatch` (``--max-episode-steps``, a line per episode on stderr): through the
    same evaluation functions, runner state and torch threads as ``Algorithm.evaluate``, so that
    without ``--max-episode-steps`` the numbers are its numbers."""
    from cairn.algorithms.evaluation import evaluate_episodes, evaluation_runner
    from cairn.env_runner.make_env import make_env
    from cairn.policy.torch_utils import torch_threads

    total = args.episodes or algo.config.evaluation_duration
    watch = EpisodeWatch(total=total, max_steps=args.max_episode_steps,
                         stream=stderr_unless(bool(getattr(args, "quiet", False))))
    config = algo.config.copy()
    config.environment(watch.creator(lambda: make_env(algo.config)))
    # The checkpoint's own evaluation runner goes on with its stream unless --seed asks for a fresh one.
    # The algorithm's callbacks play the episodes, as in Algorithm.evaluate.
    runner = None if args.seed is not None else evaluation_runner(
        config, algo.policies, algo.get_evaluation_runner_state(), callbacks=algo.callbacks)
    try:
        with torch_threads(config.torch_num_threads, algo.policies.values()):
            return evaluate_episodes(runner, config, algo.policies, total, seed=args.seed,
                                     callbacks=algo.callbacks)
    finally:
        if runner is not None:
            runner.stop()


def _render_failure(path: str, exc: Exception) -> CommandError:
    """The error that ends ``cairn evaluate`` after its report when only ``--render`` failed."""
    from cairn.envs.mujoco_gl import mujoco_gl_problem

    problem = mujoco_gl_problem(exc)
    cause = problem or " ".join(f"{type(exc).__name__}: {exc}".split())
    return CommandError(f"--render {path}: {cause} The evaluation above is complete; "
                        "only the recording failed.")


def run(args: argparse.Namespace) -> int:
    """Run ``cairn evaluate``."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.cli.run_checkpoints import checkpoint_or_latest_of_run

    if args.episodes is not None and args.episodes < 1:
        raise UsageError(f"--episodes {args.episodes}: expected at least 1.")
    if args.render is not None and not args.render.lower().endswith((".gif", ".mp4")):
        raise UsageError(f"--render {args.render}: expected a .gif or .mp4 file name.")
    if args.fps < 1:
        raise UsageError(f"--fps {args.fps}: expected at least 1.")
    if args.max_episode_steps is not None and args.max_episode_steps < 1:
        raise UsageError(f"--max-episode-steps {args.max_episode_steps}: expected at least 1.")
    check_seed(args.seed)
    check_arguments(args)
    args.checkpoint = checkpoint_or_latest_of_run(args.checkpoint)
    if get_checkpoint_info(args.checkpoint)["type"] != "Algorithm":
        raise UsageError(f"{args.checkpoint} is a Policy checkpoint; "
                         "cairn evaluate takes an Algorithm checkpoint "
                         "(RUN/checkpoints/checkpoint_<N>), which knows its environment.")
    overrides: dict[str, Any] = {"num_env_runners": 0, "num_envs_per_env_runner": 1}
    if args.env is not None:  # also the way to give a checkpoint back a creator it could not store
        overrides["env"], env_config = resolve_env(args.env)
        if env_config:
            overrides["env_config"] = env_config
    overrides.update(without_fixed_opponents(args.checkpoint))
    with warnings.catch_warnings():  # evaluation never reads the replay buffers
        warnings.simplefilter("ignore", ReplayBufferNotRestoredWarning)
        algo = _restore(args.checkpoint, overrides)
    if args.opponent is not None:
        try:
            return run_games(algo, args, _env_label(algo.config))
        finally:
            algo.stop()
    render_failure: Exception | None = None
    try:
        result = _evaluate(algo, args)
        rendered = None
        if args.render is not None:
            try:
                rendered = _record(algo, args)
            except UsageError:
                raise
            except Exception as exc:  # the returns are known: report them, then the failure
                render_failure = exc
        env = _env_label(algo.config)
    finally:
        algo.stop()
    keys = [f"episode_{what}_{stat}" for what in ("return", "len") for stat in ("mean", "std", "min", "max")]
    report = {"checkpoint": args.checkpoint, "env": env, "seed": args.seed,
              "num_episodes": result["num_episodes"],
              **{key: result[key] for key in keys}, "episode_returns": result["episode_returns"],
              "episode_lens": result["episode_lens"], "render": rendered}
    if args.json:
        print(json.dumps(json_safe(report), indent=2))
    else:
        _print_report(args, env, result, rendered)
    if render_failure is not None:
        raise _render_failure(args.render, render_failure) from render_failure
    return 0


def _print_report(args: argparse.Namespace, env: str, result: dict[str, Any],
                  rendered: dict[str, Any] | None) -> None:
    """The text report: a title line, then the return's and the length's mean, std, min, max."""
    seed = "" if args.seed is None else f", seed {args.seed}"
    count = result["num_episodes"]
    print(f"{os.path.basename(os.path.normpath(args.checkpoint))} on {env}: {count} greedy "
          f"episode{'s' if count != 1 else ''}{seed}")
    for what, label, spec in (("return", "return", ".2f"), ("len", "length", ".1f")):
        values = "  ".join(f"{stat} {format(result[f'episode_{what}_{stat}'], spec):>8}"
                           for stat in ("mean", "std", "min", "max"))
        print(f"  {label:<7} {values}")
    if rendered is not None:
        print(f"  rendered one episode (return {rendered['episode_return']:.2f}, "
              f"{rendered['frames']} frames) to {rendered['path']}")
