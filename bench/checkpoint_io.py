"""Checkpoint I/O, cairn vs Stable-Baselines3 vs RLlib (and a plain numpy baseline), side by side.

Parts:

1. **Large models.** PPO on CartPole-v1 with separate actor and critic MLPs of 3x1024 and
   3x2048 (tanh), after one tiny training iteration so that Adam's moment buffers exist. Per
   library: save (including fsync, so the bytes are on disk), restore into a new object, and
   size on disk. Baseline: numpy writing the cairn checkpoint's total array bytes as one file
   with fsync, and reading them back (from the page cache, like every restore here).
   Save: cairn ``algo.save(path)`` (atomic, fsyncs itself); SB3 ``model.save(path)`` + fsync of
   the zip; RLlib ``algo.save_to_path(path)`` + fsync of every file it wrote. Restore: cairn
   ``Algorithm.from_checkpoint``; SB3 ``PPO.load``; RLlib ``Algorithm.from_checkpoint``.
2. **Partial multi-agent restore** (cairn): ``Algorithm.from_checkpoint(path,
   policy_ids=["p0"])`` from a ``MultiAgentCartPole`` checkpoint with 64 policies vs with 2.
3. **Fresh process**: a new interpreter imports the library, restores a small CartPole
   checkpoint and computes one greedy action; wall time of the whole process.

The libraries take turns within each repetition (rotating order), after a warm-up round.

    .bench-venv/bin/python bench/checkpoint_io.py            # full, ~5-8 min
    .bench-venv/bin/python bench/checkpoint_io.py --quick    # smoke: 3x256 models, 2 repeats
    .bench-venv/bin/python bench/checkpoint_io.py --profile  # + cProfile of cairn save/restore
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import (
    REPO,
    command_line,
    dir_size,
    fmt,
    fsync_file,
    fsync_tree,
    load_average,
    machine_lines,
    median,
    ratio,
    table,
    timed,
    write_report,
)

ENV_ID = "CartPole-v1"
MA_ENV = "bench_ma_cartpole"
OBS = [0.01, -0.02, 0.03, 0.04]
TARGET_SAVE_VS_NUMPY = 1.5
TARGET_RESTORE_SPEEDUP = 3.0
TARGET_PARTIAL_RATIO = 1.2
LIBS = ("numpy", "cairn", "sb3", "rllib")


def ms(seconds: float) -> str:
    return fmt(seconds * 1000, 1)


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f}"


def read_bytes_of_process() -> int:
    """Bytes this process has read through read() so far (Linux /proc/self/io ``rchar``)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


# ------------------------------------------------------------------------------------ cairn
def build_cairn(hidden: list[int], seed: int = 0) -> Any:
    import cairn

    algo = (
        cairn.PPOConfig()
        .environment(ENV_ID)
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1,
                  model={"hidden": hidden, "activation": "tanh", "vf_share_layers": False})
        .debugging(seed=seed)
        .build()
    )
    algo.train()  # one optimizer step: Adam state exists
    return algo


def array_bytes(tree: Any) -> int:
    if isinstance(tree, np.ndarray):
        return int(tree.nbytes)
    if isinstance(tree, dict):
        return sum(array_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(array_bytes(v) for v in tree)
    return 0


def cairn_save(algo: Any, path: Path) -> None:
    algo.save(path)  # atomic directory write; fsyncs files and directories itself


def cairn_restore(path: Path) -> Any:
    import cairn

    return cairn.Algorithm.from_checkpoint(path)


# --------------------------------------------------------------------------------------- SB3
def build_sb3(hidden: list[int], seed: int = 0) -> Any:
    import torch
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", ENV_ID, n_steps=64, batch_size=64, n_epochs=1, seed=seed,
                device="cpu", verbose=0,
                policy_kwargs=dict(net_arch=dict(pi=hidden, vf=hidden), activation_fn=torch.nn.Tanh))
    model.learn(total_timesteps=64)
    return model


def sb3_save(model: Any, path: Path) -> None:
    model.save(path)
    fsync_tree(path)  # the zip file, then its directory


def sb3_restore(path: Path) -> Any:
    from stable_baselines3 import PPO

    return PPO.load(path, device="cpu")


