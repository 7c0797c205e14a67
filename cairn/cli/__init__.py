"""The ``cairn`` command line (``cairn --help``; docs/cli.md):

    cairn train --algo PPO --env CartPole-v1 --stop-timesteps 50000 --out runs/cartpole
    cairn train --resume runs/cartpole --stop-timesteps 100000
    cairn evaluate runs/cartpole/checkpoints/checkpoint_000025 --episodes 20 --render cartpole.gif
    cairn plot runs/cartpole runs/cartpole_s1 --out curve.png
    cairn export runs/cartpole/checkpoints/checkpoint_000025 --format onnx --out model_dir
    cairn checkpoint info|verify|upgrade|diff|ls ...

One module per command; :mod:`cairn.cli.app` holds the parser and the exit statuses.
"""

from cairn.cli.app import main
from cairn.cli.common import EXIT_INTERRUPTED

__all__ = ["main", "EXIT_INTERRUPTED"]
