"""A small trained run shared by the command line's tests (CartPole PPO, 3 iterations)."""

from __future__ import annotations

import pytest

from cairn.cli import main

#: Tiny PPO batches: each iteration takes a few milliseconds after the first.
SMALL = ["--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1"]
TRAIN = ["train", "--algo", "PPO", "--env", "CartPole-v1", *SMALL]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A run directory: 3 iterations, seed 0, a checkpoint at every iteration, all kept."""
    run = tmp_path_factory.mktemp("cli") / "run"
    assert main([*TRAIN, "--seed", "0", "--stop-iters", "3", "--checkpoint-every", "1", "--keep", "0",
                 "--out", str(run), "-q"]) == 0
    return run
