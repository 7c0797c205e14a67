"""Checkpoint storage (issue 12): local saves vs numpy, S3 vs boto3, incremental and subset
saves/restores, each side by side with its anchor in one run.

Parts:

1. **Local save** of PPO CartPole with 3x1024 (48 MiB with Adam) and 3x2048 (192 MiB) actor and
   critic vs numpy writing + fsyncing the same number of bytes as one file. Target 1.2x.
2. **S3** (a moto server on 127.0.0.1, tests/s3_server.py, through s3fs): ``save_algorithm`` of
   the 3x1024 algorithm to ``s3://`` and ``Algorithm.from_checkpoint`` of it vs boto3's
   ``upload_fileobj`` / ``download_fileobj`` of the same bytes as one multipart object
   (boto3's default transfer config: 8 MiB parts, 10 threads). Target 1.3x.
3. **Incremental save**: 64 policies (2x256), one of them trained since the previous checkpoint:
   ``save_algorithm(..., previous=...)``, which proves each linked file equal by hashing the
   live state as a full save would write it, vs a full save of all 64 (target 0.15x, issue 36),
   and the self-play shape, where the 63 others are frozen opponents that acted since (their
   sampling generators moved, so their JSON state is rewritten while their arrays stay linked),
   vs the one-trained shape (target 2x). Also reported: a save of that one policy alone, and
   the two floors of the design, timed alone in the same rounds: the 63 unchanged policies'
   directories and hard links made with plain os calls, the content proof of the 63
   (``get_state`` and hashing both state files as they would be written, no file written), and
   the check of the files taken (each linked file's bytes read back and hashed against its
   manifest, issue 37 item 4; from the page cache, as right after the previous save).
4. **Subset restore**: ``Algorithm.from_checkpoint(path, policy_ids=["p0"])`` of 1 policy of 64
   vs 1 of 2 (2x256 policies, 64 agents either way). Target 1.2x.

Runs in the project's own virtualenv (the ``s3`` and ``dev`` extras), alternating the compared
calls within each repetition after a warm-up round:

    .venv/bin/python bench/storage_io.py            # full, a few minutes
    .venv/bin/python bench/storage_io.py --quick    # smoke: small models, 2 repeats
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _util import REPO, command_line, fmt, load_average, machine_lines, median, ratio, table, timed
from checkpoint_io import array_bytes, build_cairn, build_ma, numpy_save

TARGETS = {"local": 1.2, "s3": 1.3, "incremental": 0.15, "selfplay": 2.0, "subset": 1.2}


def ms(seconds: float) -> str:
    return fmt(seconds * 1000, 1)


def alternate(calls: dict[str, Callable[[int], Any]], repeats: int) -> dict[str, list[float]]:
    """Median-ready timings of each call, alternating their order; round 0 is a warm-up."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for rep in range(repeats + 1):
        for name in (names if rep % 2 == 0 else names[::-1]):
            gc.collect()
            t, own = timed(lambda name=name, rep=rep: calls[name](rep))
            t = own if isinstance(own, float) else t  # a call that times only its own part
            if rep:
                times[name].append(t)
        print(f"  rep {rep} (load {load_average()}): " + ", ".join(
            f"{n} {ms(times[n][-1]) if rep else '-'} ms" for n in names), flush=True)
    return times


# ------------------------------------------------------------------------------ 1: local
def bench_local(hidden: list[int], repeats: int, work: Path) -> dict[str, Any]:
    from cairn.algorithms.save_restore import save_algorithm

    print(f"== local save {len(hidden)}x{hidden[0]}", flush=True)
    algo = build_cairn(hidden)
    nbytes = array_bytes(algo.get_state())
    buf = np.random.default_rng(0).integers(0, 255, size=nbytes, dtype=np.uint8)

    def cairn_save(rep: int) -> None:
        save_algorithm(algo, work / f"local_{rep}")

    def numpy_write(rep: int) -> None:
        numpy_save(buf, work / f"numpy_{rep}.bin")

    times = alternate({"numpy": numpy_write, "cairn": cairn_save}, repeats)
    for path in work.glob("local_*"):
        shutil.rmtree(path)
    for path in work.glob("numpy_*"):
        path.unlink()
    algo.stop()
    return {"hidden": hidden, "bytes": nbytes, "times": times}


