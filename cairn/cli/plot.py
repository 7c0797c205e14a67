"""``cairn plot RUN [RUN ...] --out curve.png``: learning curves from runs' progress.csv.

Each run is a line. Runs whose config.json agree except for the seed are one experiment
over seeds: drawn as their mean with a band from their min to their max (each run's curve is
interpolated onto the x values where all of them have data).

``cairn plot RUN --league --out league.png`` draws a league run's ratings and win rates instead
(docs/league.md): every ``league/rating/<participant>`` column in one panel, every
``league/win_rate/<opponent>`` column in another, one line per column and run.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cairn.cli.common import UsageError
from cairn.cli.env_names import env_label

__all__ = ["add_parser", "run", "group_by_seed", "league_figure", "plot_league", "plot_runs"]

_X_LABELS = {"timesteps": "env steps", "time": "training time (s)", "training_iteration": "iteration"}
_IGNORED_KEYS = ("seed", "log_dir")
_DEFAULT_Y = "episode_return_mean"
#: The panels of ``--league``: the progress.csv columns each draws (by prefix) and its y label.
LEAGUE_PANELS = (("league/rating/", "rating (mu)"), ("league/win_rate/", "win rate of main"))


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn plot`` to the subcommands ``sub``."""
    p = sub.add_parser("plot", parents=[common], help="learning curves of runs (PNG)",
                       description="Plot learning curves from the progress.csv of runs of cairn train. Runs "
                                   "that differ only by seed are drawn as a mean line with a min-max band.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories of cairn train")
    p.add_argument("--out", required=True, help="image to write (.png; .svg and .pdf work too)")
    p.add_argument("--x", default="timesteps", choices=sorted(_X_LABELS), help="x axis (default timesteps)")
    p.add_argument("--y", default=None, metavar="METRIC",
                   help=f"a progress.csv column (default {_DEFAULT_Y})")
    p.add_argument("--league", action="store_true",
                   help="a league run's ratings and win rates: every league/rating/* column in one panel, "
                        "every league/win_rate/* column in another (instead of --y)")
    p.add_argument("--size", default="960x540", metavar="WxH", help="image size in pixels (default 960x540)")
    p.add_argument("--title", default=None, help="title (default: the metric and the environment)")
    p.set_defaults(run=run)


def _read_table(run_dir: str, x: str) -> tuple[dict[str, Any], list[str], list[dict[str, float]]]:
    """A run's config.json (empty without one), progress.csv columns and rows, which have ``x``."""
    from cairn.cli.runlog import CONFIG_FILE, PROGRESS_FILE, read_progress

    path = os.path.join(run_dir, PROGRESS_FILE)
    if not os.path.isfile(path):
        raise UsageError(f"{run_dir} has no {PROGRESS_FILE}; pass run directories written by cairn train.")
    columns, rows = read_progress(path)
    if x not in columns:
        raise UsageError(f"{path} has no column {x!r}; it has {', '.join(columns)}.")
    config_path = os.path.join(run_dir, CONFIG_FILE)
    config = json.loads(open(config_path).read()) if os.path.isfile(config_path) else {}
    return config, columns, rows


