"""Experience collection: env runners, sample batches and the environment state protocol."""

from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.sample_batch import SampleBatch

__all__ = ["EnvRunner", "SampleBatch"]