# --------------------------------------------------------------------------------- 2: S3
def bench_s3(hidden: list[int], repeats: int) -> dict[str, Any]:
    import boto3.s3.transfer

    import cairn
    from cairn.algorithms.save_restore import save_algorithm
    from tests.s3_server import S3Server

    print(f"== S3 (moto on 127.0.0.1) {len(hidden)}x{hidden[0]}", flush=True)
    server = S3Server.start()
    bucket = server.new_bucket()
    client = server.client()
    config = boto3.s3.transfer.TransferConfig()  # the defaults: multipart over 8 MiB, 10 threads
    algo = build_cairn(hidden)
    nbytes = array_bytes(algo.get_state())
    data = np.random.default_rng(0).integers(0, 255, size=nbytes, dtype=np.uint8).tobytes()
    options = server.storage_options

    def cairn_save(rep: int) -> None:
        save_algorithm(algo, bucket.url(f"c{rep}"), storage_options=options)

    def boto3_upload(rep: int) -> None:
        client.upload_fileobj(io.BytesIO(data), bucket.name, f"blob{rep}", Config=config)

    def cairn_restore(rep: int) -> None:
        cairn.Algorithm.from_checkpoint(bucket.url(f"c{rep}"), storage_options=options).stop()

    def boto3_download(rep: int) -> None:
        out = io.BytesIO()
        client.download_fileobj(bucket.name, f"blob{rep}", out, Config=config)
        assert out.getbuffer().nbytes == nbytes

    saves = alternate({"boto3 upload": boto3_upload, "cairn save": cairn_save}, repeats)
    restores = alternate({"boto3 download": boto3_download, "cairn restore": cairn_restore}, repeats)
    algo.stop()
    server.stop()
    return {"hidden": hidden, "bytes": nbytes, "save": saves, "restore": restores}


# ------------------------------------------------------------------------ 3: incremental
def _change(algo: Any, pid: str, rep: int) -> None:
    policy = algo.get_policy(pid)
    weights = policy.get_weights()
    name = next(iter(weights))
    policy.set_weights({**weights, name: weights[name] + 1e-3 * (rep + 1)})


def _act(algo: Any, rep: int) -> None:
    """Every policy but p0 acts on a few observations, as a frozen opponent does in self-play."""
    for pid, policy in algo.policies.items():
        if pid != "p0":
            policy.compute_actions(np.full((4, 4), 0.01 * rep, dtype=np.float32), explore=True)


