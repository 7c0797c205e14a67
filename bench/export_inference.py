"""Inference speed of exported models against the library call, side by side in one process.

For a CartPole-sized policy (Box(4) -> Discrete(2), 64x64 actor and critic, MeanStdFilter) it
measures the per-observation latency and the batch-1024 throughput of

* ``policy.compute_single_action`` / ``policy.compute_actions`` (the library call),
* the ONNX model in onnxruntime (``model.onnx``, opset 18; ``action`` and ``logits``), and the
  same exported with ``extra_outputs=["value"]``,
* the **bare MLP** as ONNX: the policy's own actor Linear/Tanh layers and action head exported
  alone (``obs -> logits``, no filter, no critic, no argmax), the anchor for the exported
  graph's single-observation latency (issue 11: within 1.2x),
* the native program loaded with ``torch.export.load`` (``model.pt2``).

Single-observation latency of the ONNX sessions is timed in a group of its own: many short
loops (``--latency-repeats`` of 100 calls each), the sessions taking turns in an order that
rotates from loop to loop, a few untimed calls before each loop. Keeping the torch paths out of
that group matters: a loop that follows a torch call pays for bringing onnxruntime back into
the caches, and when the order was fixed that cost fell on the exported policy every time (it
followed the library call) and never on the anchor (measured here: the policy/anchor ratio was
1.24x with the policy's loop right after the library call's and 1.10x with the anchor's there).
The ratio against the bare MLP is the median of the per-loop ratios (loops of one
round run close together, so load from other jobs mostly cancels); its quartiles and a second
session of the anchor (the noise floor: anchor against itself) are reported with it. Every
ONNX session uses the same options: ``intra_op_num_threads=--threads`` and onnxruntime's default
``graph_optimization_level`` (``ORT_ENABLE_ALL``). The library call and the torch program are
timed in a second group, and batch throughput in a third (``--repeats`` loops each). numpy's
OpenBLAS gets ``--threads`` too (the script runs itself again with ``OPENBLAS_NUM_THREADS``).

    .venv/bin/python bench/export_inference.py [--threads 1] [--repeats 15]
        [--out bench/results/export_inference.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import cairn
from cairn.export import export_model

ANCHOR = "bare MLP ONNX (anchor: actor layers alone, obs -> logits)"
ANCHOR_AGAIN = "bare MLP ONNX, a second session (noise floor)"
POLICY = "ONNX in onnxruntime"


def _loop_seconds(fn: Callable[[], object], inner: int, *, warm: int) -> float:
    # Untimed calls first: the call before this loop was another path, and bringing this
    # one's code and data back into the caches would be charged to whichever path follows.
    for _ in range(warm):
        fn()
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def _interleaved_times(
    cases: dict[str, Callable[[], object]], *, inner: int, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds per call of each case in every repeat; the cases take turns within every
    repeat, so that load from other jobs on this shared machine falls on all of them alike,
    and the order rotates from repeat to repeat, so that no case always follows the same one."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(_loop_seconds(cases[name], inner, warm=max(1, inner // 5)))
    return times


def _times_after(cases: dict[str, Callable[[], object]], between: Callable[[], object], *, calls: int,
                 repeats: int) -> dict[str, list[float]]:
    """Median seconds of one call of each case made right after ``between`` (an env step), per
    repeat: the latency a serving loop sees, with the caches partly cold. Order rotates."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            fn, seconds = cases[name], []
            for _ in range(calls):
                between()
                start = time.perf_counter()
                fn()
                seconds.append(time.perf_counter() - start)
            times[name].append(statistics.median(seconds))
    return times


def _paired_ratios(times: dict[str, list[float]], case: str, anchor: str) -> list[float]:
    """``case / anchor`` per repeat (the two timed in the same round of turns)."""
    return [a / b for a, b in zip(times[case], times[anchor], strict=True)]


def _paired_microseconds(times: dict[str, list[float]], case: str, base: str) -> float:
    """Median over repeats of ``case - base`` in µs per call (the two timed in the same round)."""
    return statistics.median(a - b for a, b in zip(times[case], times[base], strict=True)) * 1e6


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    low, median, high = statistics.quantiles(values, n=4)
    return low, median, high


def _limit_blas_threads(threads: int) -> None:
    """Run this script again with numpy's OpenBLAS limited to ``threads``, unless it already is.

    OpenBLAS reads its thread count once, when numpy is imported. The library call's batch
    path multiplies in numpy, and with OpenBLAS's default (a thread per core) a batch-1024
    forward took 8-18 ms instead of 0.23 ms on the loaded 2-core VM: torch and onnxruntime get
    ``--threads``, so numpy does too.
    """
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        os.execv(sys.executable, [sys.executable, *sys.argv])