def _series(rows: Sequence[dict[str, float]], x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """Column ``y`` against ``x``, without the rows where either is empty (NaN)."""
    xs = np.array([row[x] for row in rows], dtype=float)
    ys = np.array([row.get(y, np.nan) for row in rows], dtype=float)
    keep = ~(np.isnan(xs) | np.isnan(ys))
    return xs[keep], ys[keep]


def _read_run(run_dir: str, x: str, y: str) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    config, columns, rows = _read_table(run_dir, x)
    if y not in columns:
        raise UsageError(f"{os.path.join(run_dir, 'progress.csv')} has no column {y!r}; it has "
                         f"{', '.join(columns)}.")
    return (config, *_series(rows, x, y))


def group_by_seed(configs: Sequence[dict[str, Any]]) -> list[list[int]]:
    """Indices of runs grouped by config without the seed (and log_dir), in first-seen order.
    Runs without a config.json are groups of their own."""
    groups: dict[str, list[int]] = {}
    for i, config in enumerate(configs):
        key = json.dumps({k: v for k, v in config.items() if k not in _IGNORED_KEYS}, sort_keys=True) \
            if config else f"#{i}"
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _label(names: Sequence[str], left_out: Sequence[str] = ()) -> str:
    """The legend entry of a group of runs drawn from ``names``; ``left_out`` are the group's runs
    with no value of the metric (no finished episode yet, say), which the mean does not count."""
    if len(names) == 1:
        label = names[0]
    else:
        prefix = os.path.commonprefix(list(names)).rstrip("_-. ")  # noqa: RUF071 (names, not paths)
        label = f"{prefix or names[0]} (mean of {len(names)} seeds; band: min to max)"
    if left_out:
        label += f" [left out, no values: {', '.join(left_out)}]"
    return label


def _marker(xs: np.ndarray) -> str | None:
    """The marker of a line through ``xs``: a dot where it has one point (a line of one point and
    no marker draws nothing), none otherwise."""
    return "o" if len(xs) == 1 else None


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
            # A run without a value of y (no finished episode yet) is no seed of the mean.
            with_values = [i for i in group if len(runs[i][1])]
            if not with_values:
                raise UsageError(f"{', '.join(run_dirs[i] for i in group)}: no row has a value of {y!r} "
                                 "(no finished episode yet?); train longer, or plot another --y.")
            label = _label([names[i] for i in with_values], [names[i] for i in group if i not in with_values])
            if len(with_values) == 1:
                _, xs, ys = runs[with_values[0]]
                ax.plot(xs, ys, color=color, label=label, linewidth=1.8, marker=_marker(xs))
                continue
            series = [(runs[i][1], runs[i][2]) for i in with_values]
            lo = max(xs[0] for xs, _ in series)
            hi = min(xs[-1] for xs, _ in series)
            grid = np.unique(np.concatenate([xs[(xs >= lo) & (xs <= hi)] for xs, _ in series]))
            if not len(grid):  # one seed's data ends before another's begins: no mean to draw
                ranges = ", ".join(f"{run_dirs[i]} from {runs[i][1][0]:g} to {runs[i][1][-1]:g}"
                                   for i in with_values)
                raise UsageError(f"runs that differ only by seed have no {x!r} range in common ({ranges}), "
                                 f"so their mean over seeds cannot be drawn; plot them with separate cairn "
                                 f"plot calls, or train the shorter runs on until the ranges overlap.")
            curves = np.stack([np.interp(grid, xs, ys) for xs, ys in series])
            if len(grid) == 1:  # fill_between draws no area over one x value
                ax.vlines(grid, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.4, linewidth=6)
            else:
                ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.2,
                                linewidth=0)
            ax.plot(grid, curves.mean(axis=0), color=color, label=label, linewidth=1.8, marker=_marker(grid))
        envs = sorted({env_label(config["env"], config.get("env_config"))
                       for config, _, _ in runs if config.get("env")})
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