def _link_floor(base: str, files: dict[str, list[str]], into: Path) -> None:
    """The file-system work an incremental save cannot avoid with a directory per policy: one
    directory and one hard link per file for each unchanged policy (plain os calls; the file
    names known beforehand, as the writer knows them from the previous manifest)."""
    os.makedirs(into / "policies")
    src = os.open(Path(base) / "policies", os.O_RDONLY | os.O_DIRECTORY)
    dst = os.open(into / "policies", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for pid, names in files.items():
            os.mkdir(pid, dir_fd=dst)
            for name in names:
                os.link(f"{pid}/{name}", f"{pid}/{name}", src_dir_fd=src, dst_dir_fd=dst)
    finally:
        os.close(src)
        os.close(dst)


def bench_incremental(n: int, hidden: list[int], repeats: int, work: Path) -> dict[str, Any]:
    from cairn.algorithms.save_restore import save_algorithm
    from cairn.checkpoint.safetensors_io import new_hasher
    from cairn.checkpoint.writer_files import state_file_entries

    print(f"== incremental save: {n} policies {len(hidden)}x{hidden[0]}, one changed", flush=True)
    many, one = build_ma(n, hidden, agents=n), build_ma(1, hidden, agents=n)
    base = save_algorithm(many, work / "inc_base")
    played = build_ma(n, hidden, agents=n)
    played_base = save_algorithm(played, work / "selfplay_base")

    def incremental(rep: int) -> None:
        _change(many, "p0", rep)
        save_algorithm(many, work / f"inc_{rep}", previous=base)

    def selfplay(rep: int) -> float:
        _change(played, "p0", rep)
        _act(played, rep)  # not timed
        start = time.perf_counter()
        save_algorithm(played, work / f"selfplay_{rep}", previous=played_base)
        return time.perf_counter() - start

    def one_policy(rep: int) -> None:
        _change(one, "p0", rep)
        save_algorithm(one, work / f"one_{rep}")

    def full(rep: int) -> None:
        save_algorithm(many, work / f"full_{rep}")

    # What the 63 unchanged policies cost at the least: their directories and links, and the
    # proof that their files are the bytes a full save would write (docs/checkpoints.md).
    unchanged = [pid for pid in many.policies if pid != "p0"]
    files = {pid: sorted(os.listdir(Path(base) / "policies" / pid)) for pid in unchanged}

    def link_floor(rep: int) -> None:
        _link_floor(base, files, work / f"floor_{rep}")

    def taken_check(rep: int) -> None:
        for pid, names in files.items():
            for name in names:
                hasher = new_hasher()
                with open(Path(base) / "policies" / pid / name, "rb", buffering=0) as f:
                    while chunk := f.read(1 << 20):
                        hasher.update(chunk)

    def proof(rep: int) -> float:
        _change(many, "p0", rep)  # not timed
        start = time.perf_counter()
        for pid in unchanged:
            state_file_entries(many.get_policy(pid).get_state(copy=False), "policy_state.json",
                               "policy_state.safetensors")
        return time.perf_counter() - start

    times = alternate({"one policy alone": one_policy, "incremental": incremental, "full": full,
                       "self-play": selfplay, "links alone": link_floor, "proof alone": proof,
                       "links checked alone": taken_check}, repeats)
    linked = {name: sum(1 for p in (work / f"{name}_{repeats}" / "policies").rglob("*")
                        if p.is_file() and p.stat().st_nlink > 1) for name in ("inc", "selfplay")}
    for algo in (many, one, played):
        algo.stop()
    return {"n": n, "hidden": hidden, "times": times, "linked_files": linked["inc"],
            "selfplay_linked_files": linked["selfplay"]}


# ----------------------------------------------------------------------------- 4: subset
def bench_subset(counts: list[int], hidden: list[int], repeats: int, work: Path) -> dict[str, Any]:
    import cairn

    print(f"== subset restore: 1 policy of {counts}", flush=True)
    agents = max(counts)
    paths = {}
    for n in counts:
        algo = build_ma(n, hidden, agents=agents)
        paths[n] = algo.save(work / f"subset_{n}")
        algo.stop()
    mapping = {f"agent_{i}": "p0" for i in range(agents)}

    def restore(n: int) -> Callable[[int], None]:
        def call(rep: int) -> None:
            cairn.Algorithm.from_checkpoint(paths[n], policy_ids=["p0"], policy_mapping_fn=mapping).stop()
        return call

    times = alternate({f"1 of {n}": restore(n) for n in counts}, repeats)
    return {"counts": counts, "hidden": hidden, "times": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke: small models, 2 repeats")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--parts", default="local,s3,incremental,subset")
    parser.add_argument("--out", type=Path, default=None,
                        help="Markdown results (default bench/results/storage_io.md; none for --quick)")
    args = parser.parse_args()
    sizes, n, counts, ma_hidden = [[1024] * 3, [2048] * 3], 64, [2, 64], [256, 256]
    if args.quick:
        sizes, n, counts, args.repeats = [[256] * 3], 8, [2, 8], 2
    parts = set(args.parts.split(","))
    work = Path(tempfile.mkdtemp(prefix="cairn_storage_bench_"))
    results: dict[str, Any] = {}
    try:
        if "local" in parts:
            results["local"] = [bench_local(h, args.repeats, work) for h in sizes]
        if "s3" in parts:
            results["s3"] = bench_s3(sizes[0], args.repeats)
        if "incremental" in parts:
            results["incremental"] = bench_incremental(n, ma_hidden, args.repeats, work)
        if "subset" in parts:
            # a restore takes ~15 ms: three times the repetitions, for a median as steady as the others
            results["subset"] = bench_subset(counts, ma_hidden, 3 * args.repeats, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = report(results, args)
    print("\n".join(lines))
    out = args.out or (None if args.quick else REPO / "bench/results/storage_io.md")
    if out:
        out.write_text("\n".join(lines) + "\n")
        print(f"wrote {out}")


def report(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    met = {True: "**met**", False: "**MISSED**"}
    rows = []
    for run in results.get("local", []):
        a, b = median(run["times"]["numpy"]), median(run["times"]["cairn"])
        rows.append((f"local save {len(run['hidden'])}x{run['hidden'][0]} ({run['bytes'] / 2**20:.0f} MiB) "
                     "vs numpy write+fsync", f"numpy {ms(a)} ms", f"cairn {ms(b)} ms",
                     f"{ratio(b, a):.2f}x",
                     met[ratio(b, a) <= TARGETS["local"]] + f" (<= {TARGETS['local']}x)"))
    if "s3" in results:
        run = results["s3"]
        for kind, anchor, ours in (("save", "boto3 upload", "cairn save"),
                                   ("restore", "boto3 download", "cairn restore")):
            a, b = median(run[kind][anchor]), median(run[kind][ours])
            rows.append((f"S3 {kind} of {run['bytes'] / 2**20:.0f} MiB vs boto3 one multipart object",
                         f"{anchor} {ms(a)} ms", f"{ours} {ms(b)} ms", f"{ratio(b, a):.2f}x",
                         met[ratio(b, a) <= TARGETS["s3"]] + f" (<= {TARGETS['s3']}x)"))
    if "incremental" in results:
        run = results["incremental"]
        a, b, c, d = (median(run["times"][k])
                      for k in ("one policy alone", "incremental", "full", "self-play"))
        rows.append((f"incremental save, {run['n']} policies, 1 trained ({run['linked_files']} files linked, "
                     "each proven by content) vs a full save of the same", f"full {ms(c)} ms",
                     f"incremental {ms(b)} ms", f"{ratio(b, c):.3f}x",
                     met[ratio(b, c) <= TARGETS["incremental"]] + f" (<= {TARGETS['incremental']}x)"))
        rows.append((f"self-play: {run['n']} policies, 1 trained, the others acted "
                     f"({run['selfplay_linked_files']} files linked) vs the one-trained shape",
                     f"incremental {ms(b)} ms", f"self-play {ms(d)} ms", f"{ratio(d, b):.2f}x",
                     met[ratio(d, b) <= TARGETS["selfplay"]] + f" (<= {TARGETS['selfplay']}x)"))
        rows.append(("a save of the trained policy alone (for comparison)", f"incremental {ms(b)} ms",
                     f"one policy {ms(a)} ms", f"{ratio(a, b):.2f}x", "report"))
        e, f = (median(run["times"][k]) for k in ("links alone", "proof alone"))
        rows.append((f"floor: {run['n'] - 1} unchanged policies' directories and links alone (os calls, "
                     "no cairn)", f"incremental {ms(b)} ms", f"links {ms(e)} ms", f"{ratio(e, b):.2f}x",
                     "report"))
        rows.append((f"floor: {run['n'] - 1} unchanged policies' content proof alone (get_state, both "
                     "files hashed as written)", f"incremental {ms(b)} ms", f"proof {ms(f)} ms",
                     f"{ratio(f, b):.2f}x", "report"))
        if "links checked alone" in run["times"]:
            g = median(run["times"]["links checked alone"])
            rows.append((f"floor: {run['n'] - 1} unchanged policies' linked files read back and hashed alone "
                         "(the check of what is taken)", f"incremental {ms(b)} ms", f"check {ms(g)} ms",
                         f"{ratio(g, b):.2f}x", "report"))
    if "subset" in results:
        run = results["subset"]
        lo, hi = (median(run["times"][f"1 of {n}"]) for n in run["counts"])
        rows.append((f"from_checkpoint(policy_ids=['p0']), "
                     f"1 of {run['counts'][1]} vs 1 of {run['counts'][0]}",
                     f"1 of {run['counts'][0]} {ms(lo)} ms", f"1 of {run['counts'][1]} {ms(hi)} ms",
                     f"{ratio(hi, lo):.2f}x",
                     met[ratio(hi, lo) <= TARGETS["subset"]] + f" (<= {TARGETS['subset']}x)"))
    return ["# Checkpoint storage: local, S3, incremental, subset", "",
            f"Command: `{command_line().replace('.bench-venv', '.venv')}`; medians of {args.repeats} "
            f"alternating repetitions after a warm-up round ({3 * args.repeats} for the subset restore).",
            "", *machine_lines(), "",
            *table(("what", "anchor", "cairn", "ratio", "target"), rows)]


if __name__ == "__main__":
    main()
