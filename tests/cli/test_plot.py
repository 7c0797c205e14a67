"""cairn plot: learning curves, seeds grouped into a mean line with a min-max band."""

from __future__ import annotations

import json

import pytest

from cairn.cli import main
from cairn.cli.plot import group_by_seed
from tests.cli.conftest import TRAIN


def test_plot_writes_a_png_of_the_asked_size(tmp_path, trained_run, capsys):
    from PIL import Image

    runs = []
    for name, extra in (("s1", ["--seed", "1"]), ("s2", ["--seed", "2"]), ("lr", ["--seed", "1", "lr=0.01"])):
        run = tmp_path / name
        argv = [*TRAIN, "--stop-iters", "3", "--out", str(run), "-q", *extra]
        if extra[2:]:  # a KEY=VALUE setting goes after --config's others
            argv = [*TRAIN, *extra[2:], "--seed", "1", "--stop-iters", "3", "--out", str(run), "-q"]
        assert main(argv) == 0
        runs.append(str(run))
    configs = [json.loads((tmp_path / n / "config.json").read_text()) for n in ("s1", "s2", "lr")]
    assert group_by_seed(
        [json.loads((trained_run / "config.json").read_text()), *configs]) == [[0, 1, 2], [3]]
    out = tmp_path / "curve.png"
    capsys.readouterr()
    assert main(["plot", str(trained_run), *runs, "--out", str(out), "--size", "640x400"]) == 0
    assert capsys.readouterr().out.strip() == f"plotted 4 runs to {out}"
    with Image.open(out) as image:
        assert image.size == (640, 400) and image.format == "PNG"
    assert main(["plot", *runs, "--out", str(tmp_path / "t.png"), "--x", "time", "--y", "policy_loss"]) == 0
    with Image.open(tmp_path / "t.png") as image:
        assert image.size == (960, 540)


@pytest.mark.parametrize("argv, message", [
    (["--y", "nope"], "has no column 'nope'"),
    (["--size", "big"], "expected WIDTHxHEIGHT"),
])
def test_plot_usage_errors(trained_run, tmp_path, capsys, argv, message):
    assert main(["plot", str(trained_run), "--out", str(tmp_path / "c.png"), *argv]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1


@pytest.mark.parametrize("out, message", [
    ("c.xyz", "--out {out}: matplotlib writes no '.xyz' image; name a .png, .svg or .pdf file"),
    ("c", "--out {out}: matplotlib writes no '' image; name a .png, .svg or .pdf file"),
    ("missing/c.png", "--out {out}: the folder {parent} does not exist; create it first"),
])
def test_plot_refuses_an_out_it_cannot_write_before_drawing(trained_run, tmp_path, capsys, out, message):
    """An --out of an unknown format or in a missing folder failed only after every run was read and
    drawn, with exit status 1 and Python's error ("FileNotFoundError: ..."); it is a bad argument."""
    path = tmp_path / out
    assert main(["plot", str(trained_run), "--out", str(path)]) == 2
    error = capsys.readouterr().err
    assert message.format(out=path, parent=path.parent) in error and len(error.strip().splitlines()) == 1
    assert not path.parent.exists() or list(path.parent.iterdir()) == []


@pytest.fixture(scope="module")
def league_run(tmp_path_factory):
    """A connect-four league run of cairn train: a snapshot each iteration, at most two in the
    pool (main_v1 leaves at iteration 3: its columns have empty cells after), random_legal fixed."""
    from cairn.config.league_settings import league_settings

    settings = json.dumps(league_settings(snapshot_every_iterations=1, max_snapshots=2,
                                          self_play_fraction=0.0, opponents={"random_legal": "random_legal"}))
    run = tmp_path_factory.mktemp("plot") / "league"
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3", "--config",
                 "train_batch_size=64", "minibatch_size=32", "num_epochs=1", 'model={"hidden": [8]}',
                 f"league_config={settings}", "--seed", "0", "--stop-iters", "4", "--out", str(run),
                 "-q"]) == 0
    return run


