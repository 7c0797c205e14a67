"""IMPALA and APPO checkpoints: bit-exact resume in a fresh process (num_env_runners=0),
``Algorithm.from_checkpoint`` with no config, a subset restore of a multi-agent run, and an
export of the policy that runs without the algorithm."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import cairn
from cairn.export import model_inputs
from tests.algorithms.impala.small import small, small_ma
from tests.helpers import assert_trains_identically, assert_trees_equal, weights_digest

ROOT = Path(__file__).resolve().parents[3]
K = 2
#: Result keys that are wall-clock measurements, not training outcomes.
TIMINGS = {"time_this_iter_s", "env_steps_per_s"}

CHILD = """
import json, sys
import cairn
from tests.helpers import weights_digest
algo = cairn.Algorithm.from_checkpoint(sys.argv[1])
results = [{k: v for k, v in algo.train().items() if k not in ("time_this_iter_s", "env_steps_per_s")}
           for _ in range(int(sys.argv[3]))]
algo.save(sys.argv[2])
print(json.dumps({"results": results, "digest": weights_digest(algo)}))
algo.stop()
"""


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.slow
@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_resume_in_a_fresh_process_is_bit_exact(tmp_path, algo_name):
    training = {"use_kl_loss": True, "target_network_update_freq": 2} if algo_name == "APPO" else {}
    algo = small(algo_name, **training).env_runners(observation_filter="MeanStdFilter").build()
    try:
        for _ in range(3):
            algo.train()
        if algo_name == "APPO":  # saved between two target updates, with an adapted KL weight
            assert algo.get_policy().num_train_batches % 2 == 1
        path = algo.save(tmp_path / "c")
        here = [{k: v for k, v in algo.train().items() if k not in TIMINGS} for _ in range(K)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "child"), str(K)],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        child = json.loads(out.stdout.strip().splitlines()[-1])
        assert child["digest"] == weights_digest(algo)
        assert _same(json.loads(json.dumps(here)), child["results"])
        assert here[-1]["learners"]["default_policy"]["num_grad_updates"] > 0
        resumed = cairn.Algorithm.from_checkpoint(tmp_path / "child")
        assert_trees_equal(algo.get_state(), resumed.get_state())
        resumed.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_from_checkpoint_without_config_trains_identically(tmp_path, algo_name):
    algo = small(algo_name).build()
    try:
        algo.train()
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert type(restored) is type(algo) and restored.weights_version == 1
        assert type(restored.config) is type(algo.config)
        state = algo.get_state()
        if algo_name == "APPO":
            target = state["policies"]["default_policy"]["target"]
            assert set(target) == {"weights", "kl_coeff", "num_train_batches"}
            assert set(target["weights"]) == set(state["policies"]["default_policy"]["weights"])
        assert_trees_equal(state, restored.get_state())
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()


def _all_to_p1(agent_id: str, **kwargs: object) -> str:
    return "p1"


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_subset_restore_reads_one_policy_of_a_multi_agent_run(tmp_path, algo_name):
    algo = small_ma(algo_name).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        subset = cairn.Algorithm.from_checkpoint(path, policy_ids=["p1"], policy_mapping_fn=_all_to_p1)
        try:
            assert set(subset.policies) == {"p1"} and type(subset) is type(algo)
            assert_trees_equal(algo.get_policy("p1").get_state(), subset.get_policy("p1").get_state())
            assert subset.train()["learners"]["p1"]["num_grad_updates"] > \
                algo.get_policy("p1").num_grad_updates  # both agents now feed p1
        finally:
            subset.stop()
    finally:
        algo.stop()


OBSERVATIONS = [np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32),
                np.array([-0.1, 0.2, -0.05, 0.3], dtype=np.float32)]


@pytest.mark.slow
@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_exported_policy_acts_as_the_policy(tmp_path, algo_name):
    algo = small(algo_name).checkpointing(export_native_model_files=True).build()
    try:
        algo.train()
        policy = algo.get_policy()
        greedy = policy.compute_actions(OBSERVATIONS, explore=False)
        path = algo.save(tmp_path / "c")  # model/ written and checked against the policy
        assert (Path(path) / "policies" / "default_policy" / "model" / "model.pt2").is_file()
        algo.export_policy_model(tmp_path / "m")
        module = torch.export.load(str(tmp_path / "m" / "model.pt2")).module()
        with torch.inference_mode():
            action = module(torch.from_numpy(model_inputs(policy.observation_space, OBSERVATIONS)))[0]
        np.testing.assert_array_equal(action.numpy(), greedy)
        algo.export_policy_checkpoint(tmp_path / "p")
        alone = cairn.Policy.from_checkpoint(tmp_path / "p")
        assert type(alone) is type(policy)
        np.testing.assert_array_equal(alone.compute_actions(OBSERVATIONS, explore=False), greedy)
    finally:
        algo.stop()