def _bare_mlp_onnx(policy: cairn.Policy, path: Path) -> None:
    """The policy's actor layers and action head, alone, as ONNX (opset 18, dynamic batch)."""
    model = policy.model
    bare = nn.Sequential(*model.actor, model.action_head).eval()
    example = torch.zeros((2, policy.preprocessor.size), dtype=torch.float32)
    program = torch.export.export(bare, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.onnx.export(program, (example,), str(path), dynamo=True, opset_version=18,
                      input_names=["obs"], output_names=["logits"], verbose=False)


def _gemm_shapes(path: Path) -> list[tuple[int, ...]]:
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    weights = {init.name: numpy_helper.to_array(init).shape for init in proto.graph.initializer}
    return [weights[node.input[1]] for node in proto.graph.node if node.op_type == "Gemm"]


def _session(onnxruntime: Any, path: Path, threads: int, optimized: Path | None = None) -> Any:
    """One session with the options every ONNX path here gets (the same for the anchor)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    if optimized is not None:  # only for reading back the graph onnxruntime runs, not timed
        options.optimized_model_filepath = str(optimized)
        options.log_severity_level = 3  # its warning that the file is machine-specific
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _ops(path: Path) -> str:
    import onnx

    return " ".join(node.op_type for node in onnx.load(str(path)).graph.node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads")
    parser.add_argument("--repeats", type=int, default=15,
                        help="timed loops per path (library, torch, batch)")
    parser.add_argument("--latency-repeats", type=int, default=101,
                        help="timed loops of 100 single-observation calls per ONNX session")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "export_inference.md")
    args = parser.parse_args()
    _limit_blas_threads(args.threads)
    torch.set_num_threads(args.threads)
    import onnxruntime

    load_before = os.getloadavg()
    env = gym.make("CartPole-v1")
    policy = cairn.Policy(env.observation_space, env.action_space,
                          {"observation_filter": "MeanStdFilter"}, seed=0)
    rng = np.random.default_rng(0)
    policy.process_observations(rng.normal(size=(1000, 4)).astype(np.float32), update=True)
    one = rng.normal(size=4).astype(np.float32)
    batch = rng.normal(size=(1024, 4)).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        export_model(policy, tmp / "torch")
        export_model(policy, tmp / "onnx", onnx=18)
        export_model(policy, tmp / "onnx_value", onnx=18, extra_outputs=["value"])
        unfiltered = cairn.Policy(env.observation_space, env.action_space, {"observation_filter": "NoFilter"},
                                  seed=0)
        export_model(unfiltered, tmp / "onnx_nofilter", onnx=18)
        _bare_mlp_onnx(policy, tmp / "bare.onnx")
        # The anchor is the policy's own actor: the same layers, in the same order.
        actor_gemms = _gemm_shapes(tmp / "onnx" / "model.onnx")
        assert _gemm_shapes(tmp / "bare.onnx") == actor_gemms, (actor_gemms, _gemm_shapes(tmp / "bare.onnx"))
        session = _session(onnxruntime, tmp / "onnx" / "model.onnx", args.threads)
        no_filter = _session(onnxruntime, tmp / "onnx_nofilter" / "model.onnx", args.threads)
        with_value = _session(onnxruntime, tmp / "onnx_value" / "model.onnx", args.threads)
        bare = _session(onnxruntime, tmp / "bare.onnx", args.threads)
        bare_again = _session(onnxruntime, tmp / "bare.onnx", args.threads)
        nodes = {"policy": _ops(tmp / "onnx" / "model.onnx"), "bare": _ops(tmp / "bare.onnx")}
        for name, file in (("policy", tmp / "onnx" / "model.onnx"), ("bare", tmp / "bare.onnx")):
            _session(onnxruntime, file, args.threads, optimized=tmp / f"{name}.optimized.onnx")
            nodes[f"{name} as run"] = _ops(tmp / f"{name}.optimized.onnx")
        program = torch.export.load(str(tmp / "torch" / "model.pt2")).module()

    def program_run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return program(torch.from_numpy(x))[0].numpy()  # type: ignore[no-any-return]

    one_b = one[None]
    assert session.run(["action"], {"obs": one_b})[0][0] == program_run(one_b)[0] == \
        policy.compute_single_action(one, explore=False)
    rows = {
        "cairn compute_single_action / compute_actions": (
            lambda: policy.compute_single_action(one, explore=False),
            lambda: policy.compute_actions(batch, explore=False)),
        POLICY: (
            lambda: session.run(["action"], {"obs": one_b}),
            lambda: session.run(["action"], {"obs": batch})),
        "ONNX in onnxruntime, all outputs": (
            lambda: session.run(None, {"obs": one_b}),
            lambda: session.run(None, {"obs": batch})),
        "ONNX of the same policy with NoFilter": (
            lambda: no_filter.run(["action"], {"obs": one_b}),
            lambda: no_filter.run(["action"], {"obs": batch})),
        "ONNX with extra_outputs=['value'], all outputs": (
            lambda: with_value.run(None, {"obs": one_b}),
            lambda: with_value.run(None, {"obs": batch})),
        ANCHOR: (
            lambda: bare.run(None, {"obs": one_b}),
            lambda: bare.run(None, {"obs": batch})),
        "torch.export program (plain torch)": (
            lambda: program_run(one_b), lambda: program_run(batch)),
    }
    onnx_rows = [name for name in rows if "ONNX" in name]
    onnx_latency = _interleaved_times(
        {**{name: rows[name][0] for name in onnx_rows},
         ANCHOR_AGAIN: lambda: bare_again.run(None, {"obs": one_b})},
        inner=100, repeats=args.latency_repeats, warmup=500)
    step_env = gym.make("CartPole-v1")
    step_env.reset(seed=0)

    def env_step() -> None:
        _, _, terminated, truncated, _ = step_env.step(int(rng.integers(2)))
        if terminated or truncated:
            step_env.reset()

    after_step = _times_after(
        {name: rows[name][0] for name in (POLICY, "ONNX of the same policy with NoFilter", ANCHOR)},
        env_step, calls=50, repeats=41)
    other_latency = _interleaved_times(
        {name: pair[0] for name, pair in rows.items() if name not in onnx_rows},
        inner=200, repeats=args.repeats, warmup=200)
    batch_times = _interleaved_times({name: pair[1] for name, pair in rows.items()},
                                     inner=10, repeats=args.repeats, warmup=5)
    load_after = os.getloadavg()
    latency_times = {**onnx_latency, **other_latency}
    latency = {name: statistics.median(values) for name, values in latency_times.items()}
    per_batch = {name: statistics.median(values) for name, values in batch_times.items()}
    results = {name: (latency[name], 1024 / per_batch[name]) for name in rows}
    for name, (seconds, throughput) in results.items():
        print(f"{name:50s} {seconds * 1e6:8.1f} us/obs  {throughput:12,.0f} obs/s at batch 1024")

    first_latency, first_throughput = next(iter(results.values()))
    compared = {"onnx": POLICY, "all": "ONNX in onnxruntime, all outputs",
                "value": "ONNX with extra_outputs=['value'], all outputs",
                "nofilter": "ONNX of the same policy with NoFilter", "noise": ANCHOR_AGAIN}
    spread = {key: _quartiles(_paired_ratios(onnx_latency, case, ANCHOR)) for key, case in compared.items()}
    paired = {key: quartiles[1] for key, quartiles in spread.items()}
    of_medians = latency[POLICY] / latency[ANCHOR]
    of_minimums = min(onnx_latency[POLICY]) / min(onnx_latency[ANCHOR])
    low, _, high = spread["onnx"]
    after_step_ratio = statistics.median(_paired_ratios(after_step, POLICY, ANCHOR))
    after_step_nofilter = statistics.median(
        _paired_ratios(after_step, "ONNX of the same policy with NoFilter", ANCHOR))
    after_step_us = {name: statistics.median(values) * 1e6 for name, values in after_step.items()}
    # Where the exported policy's extra time goes: each graph is the one before plus nodes
    # (the NoFilter policy: the bare MLP and ArgMax; the policy: that and the filter's nodes).
    costs = {
        "ArgMax and the int64 `action` output (NoFilter policy - bare MLP)":
            _paired_microseconds(onnx_latency, "ONNX of the same policy with NoFilter", ANCHOR),
        "the filter, BatchNormalization and Clip (policy - NoFilter policy)":
            _paired_microseconds(onnx_latency, POLICY, "ONNX of the same policy with NoFilter"),
        "all of it (policy - bare MLP)": _paired_microseconds(onnx_latency, POLICY, ANCHOR),
    }
    breakdown = "; ".join(f"{what}: {value:+.2f} µs" for what, value in costs.items())
    print(f"where the difference goes: {breakdown}")
    load = (f"load average (1/5/15 min) "
            f"{load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
            f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after")
    print(f"exported policy ONNX / bare MLP ONNX, one observation: {paired['onnx']:.3f}x "
          f"(quartiles {low:.3f}-{high:.3f}; ratio of the medians {of_medians:.3f}x, of the minimums "
          f"{of_minimums:.3f}x; all outputs fetched: {paired['all']:.3f}x; with the value output: "
          f"{paired['value']:.3f}x; NoFilter policy: {paired['nofilter']:.3f}x; anchor against a second "
          f"session of itself: {paired['noise']:.3f}x); each call right after a CartPole env.step: "
          f"{after_step_ratio:.3f}x (NoFilter policy {after_step_nofilter:.3f}x); {load}")
    versions = {name: importlib.metadata.version(name)
                for name in ("torch", "onnxruntime", "onnx", "onnxscript", "numpy", "gymnasium")}
    command = (f"bench/export_inference.py --threads {args.threads} --repeats {args.repeats} "
               f"--latency-repeats {args.latency_repeats}")
    lines = [
        "# Exported-model inference vs the library call",
        "",
        f"`{command}`: CartPole-sized policy (Box(4) -> "
        "Discrete(2), 64x64 tanh actor and critic, MeanStdFilter), deterministic actions. "
        f"Per observation, the ONNX sessions: medians of {args.latency_repeats} loops of 100 calls, the "
        "sessions taking turns in a rotating order, 20 untimed calls before each loop; the library "
        f"call and the torch program: medians of {args.repeats} loops of 200 calls, timed apart from the "
        f"ONNX sessions. Batch: medians of {args.repeats} loops of 10 calls of 1,024 observations. "
        "Exported models also compute the "
        "logits (and the value when exported with `extra_outputs=['value']`); the library call computes the "
        "action only. The bare MLP is the policy's actor layers and action "
        "head exported alone (obs -> logits; its Gemm weights have the shapes of the policy graph's actor "
        "Gemms, checked). Every ONNX session: intra_op_num_threads as below, default graph optimisation "
        "(ORT_ENABLE_ALL).",
        "",
        f"Machine: {os.cpu_count()} cores ({platform.machine()}, shared with other jobs; {load}), "
        f"Python {platform.python_version()}, cairn {cairn.__version__}, "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + f"; {args.threads} thread(s) "
        "for torch, onnxruntime and numpy's OpenBLAS.",
        "",
        "| path | latency per observation (µs) | speed-up | throughput at batch 1024 (obs/s) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (seconds, throughput) in results.items():
        lines.append(
            f"| {name} | {seconds * 1e6:.1f} | {first_latency / seconds:.1f}x | "
            f"{throughput:,.0f} | {throughput / first_throughput:.2f}x |"
        )
    lines += [
        "", "Speed-up and ratio are against the first row, measured in the same run.", "",
        f"**Exported policy ONNX vs the bare MLP ONNX, one observation: {paired['onnx']:.2f}x** "
        f"(the median over {args.latency_repeats} rounds of the two timed in the same round; quartiles "
        f"{low:.3f}x-{high:.3f}x; the ratio of the two medians: {of_medians:.3f}x, of the two minimums: "
        f"{of_minimums:.3f}x; fetching `action` only). Fetching all outputs: {paired['all']:.2f}x; "
        f"exported with `extra_outputs=['value']`, all outputs fetched: {paired['value']:.2f}x; the same "
        f"policy with NoFilter: {paired['nofilter']:.2f}x. The anchor against a second session of itself: "
        f"{paired['noise']:.3f}x (quartiles {spread['noise'][0]:.3f}x-{spread['noise'][2]:.3f}x). "
        "Target: <= 1.2x.", "",
        "Each call right after a CartPole `env.step` (as in a loop that acts in an environment: the "
        "caches are partly cold), timed one call at a time, medians of 41 rounds of 50 calls: bare MLP "
        f"{after_step_us[ANCHOR]:.2f} µs, exported policy {after_step_us[POLICY]:.2f} µs, "
        f"**{after_step_ratio:.2f}x** "
        f"(NoFilter policy {after_step_nofilter:.2f}x).", "",
        f"Where the exported policy's extra time per observation goes (medians of per-round differences, "
        f"bare MLP {latency[ANCHOR] * 1e6:.2f} µs): {breakdown}.", "",
        f"ONNX nodes, exported policy: {nodes['policy']}", "",
        f"ONNX nodes, bare MLP: {nodes['bare']}", "",
        "As onnxruntime runs them (after its graph optimisations), exported policy: "
        f"{nodes['policy as run']}", "",
        f"As onnxruntime runs them, bare MLP: {nodes['bare as run']}", "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
