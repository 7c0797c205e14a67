#!/usr/bin/env bash
# Runs every learning test (a slow test whose assertion is a learning result) on seeds 0-4, one
# pytest run per seed (CAIRN_LEARNING_SEED, read by tests.helpers.learning_seed), so that a new
# CPU kind can be checked before a test tuned to one seed turns red on it. Prints one line per
# test and seed; exits 1 if any failed. Usage: bash scripts/learning_seeds.sh [SEED ...]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TESTS=(
  tests/test_learning.py
  tests/recurrent/test_learning.py
  tests/algorithms/dqn/test_dqn_learning.py
  tests/algorithms/sac/test_sac_learning.py
  tests/algorithms/td3/test_td3_learning.py
  tests/algorithms/impala/test_impala_learning.py
  tests/algorithms/test_cnn_learning.py::test_ppo_cnn_learns_pixel_cue
  tests/models/test_action_masking.py::test_masked_ppo_learns_to_pick_the_paying_action
)
SEEDS=("$@")
[ ${#SEEDS[@]} -eq 0 ] && SEEDS=(0 1 2 3 4)
status=0
for seed in "${SEEDS[@]}"; do
  out=$(CAIRN_LEARNING_SEED=$seed "$PY" -m pytest -q -p no:cacheprovider -rA "${TESTS[@]}" 2>&1) || status=1
  grep -E "^(PASSED|FAILED|ERROR) " <<<"$out" | sed "s/^/seed $seed: /"
done
exit $status