def test_plot_league_draws_every_rating_and_win_rate_column(league_run, tmp_path, capsys):
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from cairn.cli.plot import LEAGUE_PANELS, league_figure
    from cairn.cli.runlog import read_progress

    out = tmp_path / "league.png"
    assert main(["plot", str(league_run), "--league", "--out", str(out), "--size", "800x600"]) == 0
    assert capsys.readouterr().out.strip() == f"plotted 1 run to {out}"
    with Image.open(out) as image:
        assert image.size == (800, 600) and image.format == "PNG"

    columns, rows = read_progress(league_run / "progress.csv")
    fig = league_figure([str(league_run)])
    try:
        assert [ax.get_ylabel() for ax in fig.axes] == [label for _, label in LEAGUE_PANELS]
        for ax, (prefix, _) in zip(fig.axes, LEAGUE_PANELS):
            expected = [c for c in columns if c.startswith(prefix)]
            assert [line.get_label() for line in ax.get_lines()] == [c[len(prefix):] for c in expected]
            # Each line is its column, without the empty cells.
            for line, column in zip(ax.get_lines(), expected):
                drawn = [(row["timesteps"], row[column]) for row in rows if not np.isnan(row[column])]
                assert list(zip(line.get_xdata(), line.get_ydata())) == drawn
        ratings, win_rates = ({c[len(p):] for c in columns if c.startswith(p)} for p, _ in LEAGUE_PANELS)
        assert {"main", "random_legal", "main_v1", "main_v4"} <= ratings and "random_legal" in win_rates
        assert sum(np.isnan(row["league/rating/main_v1"]) for row in rows) == 2  # left the pool
    finally:
        plt.close(fig)