# ------------------------------------------------------------------------------------- RLlib
def ray_init() -> None:
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")


def rllib_config(hidden: list[int], seed: int = 0, batch: int = 64) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=batch, minibatch_size=batch, num_epochs=1)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=hidden, fcnet_activation="tanh",
                                                   vf_share_layers=False))
        .debugging(seed=seed, log_level="ERROR")
    )


def build_rllib(hidden: list[int], seed: int = 0) -> Any:
    ray_init()
    algo = rllib_config(hidden, seed).build_algo()
    algo.train()  # one optimizer step: Adam state exists
    return algo


def rllib_save(algo: Any, path: Path) -> None:
    algo.save_to_path(str(path))
    fsync_tree(path)  # RLlib does not fsync; do it so that the bytes are on disk as for cairn


def rllib_restore(path: Path) -> Any:
    from ray.rllib.algorithms.algorithm import Algorithm

    return Algorithm.from_checkpoint(str(path))


def stop(obj: Any) -> None:
    fn = getattr(obj, "stop", None)
    if fn is not None:
        fn()


# ------------------------------------------------------------------------------------- numpy
def numpy_save(buf: np.ndarray, path: Path) -> None:
    with open(path, "wb") as f:
        buf.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    fsync_file(path.parent)


def numpy_restore(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8)


# ------------------------------------------------------------------------------ part 1: large
def bench_large(hidden: list[int], repeats: int, work: Path, libs: tuple[str, ...]) -> dict[str, Any]:
    print(f"== {len(hidden)}x{hidden[0]}: building and training one step", flush=True)
    objs: dict[str, Any] = {}
    objs["cairn"] = build_cairn(hidden)
    total_array_bytes = array_bytes(objs["cairn"].get_state())
    rng = np.random.default_rng(0)
    objs["numpy"] = rng.integers(0, 255, size=total_array_bytes, dtype=np.uint8)
    if "sb3" in libs:
        objs["sb3"] = build_sb3(hidden)
    if "rllib" in libs:
        objs["rllib"] = build_rllib(hidden)
    params = sum(p.numel() for p in objs["cairn"].get_policy().model.parameters())
    save_fns: dict[str, Callable[[Any, Path], None]] = {
        "numpy": numpy_save, "cairn": cairn_save, "sb3": sb3_save, "rllib": rllib_save}
    restore_fns: dict[str, Callable[[Path], Any]] = {
        "numpy": numpy_restore, "cairn": cairn_restore, "sb3": sb3_restore, "rllib": rllib_restore}
    suffix = {"numpy": ".bin", "cairn": "", "sb3": ".zip", "rllib": ""}

    times: dict[str, dict[str, list[float]]] = {lib: {"save": [], "restore": []} for lib in libs}
    sizes: dict[str, int] = {}
    loads: list[str] = []
    for rep in range(repeats + 1):  # rep 0 is a warm-up round and is not recorded
        order = libs[rep % len(libs):] + libs[: rep % len(libs)]
        loads.append(load_average())
        for lib in order:
            path = work / f"{lib}_{len(hidden)}x{hidden[0]}_{rep}{suffix[lib]}"
            gc.collect()
            t_save, _ = timed(lambda lib=lib, path=path: save_fns[lib](objs[lib], path))
            t_restore, restored = timed(lambda lib=lib, path=path: restore_fns[lib](path))
            stop(restored)
            del restored
            sizes[lib] = dir_size(path)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            if rep:
                times[lib]["save"].append(t_save)
                times[lib]["restore"].append(t_restore)
            print(f"  rep {rep} {lib:5s}: save {t_save * 1000:8.1f} ms  restore "
                  f"{t_restore * 1000:8.1f} ms  size {mib(sizes[lib])} MiB", flush=True)
    for lib in libs:
        if lib != "numpy":
            stop(objs[lib])
    return {"hidden": hidden, "params": params, "array_bytes": total_array_bytes,
            "times": times, "sizes": sizes, "loads": loads[1:]}


