"""Training on a device: examples/s, peak memory and how busy the device is, for the main
job's recipe (`g2p`: the attentional LSTM, batch 128) and the Rios et al. transformer
recipe (`paper/rios2021/transformer-g2p-cmudict`: 4 + 4 layers, d 256, batch 400), each on
the embedded CMUdict's training split, for a fixed number of updates through the
trainer's own `Trainer.update`.

    python benchmarks/device_training.py [--device auto|cpu|cuda] [--precision fp32,bf16]
        [--updates 50] [--repeats 3] [--profile-updates 5] [--compare-cpu]
        [--recipes g2p,paper/rios2021/...] [--compile off,on]

It prints a JSON line as soon as each thing is measured (flushed, so that a run cut short
still says what it measured): one per run (`"kind": "run"`: examples/s over `--updates`
timed updates, the batches from number 20 on, after 5 warm-up updates on the batches
just before, the device synchronized before the clock stops;
peak memory: on CUDA the most allocated by tensors, `torch.cuda.max_memory_allocated`,
on the CPU the process's peak RSS; each run in a process of its own), one per recipe and
precision (`"kind": "summary"`: the median examples/s over `--repeats` runs, the peak
memory, and on CUDA the fraction of the wall time the GPU was running kernels: the torch
profiler's device time over the wall time of `--profile-updates` profiled updates, which
the profiler itself slows, so a lower bound). With `--compare-cpu` the same updates also
run on the CPU (2 threads), and the GPU/CPU ratio of examples/s is in the summary.
`--compile off,on` measures each recipe and precision without and with `train.compile`
(transduce.compiling; `"compile"` in each line), the repeats alternating between the two
so that both see the same machine (the summary of `on` has `compiled_over_uncompiled`, the
ratio of the medians): a compiled run warms up for `COMPILED_WARMUP` updates, so that the
compilations for new batch shapes fall before the clock starts; both time the same batches,
those from number `COMPILED_WARMUP` on.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

RECIPES = ("g2p", "paper/rios2021/transformer-g2p-cmudict")
WARMUP = 5
COMPILED_WARMUP = 20


def setup(
    recipe: str, prepared: str, device: str, precision: str, threads: int, compiled: bool = False
):
    """The trainer of `recipe` on the prepared data, and what `update` needs."""
    import torch

    from transduce import config as configuration
    from transduce.recipe_loader import compose, recipe_path
    from transduce.training import Trainer

    data, _ = compose(recipe_path(recipe))
    data["data"] = {"prepared": prepared}
    data["train"].update(device=device, precision=precision, threads=threads, compile=compiled)
    trainer = Trainer(configuration.parse(data), Path(tempfile.mkdtemp()))
    state = trainer.setup()
    torch.set_num_threads(threads)
    state.model.train()
    batches = trainer.batches(state.data, 0)
    return trainer, state.data, state.model, state.optimizer, state.schedule, batches


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    recipe: str, prepared: str, device: str, precision: str, updates: int, compiled: bool
) -> dict:
    """One run: examples/s over `updates` timed updates, and peak memory."""
    import torch

    trainer, _loaded, model, _optimizer, _schedule, batches = setup(
        recipe, prepared, device, precision, threads=2, compiled=compiled
    )
    where = trainer.device
    if where.type == "cuda":
        torch.cuda.reset_peak_memory_stats(where)
    number = 0
    # compiled or not, the same batches are timed (from COMPILED_WARMUP on)
    warmup = COMPILED_WARMUP if compiled else WARMUP
    for indices in batches[COMPILED_WARMUP - warmup : COMPILED_WARMUP]:
        number += 1
        trainer.update(indices, number)
    synchronize(where)
    timed = batches[COMPILED_WARMUP : COMPILED_WARMUP + updates]
    start = time.perf_counter()
    for indices in timed:
        number += 1
        trainer.update(indices, number)
    synchronize(where)
    seconds = time.perf_counter() - start
    examples = sum(len(i) for i in timed)
    if where.type == "cuda":
        peak = torch.cuda.max_memory_allocated(where) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "device": str(where),
        "precision": trainer.precision,
        "examples_per_s": examples / seconds,
        "seconds_per_update": seconds / len(timed),
        "peak_memory_mb": round(peak),
        "memory_kind": "cuda max_memory_allocated" if where.type == "cuda" else "peak RSS",
        "parameters": model.parameter_count(),
        "compile": compiled,
    }


def busy_fraction(
    recipe: str, prepared: str, device: str, precision: str, updates: int, compiled: bool
):
    """The share of the wall time of `updates` updates that the GPU spends in kernels
    (torch profiler), or None off CUDA."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return None
    trainer, _loaded, _model, _optimizer, _schedule, batches = setup(
        recipe, prepared, device, precision, threads=2, compiled=compiled
    )
    where = trainer.device
    if where.type != "cuda":
        return None
    warmup = COMPILED_WARMUP if compiled else WARMUP
    for number, indices in enumerate(batches[COMPILED_WARMUP - warmup : COMPILED_WARMUP], 1):
        trainer.update(indices, number)
    synchronize(where)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        timed = batches[COMPILED_WARMUP : COMPILED_WARMUP + updates]
        for number, indices in enumerate(timed, warmup + 1):
            trainer.update(indices, number)
        synchronize(where)
        wall = time.perf_counter() - start
    kernels = sum(
        event.self_device_time_total
        for event in prof.key_averages()
        if event.device_type == torch.autograd.DeviceType.CUDA
    )  # microseconds
    return min(1.0, kernels / 1e6 / wall)