@pytest.mark.parametrize("argv, message", [
    (["--league", "--y", "policy_loss"], "takes no --y"),
    (["--league"], "no league/rating/* column: it is not a league run"),
])
def test_plot_league_usage_errors(trained_run, tmp_path, capsys, argv, message):
    assert main(["plot", str(trained_run), "--out", str(tmp_path / "c.png"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_pettingzoo_run_is_named_by_its_env_module_in_the_plot_title(tmp_path, monkeypatch):
    """--env pettingzoo.classic.rps_v2 is stored in config.json as a creator reference (a dict):
    cairn plot's default title names the env as the user gave it (it showed the raw dict)."""
    from matplotlib.axes import Axes

    titles = []
    set_title = Axes.set_title
    monkeypatch.setattr(Axes, "set_title", lambda ax, label, *a, **k: (titles.append(label),
                                                                      set_title(ax, label, *a, **k))[1])
    run = tmp_path / "rps"
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.rps_v2", "--config",
                 "train_batch_size=32", "minibatch_size=16", "num_epochs=1", 'model={"hidden": [8]}',
                 "--seed", "0", "--stop-iters", "1", "--out", str(run), "-q"]) == 0
    assert isinstance(json.loads((run / "config.json").read_text())["env"], dict)
    out = tmp_path / "c.png"
    assert main(["plot", str(run), "--out", str(out)]) == 0 and out.is_file()
    assert titles == ["episode_return_mean on pettingzoo.classic.rps_v2"]


def test_env_label_names_each_form_of_env():
    from cairn.cli.env_names import env_label
    from cairn.envs.pettingzoo_env import make_pettingzoo_env

    assert env_label("CartPole-v1") == "CartPole-v1"
    rps = "pettingzoo.classic.rps_v2"
    assert env_label(make_pettingzoo_env, {"env_module": rps}) == rps
    # env_module names the env only for the PettingZoo creator; another creator is named itself.
    stored = {"__callable__": "pkg.envs:make", "name": "make"}
    assert env_label(stored, {"env_module": rps}) == "pkg.envs:make"
    assert env_label({"__callable__": None, "name": "<lambda>"}) == "<lambda>"
    assert env_label(lambda cfg: None).endswith("<lambda>")


def _write_run(path, seed, returns, *, first=100, lr=0.001):
    """A run directory as cairn train writes it: config.json and progress.csv (empty cells where an
    iteration finished no episode), a row every 100 timesteps from ``first``."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"env": "CartPole-v1", "lr": lr, "seed": seed}))
    rows = "".join(f"{first + 100 * i},{'' if r is None else r}\n" for i, r in enumerate(returns))
    (path / "progress.csv").write_text("timesteps,episode_return_mean\n" + rows)
    return str(path)


def test_plot_counts_only_seeds_with_values_and_refuses_a_group_without_any(tmp_path, monkeypatch, capsys):
    """A seed whose run finished no episode was counted in "mean of N seeds" although the mean
    left it out; a group where no run had a value crashed on max() of an empty list."""
    from matplotlib.axes import Axes

    labels = []
    plot = Axes.plot
    monkeypatch.setattr(Axes, "plot",
                        lambda ax, *a, **k: (labels.append(k.get("label")), plot(ax, *a, **k))[1])
    runs = [_write_run(tmp_path / f"s{seed}", seed, returns)
            for seed, returns in ((1, [10, 20, 30]), (2, [12, 22, 32]), (3, [None, None, None]))]
    out = tmp_path / "c.png"
    assert main(["plot", *runs, "--out", str(out)]) == 0 and out.is_file()
    assert labels == ["s (mean of 2 seeds; band: min to max) [left out, no values: s3]"]
    # One seed with values of two: its own line, the other named as left out.
    labels.clear()
    assert main(["plot", runs[0], runs[2], "--out", str(out)]) == 0
    assert labels == ["s1 [left out, no values: s3]"]
    capsys.readouterr()
    empty = _write_run(tmp_path / "e4", 4, [None, None])
    for argv in ([runs[2], empty], [empty]):
        assert main(["plot", *argv, "--out", str(tmp_path / "e.png")]) == 2
        error = capsys.readouterr().err
        assert f"{', '.join(argv)}: no row has a value of 'episode_return_mean'" in error
        assert len(error.strip().splitlines()) == 1 and not (tmp_path / "e.png").exists()


def test_plot_refuses_seeds_with_no_x_range_in_common(tmp_path, capsys):
    """A group whose runs have no x value range in common was silently left out of the plot."""
    early = _write_run(tmp_path / "s1", 1, [10, 20, 30])  # timesteps 100 to 300
    late = _write_run(tmp_path / "s2", 2, [12, 22], first=400)
    other = _write_run(tmp_path / "o3", 3, [1, 2, 3], lr=0.01)  # a group of its own, plottable
    out = tmp_path / "c.png"
    assert main(["plot", early, late, other, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "no 'timesteps' range in common" in error
    assert f"{early} from 100 to 300, {late} from 400 to 500" in error
    assert len(error.strip().splitlines()) == 1 and not out.exists()


def test_plot_draws_a_curve_of_one_point_as_a_dot(tmp_path, monkeypatch):
    """A line of one point and no marker draws nothing: a run with one row, or seeds whose x
    ranges share one value, were in the legend but not in the image."""
    from matplotlib.axes import Axes

    drawn = []
    plot = Axes.plot

    def recording(ax, *args, **kwargs):
        lines = plot(ax, *args, **kwargs)
        drawn.extend((kwargs.get("label"), len(line.get_xdata()), line.get_marker()) for line in lines)
        return lines

    monkeypatch.setattr(Axes, "plot", recording)
    alone = _write_run(tmp_path / "a1", 1, [10], lr=0.1)  # one row
    early = _write_run(tmp_path / "s1", 1, [10, 20, 30])  # timesteps 100 to 300
    late = _write_run(tmp_path / "s2", 2, [12, 22], first=300)  # 300 to 400: one x in common
    longer = _write_run(tmp_path / "o3", 3, [1, 2, 3], lr=0.01)
    assert main(["plot", alone, early, late, longer, "--out", str(tmp_path / "c.png")]) == 0
    assert [(label, n) for label, n, _ in drawn] == [
        ("a1", 1), ("s (mean of 2 seeds; band: min to max)", 1), ("o3", 3)]
    assert all(marker not in (None, "None", "", " ") for _, n, marker in drawn if n == 1)
    assert drawn[-1][2] in (None, "None", "", " ")  # lines of several points as before


def test_plot_refuses_a_run_given_twice(trained_run, tmp_path, capsys):
    """The same run twice (`cairn plot runs/a runs/a/`) was drawn as "a (mean of 2 seeds; band:
    min to max)": one run's curve presented as an experiment over two seeds."""
    out = tmp_path / "c.png"
    assert main(["plot", str(trained_run), f"{trained_run}/", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error == (f"cairn: error: {trained_run}/ is the run {trained_run} again; give each run once "
                     "(runs that differ only by seed are drawn as their mean).\n")
    assert not out.exists()
