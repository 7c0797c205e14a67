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