def league_figure(run_dirs: Sequence[str], *, x: str = "timesteps", size: tuple[int, int] = (960, 540),
                  title: str | None = None) -> Any:
    """A matplotlib figure of the runs' leagues against ``x``: one panel per entry of
    :data:`LEAGUE_PANELS` (the ratings, then main's win rates), a line per progress.csv column of
    the panel's prefix (labelled by participant; by run and participant for several runs), drawn
    where the column has values (a snapshot's, while it is in the pool). The caller closes it
    (``matplotlib.pyplot.close``). A run without a ``league/rating/`` column is a usage error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = [_read_table(d, x) for d in run_dirs]
    ratings = LEAGUE_PANELS[0][0]
    for run_dir, (_, columns, _) in zip(run_dirs, tables):
        if not any(c.startswith(ratings) for c in columns):
            raise UsageError(f"{run_dir}/progress.csv has no {ratings}* column: it is not a league run. "
                             "Train with cairn train --league (docs/league.md), or plot a column with --y.")
    names = [os.path.basename(os.path.normpath(d)) or d for d in run_dirs]
    dpi = 100
    fig, axes = plt.subplots(len(LEAGUE_PANELS), 1, sharex=True, figsize=(size[0] / dpi, size[1] / dpi),
                             dpi=dpi)
    colors: dict[str, str] = {}  # one colour per participant in both panels
    for ax, (prefix, label) in zip(axes, LEAGUE_PANELS):
        for name, (_, columns, rows) in zip(names, tables):
            for column in (c for c in columns if c.startswith(prefix)):
                participant = column[len(prefix):]
                line_label = participant if len(names) == 1 else f"{name}: {participant}"
                # Markers: a snapshot that played one iteration's games is a single point.
                color = colors.setdefault(line_label, f"C{len(colors) % 10}")
                ax.plot(*_series(rows, x, column), label=line_label, color=color, linewidth=1.5, marker="o",
                        markersize=3)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if ax.get_lines():
            ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
    axes[-1].set_ylim(-0.03, 1.03)  # a mean score
    axes[-1].set_xlabel(_X_LABELS[x])
    axes[-1].ticklabel_format(axis="x", style="plain")
    axes[0].set_title(title or f"league of {', '.join(names)}: ratings and main's win rates")
    fig.tight_layout()
    return fig


def plot_league(run_dirs: Sequence[str], out: str, *, x: str = "timesteps",
                size: tuple[int, int] = (960, 540), title: str | None = None) -> None:
    """Draw :func:`league_figure` of the runs into the image ``out`` of ``size`` pixels."""
    fig = league_figure(run_dirs, x=x, size=size, title=title)  # selects the Agg backend first
    import matplotlib.pyplot as plt

    try:
        fig.savefig(out, dpi=fig.dpi)
    finally:
        plt.close(fig)


def _check_out(out: str) -> None:
    """Refuse an ``--out`` that matplotlib cannot write (an unknown or missing extension, which
    it would replace by .png: the image would not be where the command says) or whose folder is
    missing, before any run is read."""
    from matplotlib.figure import Figure

    suffix = os.path.splitext(out)[1].lower()
    formats = Figure().canvas.get_supported_filetypes()
    if suffix[1:] not in formats:
        raise UsageError(f"--out {out}: matplotlib writes no '{suffix}' image; name a .png, .svg or .pdf "
                         f"file (it writes {', '.join('.' + f for f in sorted(formats))}).")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UsageError(f"--out {out}: the folder {parent} does not exist; create it first.")


def _check_distinct(run_dirs: Sequence[str]) -> None:
    """Refuse a run given twice (``runs/a runs/a/``): grouped with itself by its config, it was
    drawn as the mean of two seeds, one run's curve presented as an experiment over seeds."""
    seen: dict[str, int] = {}
    for index, run_dir in enumerate(run_dirs):
        first = seen.setdefault(os.path.realpath(run_dir), index)
        if first != index:
            raise UsageError(f"{run_dir} is the run {run_dirs[first]} again; give each run once (runs that "
                             "differ only by seed are drawn as their mean).")


def run(args: argparse.Namespace) -> int:
    """Run ``cairn plot``."""
    size = _parse_size(args.size)
    if args.league and args.y is not None:
        raise UsageError(f"--league draws the league's columns; it takes no --y (got --y {args.y}).")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("cairn plot needs matplotlib: pip install 'cairn-rl[cli]'.") from None
    _check_out(args.out)
    _check_distinct(args.runs)
    if args.league:
        plot_league(args.runs, args.out, x=args.x, size=size, title=args.title)
    else:
        plot_runs(args.runs, args.out, x=args.x, y=args.y or _DEFAULT_Y, size=size, title=args.title)
    print(f"plotted {len(args.runs)} run{'s' if len(args.runs) > 1 else ''} to {args.out}")
    return 0
