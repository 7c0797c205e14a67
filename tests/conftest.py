"""Shared fixtures: small, fast configs and checkpoints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``tests.helpers`` must import in this and in child processes
    sys.path.insert(0, str(ROOT))

from tests.helpers import small_ma_ppo, small_ppo  # noqa: E402


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile cairn and tests once, for the hundreds of fresh Python processes the suite
    starts (subprocess tests, the docs' blocks, Ray and DDP workers, the env workers' forkserver).

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's machines), no process writes
    ``__pycache__``, so each of them compiled cairn's modules from source again (about 0.5 s of
    CPU in a process that imports most of cairn). Python still checks each ``.pyc`` against its
    source's mtime and size before using it and compiles a changed file anew, so what runs is the
    same code."""
    if sys.dont_write_bytecode:
        import compileall

        for tree in ("cairn", "tests"):
            compileall.compile_dir(ROOT / tree, quiet=2)


@pytest.fixture
def ppo_algo():
    algo = small_ppo().build()
    yield algo
    algo.stop()


@pytest.fixture
def ma_algo():
    algo = small_ma_ppo(3).build()
    yield algo
    algo.stop()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for every Ray test of the session (tests/ray, tests/learners):
    ``ray.init(num_cpus=2)``."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def s3_server():
    """One moto S3 server on 127.0.0.1 for the whole session (see tests/s3_server.py)."""
    from tests.s3_server import S3Server

    server = S3Server.start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server):
    """A fresh, empty bucket on the session's S3 server, s3fs caches cleared (tests/s3_server.py)."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    s3_server.reset_requests()
    return s3_server.new_bucket()


@pytest.fixture(autouse=True)
def _default_sigint_handler():
    """Each test starts with Python's own SIGINT handler: Ray and Tune install theirs in the
    process and may leave them, which changes what Ctrl-C does in later tests (cairn train
    installs its handler only over Python's default one)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
