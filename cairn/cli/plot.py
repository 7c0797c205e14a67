"""``cairn plot RUN [RUN ...] --out curve.png``: learning curves from runs' progress.csv.

Each run is a line. Runs whose config.json agree except for the seed are one experiment
over seeds: drawn as their mean with a band from their min to their max (each run's curve is
interpolated onto the x values where all of them have data).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cairn.cli.common import UsageError

__all__ = ["add_parser", "run", "group_by_seed", "plot_runs"]

_X_LABELS = {"timesteps": "env steps", "time": "training time (s)", "training_iteration": "iteration"}
_IGNORED_KEYS = ("seed", "log_dir")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn plot`` to the subcommands ``sub``."""
    p = sub.add_parser("plot", parents=[common], help="learning curves of runs (PNG)",
                       description="Plot learning curves from the progress.csv of runs of cairn train. Runs "
                                   "that differ only by seed are drawn as a mean line with a min-max band.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories of cairn train")
    p.add_argument("--out", required=True, help="image to write (.png; .svg and .pdf work too)")
    p.add_argument("--x", default="timesteps", choices=sorted(_X_LABELS), help="x axis (default timesteps)")
    p.add_argument("--y", default="episode_return_mean", metavar="METRIC",
                   help="a progress.csv column (default episode_return_mean)")
    p.add_argument("--size", default="960x540", metavar="WxH", help="image size in pixels (default 960x540)")
    p.add_argument("--title", default=None, help="title (default: the metric and the environment)")
    p.set_defaults(run=run)


def _read_run(run_dir: str, x: str, y: str) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    from cairn.cli.runlog import CONFIG_FILE, PROGRESS_FILE, read_progress

    path = os.path.join(run_dir, PROGRESS_FILE)
    if not os.path.isfile(path):
        raise UsageError(f"{run_dir} has no {PROGRESS_FILE}; pass run directories written by cairn train.")
    columns, rows = read_progress(path)
    for column in (x, y):
        if column not in columns:
            raise UsageError(f"{path} has no column {column!r}; it has {', '.join(columns)}.")
    config_path = os.path.join(run_dir, CONFIG_FILE)
    config = json.loads(open(config_path).read()) if os.path.isfile(config_path) else {}
    xs = np.array([row[x] for row in rows], dtype=float)
    ys = np.array([row[y] for row in rows], dtype=float)
    keep = ~(np.isnan(xs) | np.isnan(ys))
    return config, xs[keep], ys[keep]


def group_by_seed(configs: Sequence[dict[str, Any]]) -> list[list[int]]:
    """Indices of runs grouped by config without the seed (and log_dir), in first-seen order.
    Runs without a config.json are groups of their own."""
    groups: dict[str, list[int]] = {}
    for i, config in enumerate(configs):
        key = json.dumps({k: v for k, v in config.items() if k not in _IGNORED_KEYS}, sort_keys=True) \
            if config else f"#{i}"
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _label(names: Sequence[str]) -> str:
    if len(names) == 1:
        return names[0]
    prefix = os.path.commonprefix(list(names)).rstrip("_-. ")  # noqa: RUF071 (names, not paths)
    base = prefix or names[0]
    return f"{base} (mean of {len(names)} seeds; band: min to max)"


def _parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size {text}: expected WIDTHxHEIGHT in pixels, e.g. 960x540.") from None
    if not (100 <= width <= 10000 and 100 <= height <= 10000):
        raise UsageError(f"--size {text}: width and height must be between 100 and 10000 pixels.")
    return width, height


def plot_runs(run_dirs: Sequence[str], out: str, *, x: str = "timesteps", y: str = "episode_return_mean",
              size: tuple[int, int] = (960, 540), title: str | None = None) -> None:
    """Draw the runs' ``y`` against ``x`` into the image ``out`` of ``size`` pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [_read_run(d, x, y) for d in run_dirs]
    names = [os.path.basename(os.path.normpath(d)) or d for d in run_dirs]
    dpi = 100
    fig, ax = plt.subplots(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    try:
        for n, group in enumerate(group_by_seed([config for config, _, _ in runs])):
            color = f"C{n % 10}"
            label = _label([names[i] for i in group])
            if len(group) == 1:
                _, xs, ys = runs[group[0]]
                ax.plot(xs, ys, color=color, label=label, linewidth=1.8)
                continue
            series = [(runs[i][1], runs[i][2]) for i in group if len(runs[i][1])]
            lo = max(xs[0] for xs, _ in series)
            hi = min(xs[-1] for xs, _ in series)
            grid = np.unique(np.concatenate([xs[(xs >= lo) & (xs <= hi)] for xs, _ in series]))
            if not len(grid):
                continue
            curves = np.stack([np.interp(grid, xs, ys) for xs, ys in series])
            ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.2, linewidth=0)
            ax.plot(grid, curves.mean(axis=0), color=color, label=label, linewidth=1.8)
        envs = sorted({str(config.get("env")) for config, _, _ in runs if config.get("env")})
        ax.set_title(title or (y if len(envs) != 1 else f"{y} on {envs[0]}"))
        ax.set_xlabel(_X_LABELS[x])
        ax.set_ylabel(y)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small", frameon=False)
        ax.ticklabel_format(axis="x", style="plain")
        fig.tight_layout()
        fig.savefig(out, dpi=dpi)
    finally:
        plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Run ``cairn plot``."""
    size = _parse_size(args.size)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("cairn plot needs matplotlib: pip install 'cairn-rl[cli]'.") from None
    plot_runs(args.runs, args.out, x=args.x, y=args.y, size=size, title=args.title)
    print(f"plotted {len(args.runs)} run{'s' if len(args.runs) > 1 else ''} to {args.out}")
    return 0