# ----------------------------------------------------------------- part 2: partial restore
def make_ma_cartpole(env_config: dict[str, Any]) -> Any:
    from cairn.envs import MultiAgentCartPole

    return MultiAgentCartPole(num_agents=int(env_config["num_agents"]))


def build_ma(n: int, hidden: list[int], agents: int) -> Any:
    """``agents`` CartPoles (the same env for every N), agent_i -> p_(i mod n): only the number
    of policies in the checkpoint differs between the compared checkpoints."""
    import cairn

    cairn.register_env(MA_ENV, make_ma_cartpole)
    algo = (
        cairn.PPOConfig()
        .environment(MA_ENV, env_config={"num_agents": agents})
        .training(train_batch_size=32, minibatch_size=32, num_epochs=1,
                  model={"hidden": hidden, "activation": "tanh", "vf_share_layers": False})
        .multi_agent(policies={f"p{i}" for i in range(n)},
                     policy_mapping_fn={f"agent_{i}": f"p{i % n}" for i in range(agents)})
        .debugging(seed=0)
        .build()
    )
    algo.train()
    return algo


def bench_partial(counts: list[int], hidden: list[int], repeats: int, work: Path) -> dict[str, Any]:
    import cairn
    from cairn.checkpoint.reader import load_algorithm_state

    paths = {}
    for n in counts:
        print(f"== multi-agent: {n} policies, building, one iteration, save", flush=True)
        algo = build_ma(n, hidden, agents=max(counts))
        paths[n] = work / f"ma_{n}"
        algo.save(paths[n])
        algo.stop()
    out: dict[int, dict[str, list[float]]] = {
        n: {"restore": [], "read_state": [], "rchar": []} for n in counts}
    for rep in range(repeats + 1):
        for n in (counts if rep % 2 == 0 else counts[::-1]):
            mapping = {f"agent_{i}": "p0" for i in range(max(counts))}
            gc.collect()
            t_read, _ = timed(lambda n=n: load_algorithm_state(paths[n], policy_ids=["p0"]))
            before = read_bytes_of_process()
            t, algo = timed(lambda n=n, mapping=mapping: cairn.Algorithm.from_checkpoint(
                paths[n], policy_ids=["p0"], policy_mapping_fn=mapping))
            read = read_bytes_of_process() - before
            assert list(algo.policies) == ["p0"], list(algo.policies)
            algo.stop()
            if rep:
                out[n]["restore"].append(t)
                out[n]["read_state"].append(t_read)
                out[n]["rchar"].append(read)
            print(f"  rep {rep} N={n:3d}: from_checkpoint(policy_ids=['p0']) {t * 1000:7.1f} ms, "
                  f"load_algorithm_state {t_read * 1000:7.1f} ms, read {mib(read)} MiB", flush=True)
    sizes = {n: dir_size(paths[n]) for n in counts}
    policy_size = {n: dir_size(paths[n] / "policies" / "p0") for n in counts}
    algo_files = {n: sum(p.stat().st_size for p in paths[n].iterdir() if p.is_file()) for n in counts}
    # For contrast: restoring all N policies of the biggest checkpoint.
    big = max(counts)
    full = []
    for _ in range(max(1, repeats // 2)):
        t, algo = timed(lambda: cairn.Algorithm.from_checkpoint(paths[big]))
        algo.stop()
        full.append(t)
    return {"hidden": hidden, "times": out, "sizes": sizes, "policy_size": policy_size,
            "algo_files": algo_files, "full_restore_big": full, "big": big}


# ------------------------------------------------------------------- part 3: fresh process
_FRESH = {
    "cairn: import cairn + Algorithm.from_checkpoint + compute_single_action": """
import cairn
algo = cairn.Algorithm.from_checkpoint({path!r})
action = algo.compute_single_action({obs!r})
""",
    "cairn: import cairn + Policy.from_checkpoint(policies/default_policy) + compute_single_action": """
import cairn
policy = cairn.Policy.from_checkpoint({path!r} + "/policies/default_policy")
action = policy.compute_single_action({obs!r}, explore=False)
""",
    "RLlib: import + Algorithm.from_checkpoint + module.forward_inference": """
import ray, torch
from ray.rllib.algorithms.algorithm import Algorithm
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
algo = Algorithm.from_checkpoint({path!r})
out = algo.get_module().forward_inference({{"obs": torch.tensor([{obs!r}])}})
action = int(out["action_dist_inputs"].argmax(-1)[0])
""",
    "RLlib: import + RLModule.from_checkpoint(learner_group/.../default_policy) + forward_inference": """
import torch
from ray.rllib.core.rl_module.rl_module import RLModule
module = RLModule.from_checkpoint({path!r} + "/learner_group/learner/rl_module/default_policy")
out = module.forward_inference({{"obs": torch.tensor([{obs!r}])}})
action = int(out["action_dist_inputs"].argmax(-1)[0])
""",
}
_WRAP = """
import time
_t0 = time.perf_counter()
{body}
print("ACTION", int(action), "INSIDE", time.perf_counter() - _t0, flush=True)
"""


def bench_fresh(repeats: int, work: Path, libs: tuple[str, ...]) -> dict[str, Any]:
    print("== fresh process: small CartPole checkpoints", flush=True)
    hidden = [64, 64]
    paths = {"cairn": work / "fresh_cairn", "RLlib": work / "fresh_rllib"}
    algo = build_cairn(hidden)
    algo.save(paths["cairn"])
    algo.stop()
    if "rllib" in libs:
        ralgo = build_rllib(hidden)
        ralgo.save_to_path(str(paths["RLlib"]))
        ralgo.stop()
    results: dict[str, dict[str, list[float]]] = {}
    names = [k for k in _FRESH if "rllib" in libs or not k.startswith("RLlib")]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    for rep in range(repeats + 1):
        for name in (names if rep % 2 == 0 else names[::-1]):
            path = str(paths["cairn" if name.startswith("cairn") else "RLlib"])
            code = _WRAP.format(body=_FRESH[name].format(path=path, obs=OBS))
            start = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 cwd=REPO, env=env)
            wall = time.perf_counter() - start
            marker = [ln for ln in res.stdout.splitlines() if ln.startswith("ACTION")]
            if res.returncode != 0 or not marker:
                raise RuntimeError(f"{name} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
            inside = float(marker[-1].split()[3])
            if rep:
                results.setdefault(name, {"wall": [], "inside": []})
                results[name]["wall"].append(wall)
                results[name]["inside"].append(inside)
            print(f"  rep {rep} {name}: process {wall:.2f} s (to action {inside:.2f} s), "
                  f"action {marker[-1].split()[1]}", flush=True)
    return {name: results[name] for name in names}


# -------------------------------------------------------------------------------- profile
def profile_cairn(hidden: list[int], work: Path, top: int = 22) -> str:
    import cairn

    algo = build_cairn(hidden)
    algo.save(work / "prof_warm")
    cairn.Algorithm.from_checkpoint(work / "prof_warm").stop()
    texts = []
    for what, fn in (
        ("save", lambda: algo.save(work / "prof_save")),
        ("from_checkpoint", lambda: cairn.Algorithm.from_checkpoint(work / "prof_save")),
    ):
        prof = cProfile.Profile()
        prof.enable()
        out = fn()
        prof.disable()
        stop(out)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        texts.append(f"--- cairn {what}, {len(hidden)}x{hidden[0]} (by own time) ---\n"
                     + "\n".join(ln.replace(str(REPO) + "/", "") for ln in lines))
    algo.stop()
    return "\n\n".join(texts)


# ------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke mode: 3x256 models, 2 policies vs 8, 2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fresh-repeats", type=int, default=3)
    parser.add_argument("--no-rllib", action="store_true", help="skip RLlib (no Ray cluster)")
    parser.add_argument("--profile", action="store_true", help="cProfile cairn save and restore")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where checkpoints go (default: a temporary directory)")
    parser.add_argument("--out", type=Path, default=None,
                        help="Markdown results (default: bench/results/checkpoint_io.md; "
                             "--quick writes none unless given)")
    parser.add_argument("--json", type=Path, default=None, help="also dump raw numbers here")
    args = parser.parse_args()
    sizes = [[1024] * 3, [2048] * 3]
    counts, ma_hidden = [2, 64], [256, 256]
    if args.quick:
        sizes, counts, args.repeats, args.fresh_repeats = [[256] * 3], [2, 8], 2, 1
    out_path = args.out or (None if args.quick else REPO / "bench/results/checkpoint_io.md")
    libs = tuple(lib for lib in LIBS if not (args.no_rllib and lib == "rllib"))

    work = Path(tempfile.mkdtemp(prefix="cairn_ckpt_bench_", dir=args.workdir))
    try:
        large = [bench_large(h, args.repeats, work, libs) for h in sizes]
        partial = bench_partial(counts, ma_hidden, args.repeats, work)
        fresh = bench_fresh(args.fresh_repeats, work, libs)
        profile_text = profile_cairn(sizes[0], work) if args.profile else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if "rllib" in libs:
            import ray

            ray.shutdown()
    if profile_text:
        print(profile_text)

    # ---------------------------------------------------------------------------- report
    yes = {True: "**met**", False: "**MISSED**"}
    lines = [
        "# Checkpoint I/O: cairn vs Stable-Baselines3 vs RLlib",
        "",
        f"Command: `{command_line()}` (environment: `bash bench/setup_env.sh`).",
        "",
        *machine_lines([
            "- Disk: the VM's root filesystem (virtio block device); checkpoints in a temporary "
            "directory under /tmp, deleted after each repetition. Restores read from the page "
            "cache (the checkpoint was just written), for every library alike.",
        ]),
        "",
        f"Medians of {args.repeats} repetitions after one dropped warm-up round; within each "
        "repetition the libraries take turns in rotating order. Every save includes fsync: "
        "cairn's `algo.save(path)` fsyncs by itself (atomic write); SB3 `model.save(path)` "
        "then fsync of the zip; RLlib `algo.save_to_path(path)` then fsync of every file (RLlib "
        "does not fsync on its own). Restore = a new object from the files: cairn "
        "`Algorithm.from_checkpoint(path)`, SB3 `PPO.load(path)`, RLlib "
        "`Algorithm.from_checkpoint(path)` (Ray already initialised: `ray.init(num_cpus=2)`). "
        "numpy = one file of the cairn checkpoint's total array bytes: `tofile` + fsync, and "
        "`np.fromfile`.",
        "",
    ]
    header_len = len(lines)
    summary = []
    for res in large:
        tag = f"{len(res['hidden'])}x{res['hidden'][0]}"
        t = {lib: {k: median(v) for k, v in res["times"][lib].items()} for lib in libs}
        lines += [
            f"## Actor + critic {tag} tanh MLPs with Adam state ({res['params']:,} parameters; "
            f"cairn state arrays {mib(res['array_bytes'])} MiB)",
            "",
            *table(
                ["library", "save + fsync (ms)", "restore new object (ms)", "size on disk (MiB)",
                 "save / numpy write", "restore: other / cairn"],
                [[lib, ms(t[lib]["save"]), ms(t[lib]["restore"]), mib(res["sizes"][lib]),
                  fmt(ratio(t[lib]["save"], t["numpy"]["save"])) + "x",
                  "" if lib == "numpy" else fmt(ratio(t[lib]["restore"], t["cairn"]["restore"])) + "x"]
                 for lib in libs],
            ),
            "",
            "All repetitions (ms): " + "; ".join(
                f"{lib} save {', '.join(ms(x) for x in res['times'][lib]['save'])} / restore "
                f"{', '.join(ms(x) for x in res['times'][lib]['restore'])}" for lib in libs)
            + f". Load average at each repetition: {', '.join(res['loads'])}.",
            "",
        ]
        save_ratio = ratio(t["cairn"]["save"], t["numpy"]["save"])
        summary.append([f"{tag}: cairn save / numpy write+fsync", f"{save_ratio:.2f}x",
                        f"<= {TARGET_SAVE_VS_NUMPY}x", yes[save_ratio <= TARGET_SAVE_VS_NUMPY]])
        for other, name in (("sb3", "SB3"), ("rllib", "RLlib")):
            if other in libs:
                r = ratio(t[other]["restore"], t["cairn"]["restore"])
                summary.append([f"{tag}: {name} restore / cairn restore", f"{r:.2f}x",
                                f">= {TARGET_RESTORE_SPEEDUP:.0f}x", yes[r >= TARGET_RESTORE_SPEEDUP]])

    pt = partial["times"]
    lo, hi = min(counts), max(counts)
    med_restore = {n: median(pt[n]["restore"]) for n in counts}
    partial_ratio = ratio(med_restore[hi], med_restore[lo])
    lines += [
        f"## Restoring one policy out of N (cairn, MultiAgentCartPole, {ma_hidden[0]}x"
        f"{ma_hidden[1]} actor + critic per policy with Adam state)",
        "",
        "`Algorithm.from_checkpoint(path, policy_ids=['p0'], policy_mapping_fn={every agent: "
        "'p0'})`; the env is registered with `cairn.register_env` and is the same for every N "
        f"({max(counts)} agents; agent_i -> p_(i mod N) when "
        "saved). `load_algorithm_state` = the checkpoint reader alone; bytes read = growth of "
        "`rchar` in /proc/self/io during the restore.",
        "",
        *table(
            ["policies in checkpoint", "checkpoint size (MiB)", "one policy's files (MiB)",
             "root files (KiB)", "from_checkpoint(policy_ids=['p0']) (ms)",
             "load_algorithm_state(policy_ids=['p0']) (ms)", "bytes read during restore (MiB)"],
            [[n, mib(partial["sizes"][n]), mib(partial["policy_size"][n]),
              fmt(partial["algo_files"][n] / 1024, 1), ms(med_restore[n]),
              ms(median(pt[n]["read_state"])), mib(median(pt[n]["rchar"]))] for n in counts],
        ),
        "",
        f"Ratio N={hi} / N={lo}: {partial_ratio:.2f}x (target <= {TARGET_PARTIAL_RATIO}x: "
        f"{yes[partial_ratio <= TARGET_PARTIAL_RATIO]}). For contrast, restoring all {hi} "
        f"policies: {ms(median(partial['full_restore_big']))} ms. All repetitions (ms): "
        + "; ".join(f"N={n}: {', '.join(ms(x) for x in pt[n]['restore'])}" for n in counts) + ".",
        "",
    ]
    summary.append([f"one policy restored: N={hi} / N={lo}", f"{partial_ratio:.2f}x",
                    f"<= {TARGET_PARTIAL_RATIO}x", yes[partial_ratio <= TARGET_PARTIAL_RATIO]])

    lines += [
        f"## Fresh process: import, restore a CartPole checkpoint (64x64), one action "
        f"(medians of {args.fresh_repeats} after a dropped warm-up)",
        "",
        "Whole process = `subprocess.run([python, '-c', ...])` wall time, interpreter start and "
        "exit included (for RLlib also starting and stopping the local Ray cluster); to action "
        "= measured inside the process from its first line to the action. FACTS.md's anchor for "
        "RLlib: 6.6-7.3 s.",
        "",
        *table(
            ["path", "whole process (s)", "to action, inside (s)", "all (s)"],
            [[name, fmt(median(v["wall"])), fmt(median(v["inside"])),
              ", ".join(fmt(x) for x in v["wall"])] for name, v in fresh.items()],
        ),
        "",
    ]
    names = list(_FRESH)
    if names[2] in fresh:
        r = ratio(median(fresh[names[2]]["wall"]), median(fresh[names[0]]["wall"]))
        lines += [f"RLlib `Algorithm.from_checkpoint` process / cairn `Algorithm.from_checkpoint` "
                  f"process: {r:.1f}x.", ""]
        summary.append(["fresh process, Algorithm path: RLlib / cairn", f"{r:.1f}x", "(report)", ""])

    lines = [*lines[:header_len], "## Summary against targets", "",
             *table(["what", "measured", "target", "met?"], summary), "", *lines[header_len:]]
    if profile_text:
        lines += ["## cProfile of cairn save and restore", "", "```", profile_text, "```", ""]
    write_report(out_path, lines)
    if args.json:
        args.json.write_text(json.dumps({"large": large, "partial": partial, "fresh": fresh},
                                        indent=1, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
