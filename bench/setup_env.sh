#!/usr/bin/env bash
# Create (or complete) the benchmark virtualenv .bench-venv: cairn (editable), torch 2.13.0 CPU,
# Stable-Baselines3 and RLlib 2.60.0. Idempotent: installs only what is missing, so it is safe
# to run again or alongside another session that uses the same venv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BENCH_VENV:-.bench-venv}
PY="$VENV/bin/python"
PIP=("$VENV/bin/pip" install -q -c constraints.txt)

[ -x "$PY" ] || python3 -m venv "$VENV"

have() { "$PY" -c "import $1" >/dev/null 2>&1; }

# torch first (the CPU wheel pinned in constraints.txt), so later installs reuse it.
have torch || "${PIP[@]}" torch==2.13.0
have cairn || "${PIP[@]}" -e .
have mujoco || "${PIP[@]}" "gymnasium[mujoco]"   # bench/sac_mujoco.py
have ale_py || "${PIP[@]}" ale-py opencv-python-headless   # bench/cnn_throughput.py
have stable_baselines3 || "${PIP[@]}" stable-baselines3
have sb3_contrib || "${PIP[@]}" sb3-contrib   # bench/masked_ppo.py (MaskablePPO)
have pygame || "${PIP[@]}" pygame   # bench/connect_four_selfplay.py (PettingZoo classic imports it)
# RLlib 2.60 pins gymnasium==1.2.2, which constraints.txt (gymnasium 1.4.0, for cairn's own
# tests) refuses: install it against every other pin, so gymnasium becomes 1.2.2 here.
have ray.rllib || "$VENV/bin/pip" install -q -c <(grep -v '^gymnasium==' constraints.txt) "ray[rllib]==2.60.0"

"$PY" - <<'PY'
import importlib.metadata as md
for name in ("torch", "gymnasium", "cairn-rl", "stable-baselines3", "sb3-contrib", "ray", "numpy"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: missing")
PY
