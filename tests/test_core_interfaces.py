"""The interfaces of cairn/core.py hold for the classes that implement them, as mypy sees them.

``isinstance`` against a ``runtime_checkable`` protocol looks only at names, so a signature that
drifted from its interface (``Algorithm.save``'s ``blocking`` without a default where
``Checkpointable.save`` promises one) passes it; only a type checker sees it. Issue 38: the CLI
typed ``algo: Any`` and the manager took it without a look, which is how that drift went unseen.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

CONFORMANCE = '''
from cairn.algorithms.algorithm import Algorithm
from cairn.core import AlgorithmLike, Checkpointable, EnvRunnerLike, PolicyLike
from cairn.env_runner.env_runner import EnvRunner
from cairn.policy.policy import Policy


def conforms(algo: Algorithm, policy: Policy, runner: EnvRunner) -> None:
    as_algorithm: AlgorithmLike = algo
    as_checkpointable: Checkpointable = algo
    as_policy: PolicyLike = policy
    as_runner: EnvRunnerLike = runner
'''


@pytest.mark.slow
def test_the_implementations_satisfy_the_core_interfaces(tmp_path):
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "conformance.py"
    snippet.write_text(CONFORMANCE)
    out, err, status = api.run([str(snippet), "--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(ROOT / ".mypy_cache")])
    assert status == 0, out + err
