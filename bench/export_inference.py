"""Inference speed of exported models against the library call, side by side in one process.

For a CartPole-sized policy (Box(4) -> Discrete(2), 64x64 actor and critic, MeanStdFilter) it
measures the per-observation latency and the batch-1024 throughput of

* ``policy.compute_single_action`` / ``policy.compute_actions`` (the library call),
* the ONNX model in onnxruntime (``model.onnx``, opset 18; ``action`` and ``logits``), and the
  same exported with ``extra_outputs=["value"]``,
* the **bare MLP** as ONNX: the policy's own actor Linear/Tanh layers and action head exported
  alone (``obs -> logits``, no filter, no critic, no argmax), the anchor for the exported
  graph's single-observation latency (issue 11: within 1.2x),
* the native program loaded with ``torch.export.load`` (``model.pt2``),

with warm-up first and medians over repeated timed loops, all paths taking turns in each
repeat. The latency ratio against the bare MLP is the median of the per-repeat ratios (the two
loops of one repeat run back to back, so load from other jobs mostly cancels). The exported policy computes more than the bare MLP (the filter and the argmax
too, and the critic when the value is exported). Both ONNX sessions use the same options: ``intra_op_num_threads=--threads`` and
onnxruntime's default ``graph_optimization_level`` (``ORT_ENABLE_ALL``).

    .venv/bin/python bench/export_inference.py [--threads 1] [--out bench/results/export_inference.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import cairn
from cairn.export import export_model


def _loop_seconds(fn: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def _interleaved_times(
    cases: dict[str, Callable[[], object]], *, inner: int, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds per call of each case in every repeat; the cases take turns within every
    repeat, so that load from other jobs on this shared machine falls on all of them alike."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            times[name].append(_loop_seconds(fn, inner))
    return times


def _paired_ratio(times: dict[str, list[float]], case: str, anchor: str) -> float:
    """Median over repeats of ``case / anchor`` timed in the same repeat (back to back)."""
    return statistics.median(a / b for a, b in zip(times[case], times[anchor], strict=True))


def _bare_mlp_onnx(policy: cairn.Policy, path: Path) -> None:
    """The policy's actor layers and action head, alone, as ONNX (opset 18, dynamic batch)."""
    model = policy.model
    bare = nn.Sequential(*model.actor, model.action_head).eval()
    example = torch.zeros((2, policy.preprocessor.size), dtype=torch.float32)
    program = torch.export.export(bare, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.onnx.export(program, (example,), str(path), dynamo=True, opset_version=18,
                      input_names=["obs"], output_names=["logits"], verbose=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "export_inference.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import onnxruntime

    env = gym.make("CartPole-v1")
    policy = cairn.Policy(env.observation_space, env.action_space,
                          {"observation_filter": "MeanStdFilter"}, seed=0)
    rng = np.random.default_rng(0)
    policy.process_observations(rng.normal(size=(1000, 4)).astype(np.float32), update=True)
    one = rng.normal(size=4).astype(np.float32)
    batch = rng.normal(size=(1024, 4)).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        export_model(policy, Path(tmp) / "torch")
        export_model(policy, Path(tmp) / "onnx", onnx=18)
        export_model(policy, Path(tmp) / "onnx_value", onnx=18, extra_outputs=["value"])
        unfiltered = cairn.Policy(env.observation_space, env.action_space, {"observation_filter": "NoFilter"},
                                  seed=0)
        export_model(unfiltered, Path(tmp) / "onnx_nofilter", onnx=18)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = onnxruntime.InferenceSession(str(Path(tmp) / "onnx" / "model.onnx"), options,
                                               providers=["CPUExecutionProvider"])
        no_filter = onnxruntime.InferenceSession(str(Path(tmp) / "onnx_nofilter" / "model.onnx"), options,
                                                 providers=["CPUExecutionProvider"])
        with_value = onnxruntime.InferenceSession(str(Path(tmp) / "onnx_value" / "model.onnx"), options,
                                                  providers=["CPUExecutionProvider"])
        _bare_mlp_onnx(policy, Path(tmp) / "bare.onnx")
        bare = onnxruntime.InferenceSession(str(Path(tmp) / "bare.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        import onnx

        nodes = {name: [n.op_type for n in onnx.load(str(Path(tmp) / file)).graph.node]
                 for name, file in (("policy", "onnx/model.onnx"), ("bare", "bare.onnx"))}
        program = torch.export.load(str(Path(tmp) / "torch" / "model.pt2")).module()

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
        "ONNX in onnxruntime": (
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
        "bare MLP ONNX (anchor: actor layers alone, obs -> logits)": (
            lambda: bare.run(None, {"obs": one_b}),
            lambda: bare.run(None, {"obs": batch})),
        "torch.export program (plain torch)": (
            lambda: program_run(one_b), lambda: program_run(batch)),
    }
    latency_times = _interleaved_times({name: pair[0] for name, pair in rows.items()},
                                       inner=200, repeats=args.repeats, warmup=200)
    batch_times = _interleaved_times({name: pair[1] for name, pair in rows.items()},
                                     inner=10, repeats=args.repeats, warmup=5)
    latency = {name: statistics.median(values) for name, values in latency_times.items()}
    per_batch = {name: statistics.median(values) for name, values in batch_times.items()}
    results = {name: (latency[name], 1024 / per_batch[name]) for name in rows}
    for name, (seconds, throughput) in results.items():
        print(f"{name:50s} {seconds * 1e6:8.1f} us/obs  {throughput:12,.0f} obs/s at batch 1024")

    anchor_latency, anchor_throughput = next(iter(results.values()))
    anchor = "bare MLP ONNX (anchor: actor layers alone, obs -> logits)"
    compared = {"onnx": "ONNX in onnxruntime", "all": "ONNX in onnxruntime, all outputs",
                "value": "ONNX with extra_outputs=['value'], all outputs",
                "nofilter": "ONNX of the same policy with NoFilter"}
    paired = {key: _paired_ratio(latency_times, case, anchor) for key, case in compared.items()}
    of_medians = {key: latency[case] / latency[anchor] for key, case in compared.items()}
    onnx_ratio, all_ratio, value_ratio, nofilter_ratio = (paired[k] for k in ("onnx", "all", "value", "nofilter"))
    print(f"exported policy ONNX / bare MLP ONNX, one observation: {onnx_ratio:.2f}x "
          f"(all outputs fetched: {all_ratio:.2f}x; with the value output: {value_ratio:.2f}x; "
          f"NoFilter policy: {nofilter_ratio:.2f}x); ratio of the medians: {of_medians['onnx']:.2f}x")
    versions = {name: importlib.metadata.version(name)
                for name in ("torch", "onnxruntime", "onnx", "onnxscript", "numpy", "gymnasium")}
    lines = [
        "# Exported-model inference vs the library call",
        "",
        f"`bench/export_inference.py --threads {args.threads}`: CartPole-sized policy (Box(4) -> "
        "Discrete(2), 64x64 tanh actor and critic, MeanStdFilter), deterministic actions. "
        f"Medians of {args.repeats} timed loops after warm-up, the paths taking turns in each repeat "
        "(per observation: 200 calls per loop; batch: 10 calls of 1,024 observations per loop). Exported models also compute the "
        "logits (and the value when exported with `extra_outputs=['value']`); the library call computes the action only. The bare MLP is the policy's actor layers and action "
        "head exported alone (obs -> logits). Both ONNX sessions: intra_op_num_threads as below, default graph optimisation "
        "(ORT_ENABLE_ALL).",
        "",
        f"Machine: {os.cpu_count()} cores ({platform.machine()}, shared with other jobs), "
        f"Python {platform.python_version()}, cairn {cairn.__version__}, "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + f"; {args.threads} thread(s) "
        "for torch and onnxruntime.",
        "",
        "| path | latency per observation (µs) | speed-up | throughput at batch 1024 (obs/s) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (latency, throughput) in results.items():
        lines.append(
            f"| {name} | {latency * 1e6:.1f} | {anchor_latency / latency:.1f}x | "
            f"{throughput:,.0f} | {throughput / anchor_throughput:.2f}x |"
        )
    lines += [
        "", "Speed-up and ratio are against the first row, measured in the same run.", "",
        f"**Exported policy ONNX vs the bare MLP ONNX, one observation: {onnx_ratio:.2f}x** "
        "(the median over repeats of the two timed back to back in the same repeat; the ratio "
        f"of the two medians above: {of_medians['onnx']:.2f}x) "
        f"(fetching `action` only; {all_ratio:.2f}x fetching all outputs; {value_ratio:.2f}x exported with "
        "`extra_outputs=['value']`, all outputs fetched; the same policy with NoFilter: "
        f"{nofilter_ratio:.2f}x). Target: <= 1.2x.", "",
        f"ONNX nodes, exported policy: {' '.join(nodes['policy'])}", "",
        f"ONNX nodes, bare MLP: {' '.join(nodes['bare'])}", "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
