"""Cold start: a fresh process that restores a policy and computes one action, against a fresh
process that only imports torch (the floor any PyTorch library pays).

Target (issue 11): ``import cairn`` + ``Policy.from_checkpoint(policy_dir)`` + one
``compute_single_action`` costs at most ``import torch`` + 0.3 s. Both kinds of process run
interleaved, ``--reps`` times each, and the medians of their wall times are compared. Each
process also reports which heavy modules it loaded (``torch._dynamo``, ``torch.onnx``, onnx,
onnxruntime, ray): restoring to act must load none of them.

cairn's modules are byte-compiled first (``compileall``), as ``pip install`` leaves an installed
package: where ``PYTHONDONTWRITEBYTECODE=1`` is set (this VM's shell sets it) an editable
checkout would otherwise recompile every cairn module in every process, about 0.18 s more.

    .venv/bin/python bench/cold_start.py [--reps 7] [--out bench/results/cold_start.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import command_line, fmt, load_average, machine_lines, median, table

HEAVY = ("torch._dynamo", "torch.onnx", "onnx", "onnxruntime", "ray")

TORCH_ONLY = "import torch"
RESTORE = """
import sys, json, time
start = time.perf_counter()
import torch
t_torch = time.perf_counter()
import cairn
t_cairn = time.perf_counter()
policy = cairn.Policy.from_checkpoint(sys.argv[1])
t_restore = time.perf_counter()
policy.compute_single_action([0.0, 0.1, 0.0, -0.1], explore=False)
t_act = time.perf_counter()
print(json.dumps({"torch": t_torch - start, "cairn": t_cairn - t_torch, "restore": t_restore - t_cairn,
                  "act": t_act - t_restore, "heavy": [m for m in sys.argv[2:] if m in sys.modules]}))
"""


def _wall(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cold_start.md")
    args = parser.parse_args()

    import compileall

    import cairn

    compileall.compile_dir(Path(cairn.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        algo = cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0).build()
        algo.train()
        policy_dir = Path(algo.save(Path(tmp) / "ckpt")) / "policies" / "default_policy"
        algo.stop()
        torch_walls, restore_walls, parts = [], [], []
        for _ in range(args.reps):
            torch_walls.append(_wall([sys.executable, "-c", TORCH_ONLY])[0])
            wall, out = _wall([sys.executable, "-c", RESTORE, str(policy_dir), *HEAVY])
            restore_walls.append(wall)
            parts.append(json.loads(out))

    t_torch, t_restore = median(torch_walls), median(restore_walls)
    extra = t_restore - t_torch
    heavy = sorted({m for p in parts for m in p["heavy"]})
    rows = [
        ["`python -c 'import torch'` (process wall)", fmt(t_torch, 3)],
        ["`import torch; import cairn; Policy.from_checkpoint; compute_single_action` (process wall)",
         fmt(t_restore, 3)],
        ["difference (target <= 0.300)", fmt(extra, 3)],
        ["in-process: import torch", fmt(median(p["torch"] for p in parts), 3)],
        ["in-process: import cairn after torch", fmt(median(p["cairn"] for p in parts), 3)],
        ["in-process: Policy.from_checkpoint", fmt(median(p["restore"] for p in parts), 4)],
        ["in-process: first compute_single_action", fmt(median(p["act"] for p in parts), 4)],
    ]
    lines = [
        "# Cold start: fresh process, restore a policy, one action",
        "",
        f"Command: `{command_line()}` (load average {load_average()})",
        "",
        *machine_lines(),
        "",
        f"Medians of {args.reps} interleaved runs each, seconds:",
        "",
        *table(["what", "seconds"], rows),
        "",
        f"Heavy modules loaded by the restoring process: {', '.join(heavy) if heavy else 'none'}.",
        "",
        f"Target met: {'yes' if extra <= 0.3 and not heavy else 'no'}.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