def child(
    recipe: str, prepared: str, device: str, precision: str, updates: str, compiled: str
) -> None:
    """One measurement in a process of its own (its peak memory is its own)."""
    result = measure(recipe, prepared, device, precision, int(updates), compiled == "on")
    print(json.dumps(result))


def in_child(*arguments: str) -> dict:
    import subprocess

    done = subprocess.run(
        [sys.executable, __file__, "--child", *arguments], capture_output=True, text=True
    )
    if done.returncode != 0:  # e.g. a precision this device cannot run: said, not raised
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument(
        "--precision", default="fp32", help="auto, fp32, bf16 or fp16; several: fp32,bf16"
    )
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--profile-updates", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--compare-cpu", action="store_true", help="also on the CPU: the ratio")
    parser.add_argument("--prepared", help="a prepared CMUdict directory (default: the embedded)")
    parser.add_argument("--compile", default="off", help="off, on, or both: off,on (train.compile)")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from train_throughput import embedded_cmudict

    prepared = embedded_cmudict(args.prepared)
    precisions = args.precision.split(",")
    for precision in precisions:
        if precision not in ("auto", "fp32", "bf16", "fp16"):
            parser.error(f"--precision: auto, fp32, bf16 or fp16, not {precision!r}")
    compiles = args.compile.split(",")
    for value in compiles:
        if value not in ("off", "on"):
            parser.error(f"--compile: off, on or off,on, not {value!r}")
    for recipe in args.recipes.split(","):
        for precision in precisions:
            summary(args, recipe, prepared, precision, compiles)


def emit(line: dict) -> None:
    print(json.dumps({"benchmark": "device_training", **line}), flush=True)


def summary(
    args: argparse.Namespace, recipe: str, prepared: str, precision: str, compiles: list[str]
) -> None:
    """The runs of one recipe in one precision, each printed, then a summary for each
    value of `compiles`. With both, the repeats alternate (off, on, off, on, ...), so both
    see the same machine, and the summary of `on` has the ratio of the medians."""
    entries: dict[str, dict] = {}
    targets = [("device", args.device)] + ([("cpu", "cpu")] if args.compare_cpu else [])
    for label, device in targets:
        runs: dict[str, list[dict]] = {compiled: [] for compiled in compiles}
        for repeat in range(1, args.repeats + 1):
            for compiled in list(runs):
                run = in_child(recipe, prepared, device, precision, str(args.updates), compiled)
                emit(
                    {"kind": "run", "recipe": recipe, "precision": precision, "repeat": repeat}
                    | run
                )
                if "error" in run:  # the same error in every repeat: not tried again
                    del runs[compiled]
                    continue
                runs[compiled].append(run)
        for compiled, done in runs.items():
            rates = [r["examples_per_s"] for r in done]
            entry = entries.setdefault(
                compiled,
                {"kind": "summary", "recipe": recipe, "updates": args.updates}
                | {"compile": compiled == "on"},
            )
            entry[label] = {
                **{k: done[0][k] for k in ("device", "precision", "parameters", "memory_kind")},
                "examples_per_s": round(statistics.median(rates), 1),
                "runs": [round(r, 1) for r in rates],
                "peak_memory_mb": max(r["peak_memory_mb"] for r in done),
            }
    for compiled, entry in entries.items():
        if "device" not in entry:
            continue
        busy = busy_fraction(
            recipe, prepared, args.device, precision, args.profile_updates, compiled == "on"
        )
        entry["device"]["busy_fraction"] = None if busy is None else round(busy, 3)
        entry["device"]["profiled_updates"] = args.profile_updates if busy is not None else None
        if args.compare_cpu and "cpu" in entry:
            entry["device_over_cpu"] = round(
                entry["device"]["examples_per_s"] / entry["cpu"]["examples_per_s"], 2
            )
        if compiled == "on" and "device" in entries.get("off", {}):
            entry["compiled_over_uncompiled"] = round(
                entry["device"]["examples_per_s"] / entries["off"]["device"]["examples_per_s"], 3
            )
        emit(entry)


if __name__ == "__main__":
    main()
