"""The interfaces of cairn/core.py hold for the classes that implement them, as mypy sees them.

``isinstance`` against a ``runtime_checkable`` protocol looks only at names, so a signature that
drifted from its interface (``Algorithm.save``'s ``blocking`` without a default where
``Checkpointable.save`` promises one) passes it; only a type checker sees it. Issue 38: the CLI
typed ``algo: Any`` and the manager took it without a look, which is how that drift went unseen.
"""

from __future__ import annotations

import re

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


#: Calls of the helpers that took ``Any`` until issue 38 item 4 typed them: each line marked
#: ``# wrong`` hands one the wrong thing (the Policy where its network belongs, another
#: algorithm's config), which mypy accepted while the parameter was ``Any``; the unmarked
#: lines are the right calls, which it must keep accepting.
WRONG_ARGUMENTS = '''
import numpy as np
from cairn.algorithms.dqn.config import DQNConfig
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.dqn.learn import dqn_targets
from cairn.algorithms.ppo.learn import next_values
from cairn.algorithms.sac.config import SACConfig
from cairn.env_runner.sample_batch import SampleBatch
from cairn.policy.acting import action_inputs
from cairn.policy.policy import Policy


def calls(policy: Policy, dqn: DQNPolicy, batch: SampleBatch, values: np.ndarray, rows: np.ndarray,
          dqn_config: DQNConfig, sac_config: SACConfig) -> None:
    action_inputs(policy.model, rows)
    next_values(policy.model, batch, values)
    dqn_targets(dqn_config, dqn, batch)
    action_inputs(policy, rows)  # wrong
    next_values(policy, batch, values)  # wrong
    dqn_targets(sac_config, dqn, batch)  # wrong
'''


@pytest.mark.slow
def test_the_typed_helpers_refuse_the_wrong_argument(tmp_path):
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "wrong_arguments.py"
    snippet.write_text(WRONG_ARGUMENTS)
    out, err, status = api.run([str(snippet), "--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(ROOT / ".mypy_cache")])
    wrong = {n for n, line in enumerate(WRONG_ARGUMENTS.splitlines(), start=1) if line.endswith("# wrong")}
    flagged = {int(n) for n in re.findall(r"wrong_arguments\.py:(\d+): error: .*\[arg-type\]", out)}
    assert status == 1 and len(wrong) == 3, out + err
    assert flagged == wrong, out + err
    assert out.count(": error:") == len(wrong), out + err
