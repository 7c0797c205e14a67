"""Replay-buffer checkpoint I/O against plain numpy, side by side.

For each buffer (1M CartPole transitions with 4-float observations; 100k transitions of 84x84
uint8 frames), and in alternating repetitions:

* cairn save: the ``replay_buffer`` component written as the checkpoint writer writes it
  (safetensors streamed from views of the storage, hashed, fsynced, in an atomic directory
  with a manifest); restore: verified read plus ``ReplayBuffer.set_state``.
* numpy: the same bytes written to one file with ``write`` + ``fsync``, and read back into a
  fresh array with ``readinto``.
* the whole ``algo.save()`` / ``Algorithm.from_checkpoint()`` of a DQN holding the CartPole
  buffer, for reference.

Peak memory during save is measured twice: tracemalloc (numpy allocations) and RSS sampled
every millisecond by a thread; both are reported as extra bytes over the buffer itself.

    .venv/bin/python bench/replay_checkpoint.py [--reps 5] [--out bench/results/replay_checkpoint.md]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import cairn
from cairn.algorithms.dqn import DQN
from cairn.checkpoint.atomic import atomic_directory
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.manifest import build_manifest, read_manifest
from cairn.checkpoint.reader import read_state_files
from cairn.checkpoint.writer import write_json_file, write_state_files
from cairn.replay import ReplayBuffer, replay_buffer_from_state

STATE_FILE, ARRAYS_FILE = "state.json", "state.safetensors"


def filled_buffer(capacity: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity, seed=0)
    chunk = min(capacity, 10_000)
    for start in range(0, capacity, chunk):
        n = min(chunk, capacity - start)
        if np.dtype(obs_dtype) == np.uint8:
            obs = np.frombuffer(rng.bytes(n * int(np.prod(obs_shape))), np.uint8).reshape(n, *obs_shape)
            next_obs = np.roll(obs, 1, axis=0)
        else:
            obs = rng.normal(size=(n, *obs_shape)).astype(obs_dtype)
            next_obs = obs + 0.01
        buffer.add({
            "obs": obs, "actions": rng.integers(0, 2, n), "rewards": np.ones(n, np.float32),
            "next_obs": next_obs, "terminateds": rng.random(n) < 0.01,
            "n_steps": np.ones(n, np.int32),
        })
    return buffer


def buffer_bytes(buffer: ReplayBuffer) -> int:
    return sum(c.nbytes for c in buffer.columns.values())


# ------------------------------------------------------------------------------------ cairn
def cairn_save(buffer: ReplayBuffer, path: Path) -> None:
    state = buffer.get_state(copy=False)
    with atomic_directory(path) as tmp:
        files: dict[str, dict[str, Any]] = {}
        write_state_files(tmp, STATE_FILE, ARRAYS_FILE, state, files)
        manifest = build_manifest(checkpoint_type="Algorithm", class_reference="DQN",
                                  state_file=STATE_FILE, files=files, policy_ids=[])
        write_json_file(tmp, MANIFEST_FILE, manifest, {})


def cairn_restore(path: Path) -> ReplayBuffer:
    manifest = read_manifest(path)
    state = read_state_files(path, manifest, ARRAYS_FILE, STATE_FILE, kind="component:replay_buffer")
    return replay_buffer_from_state(state)


# ------------------------------------------------------------------------------------ numpy
def numpy_save(buffer: ReplayBuffer, path: Path) -> None:
    with open(path, "wb") as f:
        for column in buffer.columns.values():
            f.write(memoryview(column.reshape(-1)).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def numpy_restore(path: Path) -> np.ndarray:
    out = np.empty(path.stat().st_size, dtype=np.uint8)
    with open(path, "rb") as f:
        f.readinto(memoryview(out))
    return out


# ----------------------------------------------------------------------------------- memory
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_extra_memory(fn: Callable[[], Any]) -> tuple[int, int]:
    """(tracemalloc peak, RSS peak) of ``fn`` above what was in use when it started."""
    peak_rss = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak_rss[0] = max(peak_rss[0], _rss())
            time.sleep(0.001)

    base_rss = _rss()
    thread = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    base_traced = tracemalloc.get_traced_memory()[0]
    thread.start()
    try:
        fn()
    finally:
        stop.set()
        thread.join()
        traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return traced_peak - base_traced, max(0, peak_rss[0] - base_rss)


# ------------------------------------------------------------------------------------ bench
def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_buffer(name: str, buffer: ReplayBuffer, reps: int, root: Path) -> dict[str, Any]:
    size = buffer_bytes(buffer)
    times: dict[str, list[float]] = {
        k: [] for k in ("cairn_save", "numpy_save", "cairn_restore", "numpy_restore")}
    for rep in range(reps + 1):  # the first repetition warms caches and is dropped
        ck, npf = root / f"{name}_ckpt", root / f"{name}.bin"
        for p in (ck, npf):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        order = [("cairn_save", functools.partial(cairn_save, buffer, ck)),
                 ("numpy_save", functools.partial(numpy_save, buffer, npf))]
        for key, fn in order if rep % 2 else order[::-1]:
            t = timed(fn)
            if rep:
                times[key].append(t)
        restored: dict[str, Any] = {}
        restore_order = [("cairn_restore", cairn_restore), ("numpy_restore", numpy_restore)]
        for key, fn in restore_order[:: 1 if rep % 2 else -1]:
            source = ck if key == "cairn_restore" else npf
            start = time.perf_counter()
            restored[key] = fn(source)
            if rep:
                times[key].append(time.perf_counter() - start)
        check = restored["cairn_restore"]
        assert (len(check) == len(buffer)
                and np.array_equal(check.columns["obs"][-5:], buffer.columns["obs"][-5:]))
        restored.clear()
    shutil.rmtree(root / f"{name}_ckpt", ignore_errors=True)
    traced, rss = peak_extra_memory(lambda: cairn_save(buffer, root / f"{name}_mem"))
    shutil.rmtree(root / f"{name}_mem", ignore_errors=True)
    (root / f"{name}.bin").unlink(missing_ok=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"name": name, "bytes": size, **med, "traced_extra": traced, "rss_extra": rss,
            "all": times}


def bench_algo_save(buffer: ReplayBuffer, reps: int, root: Path) -> dict[str, float]:
    algo = (cairn.DQNConfig().environment("CartPole-v1").debugging(seed=0)
            .training(replay_buffer_config={"capacity": buffer.capacity})
            .checkpointing(store_replay_buffer=True).build())
    assert isinstance(algo, DQN)
    algo.replay_buffers["default_policy"] = buffer
    saves, loads = [], []
    try:
        for rep in range(reps + 1):
            path = root / "algo_ckpt"
            shutil.rmtree(path, ignore_errors=True)
            t_save = timed(functools.partial(algo.save, path))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                restored = cairn.Algorithm.from_checkpoint(path)
                t_load = time.perf_counter() - start
            assert len(restored.replay_buffers["default_policy"]) == len(buffer)  # type: ignore[attr-defined]
            restored.stop()
            if rep:
                saves.append(t_save)
                loads.append(t_load)
    finally:
        algo.stop()
        shutil.rmtree(root / "algo_ckpt", ignore_errors=True)
    return {"save": statistics.median(saves), "load": statistics.median(loads)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the results table (markdown) here")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cairn_bench_", dir=args.dir))
    try:
        rows = []
        cartpole = filled_buffer(1_000_000, (4,), np.float32)
        rows.append(bench_buffer("cartpole_1M", cartpole, args.reps, root))
        algo = bench_algo_save(cartpole, args.reps, root)
        del cartpole
        frames = filled_buffer(100_000, (84, 84), np.uint8)
        rows.append(bench_buffer("frames_84x84_100k", frames, max(3, args.reps - 2), root))
        del frames
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = render(rows, algo, args.reps)
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def render(rows: list[dict[str, Any]], algo: dict[str, float], reps: int) -> str:
    import torch

    mib = 1 << 20
    lines = [
        "# Replay-buffer checkpoint I/O (`bench/replay_checkpoint.py`)",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other jobs (timings vary run to run); "
        f"Python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
        f"cairn {cairn.__version__}. Medians of {reps} repetitions (frames: {max(3, reps - 2)}) "
        "after one warm-up, cairn and numpy alternating.",
        "",
        "Save: cairn writes the `replay_buffer` component (safetensors from views of the "
        "storage, xxh3 hashes, fsync, atomic directory, manifest); numpy writes the same bytes "
        "with `write` + `fsync`. Restore: cairn's verified read + `ReplayBuffer.set_state`; "
        "numpy `readinto` a fresh array.",
        "",
        "| buffer | MiB | cairn save (s) | numpy save (s) | ratio "
        "| cairn restore (s) | numpy read (s) | ratio | extra memory during save: tracemalloc / RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['bytes'] / mib:.0f} | {r['cairn_save']:.3f} | {r['numpy_save']:.3f} | "
            f"{r['cairn_save'] / r['numpy_save']:.2f}x | {r['cairn_restore']:.3f} | "
            f"{r['numpy_restore']:.3f} | {r['cairn_restore'] / r['numpy_restore']:.2f}x | "
            f"{r['traced_extra'] / mib:.2f} MiB / {r['rss_extra'] / mib:.1f} MiB "
            f"({100 * max(r['traced_extra'], r['rss_extra']) / r['bytes']:.1f}% of the buffer) |"
        )
    lines += [
        "",
        f"Whole `algo.save()` / `Algorithm.from_checkpoint()` of a CartPole DQN holding the 1M "
        f"buffer (policy files, env rebuild included): {algo['save']:.3f} s / {algo['load']:.3f} s.",
        "",
        "All repetitions (s): " + "; ".join(
            f"{r['name']} "
            + ", ".join(f"{k}=[{', '.join(f'{x:.3f}' for x in v)}]" for k, v in r["all"].items())
            for r in rows),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
