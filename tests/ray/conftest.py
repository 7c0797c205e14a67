"""One local Ray for every Ray test of the session: ``ray.init(num_cpus=2)``."""

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
