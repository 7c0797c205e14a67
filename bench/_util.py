"""Shared helpers for cairn's side-by-side benchmarks: timing, machine facts, fsync, tables."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BURN_US",
    "REPO",
    "command_line",
    "dir_size",
    "fmt",
    "fsync_file",
    "fsync_tree",
    "load_average",
    "machine_lines",
    "make_burning_cartpole",
    "median",
    "ratio",
    "sb3_ppo_kwargs",
    "start_ray",
    "table",
    "timed",
]

REPO = Path(__file__).resolve().parent.parent


#: Microseconds of CPU each step of :func:`make_burning_cartpole` burns by default.
BURN_US = 200.0


def make_burning_cartpole(env_config: dict[str, Any]) -> Any:
    """CartPole-v1 whose step burns ``env_config["burn_us"]`` microseconds of CPU (an env with a
    real per-step cost, for the Ray benches; :func:`start_ray` makes Ray pickle it by value)."""
    import gymnasium as gym

    class Burning(gym.Wrapper):
        def step(self, action: Any) -> Any:
            end = time.perf_counter() + env_config.get("burn_us", BURN_US) * 1e-6
            while time.perf_counter() < end:
                pass
            return self.env.step(action)

    return Burning(gym.make("CartPole-v1"))


def start_ray(num_cpus: int = 2) -> Any:
    """``ray.init`` for a bench (``num_cpus`` CPUs, no dashboard, quiet), with this module pickled
    by value so that Ray workers, which cannot import ``_util`` by name, get its env creators."""
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # address="local": a cluster of its own, never one another job on the machine started.
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    return ray


def median(values: Iterable[float]) -> float:
    """Median of the values (NaN when there are none)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is zero or missing."""
    return a / b if b else float("nan")


def sb3_ppo_kwargs(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Stable-Baselines3's PPO arguments (also MaskablePPO's and RecurrentPPO's) for cairn's
    PPO ``training()`` settings ``hparams``, so both libraries run the same update."""
    return dict(learning_rate=hparams["lr"], batch_size=hparams["minibatch_size"],
                n_epochs=hparams["num_epochs"], gamma=hparams["gamma"], gae_lambda=hparams["lambda_"],
                clip_range=hparams["clip_param"], ent_coef=hparams["entropy_coeff"],
                vf_coef=hparams["vf_coeff"], max_grad_norm=hparams["grad_clip"],
                normalize_advantage=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def train_until(algo: Any, steps: int) -> tuple[int, float]:
    """Call ``algo.train()`` until it has sampled ``steps`` env steps: (steps sampled, wall s)."""
    start = time.perf_counter()
    sampled = 0
    while sampled < steps:
        sampled = algo.train()["num_env_steps_sampled_lifetime"]
    return sampled, time.perf_counter() - start


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush one file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every file under ``root`` and every directory (so renames and creates persist)."""
    root = Path(root)
    if root.is_file():
        fsync_file(root)
        fsync_file(root.parent)
        return
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_file(Path(dirpath) / name)
        fsync_file(dirpath)
    fsync_file(root.parent)


def dir_size(root: str | os.PathLike[str]) -> int:
    """Bytes of all regular files under ``root`` (or of the file itself)."""
    root = Path(root)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def load_average() -> str:
    """The 1-minute load average, as a string (shows how busy the shared machine was)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def machine_lines(extra: Sequence[str] = ()) -> list[str]:
    """Markdown bullet lines describing the machine and library versions."""
    import torch

    lines = [
        f"- Machine: {os.cpu_count()} CPU cores ({_cpu_model()}), Linux {platform.release()}; "
        "**shared with other agents running tests, so timings are noisy** (load average given "
        "per run).",
        f"- Python {platform.python_version()}, torch {torch.__version__} "
        f"(intra-op threads {torch.get_num_threads()}, inter-op threads "
        f"{torch.get_num_interop_threads()} when the report was written), numpy "
        f"{_version('numpy')}, gymnasium {_version('gymnasium')}",
        f"- cairn {_version('cairn-rl')} (git {_git_head()}), Stable-Baselines3 "
        f"{_version('stable-baselines3')}, Ray/RLlib {_version('ray')}",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
    ]
    return lines + list(extra)


def _git_head() -> str:
    try:
        head = (REPO / ".git" / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            return (REPO / ".git" / head[5:]).read_text().strip()[:10]
        return head[:10]
    except OSError:
        return "?"


def command_line() -> str:
    """The command that ran this script, relative to the repository root."""
    script = os.path.relpath(sys.argv[0], REPO)
    # The interpreter of the virtualenv that ran it (.venv or .bench-venv), not a fixed one.
    prefix = Path(sys.prefix)
    python = (os.path.relpath(prefix / "bin" / "python", REPO) if prefix.is_relative_to(REPO)
              else sys.executable)
    return " ".join([python, script, *map(shlex.quote, sys.argv[1:])])


def cairn_code_line() -> str:
    """Where the imported cairn lives and its git commit (the bench venv may use a worktree)."""
    import subprocess

    import cairn

    root = Path(cairn.__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "cairn"],
                           capture_output=True, text=True).stdout.strip()
    note = " (with uncommitted changes)" if dirty else ""
    return f"- cairn code imported from `{root}` at commit {head}{note}"


def write_report(path: Path | None, lines: Sequence[str]) -> None:
    """Write a bench's report lines to ``path`` (folders made as needed) and say so; None: skip."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))
        print(f"wrote {path}")


def fmt(x: float, digits: int = 2) -> str:
    """A number for a table: thousands separators for big ones, NaN as a dash."""
    if x != x:  # NaN
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out
