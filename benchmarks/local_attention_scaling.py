"""How local attention scales with the source length: decoder step time, and training speed.

1. **Decoder step time** for source lengths S in {50, 200, 1000, 2000}: `model.step` (one
   greedy decoding step, the unit of every decoder) of the `lstm` model with
   `attention.type: global` and with `local_monotonic` (and `local_m`), MLP scorer of 256
   units as in Tjandra et al. (2017) §6.2, on random sources of exactly S symbols. The
   encoder runs once per S, untimed; the state then holds S encoder states, and a step
   reads all of them (global) or its window of 2D + 1 (local). Goal: local at S = 2000 at
   most 1.3x its own time at S = 50, while global grows with S.
2. **Training speed** on CMUdict: seconds per update of the trainer's own `Trainer.update`
   for global and local_monotonic at the same size, paired: both models train on the same
   batches in one process, alternating update by update; the ratio is the median of the
   per-batch ratios.

Sizes are those of ../shared/BENCHMARKS.md (embeddings 200, 2 x 400 bidirectional encoder,
decoder 400, dropout 0.4, fp32, 2 threads) with the MLP scorer of 256 units, window D = 2.
Step times are medians over `--repeats`; prints one JSON line.

    python benchmarks/local_attention_scaling.py [--repeats 3] [--lengths 50,200,1000,2000]
        [--batch 16] [--steps 20] [--train-batches 20,256] [--updates 30] [--prepared DIR]
        [--no-train]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from train_throughput import LSTM_SIZES, WARMUP, trainer_setup  # this folder is on sys.path

SIZES = {**LSTM_SIZES, "attention_size": 256}
TYPES = {
    "global": {"type": "global", "scorer": "mlp"},
    "local_monotonic": {"type": "local_monotonic", "scorer": "mlp", "window": 2},
    "local_m": {"type": "local_m", "scorer": "mlp", "window": 2},
}
GOAL = 1.3
VOCAB = 40


def step_times(lengths: list[int], batch: int, steps: int, repeats: int) -> dict:
    """Median seconds per decoder step, per attention type and source length."""
    import torch

    from transduce import config as configuration
    from transduce.data.batching import collate
    from transduce.models import build_model

    torch.set_num_threads(2)
    models = {}
    for name, attention in TYPES.items():
        torch.manual_seed(1)
        data = {
            "data": {"prepared": "-"},
            "model": {"name": "lstm", **SIZES, "attention": attention},
        }
        config = configuration.parse(data)
        models[name] = build_model("lstm", config.model, VOCAB, VOCAB).eval()
    generator = torch.Generator().manual_seed(0)
    results: dict[str, dict[str, float]] = {name: {} for name in TYPES}
    for S in lengths:
        sources = torch.randint(5, VOCAB, (batch, S), generator=generator).tolist()
        source = collate(sources)
        previous = torch.randint(5, VOCAB, (steps,), generator=generator)
        runs: dict[str, list[float]] = {name: [] for name in TYPES}
        with torch.inference_mode():
            states = {name: model.init_state(source) for name, model in models.items()}
            for _ in range(repeats + 1):  # the first round warms up
                for name, model in models.items():  # alternate: the same machine load
                    state = states[name]
                    start = time.perf_counter()
                    for t in range(steps):
                        state = model.step(state, previous[t].expand(batch)).state
                    runs[name].append((time.perf_counter() - start) / steps)
        for name in TYPES:
            results[name][str(S)] = statistics.median(runs[name][1:])
    return results


def training(prepared: str, batches: list[int], updates: int) -> dict:
    """Seconds per update of global and local_monotonic, paired: both train on the same
    batches in one process, alternating update by update (after WARMUP each)."""
    results = {}
    for batch_size in batches:
        runs = {}
        for kind in ("global", "local_monotonic"):
            data = {
                "data": {"prepared": prepared},
                "model": {"name": "lstm", **SIZES, "attention": TYPES[kind]},
                "train": {"batch_size": batch_size, "threads": 2},
            }
            runs[kind] = trainer_setup(data)
        times: dict[str, list[float]] = {kind: [] for kind in runs}
        plan = runs["global"][-1]  # the same batches for both (same data, seed and size)
        for number, indices in enumerate(plan[: WARMUP + updates], 1):
            for kind, (trainer, _loaded, _model, _optimizer, _schedule, _) in runs.items():
                start = time.perf_counter()
                trainer.update(indices, number)
                if number > WARMUP:
                    times[kind].append(time.perf_counter() - start)
        row: dict = {
            kind: {
                "seconds_per_update": round(statistics.median(times[kind]), 4),
                "parameters": runs[kind][2].parameter_count(),
            }
            for kind in runs
        }
        ratios = [b / a for a, b in zip(times["global"], times["local_monotonic"])]
        row["local_over_global"] = round(statistics.median(ratios), 3)
        row["updates"] = len(ratios)
        results[f"b{batch_size}"] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", default="50,200,1000,2000")
    parser.add_argument("--batch", type=int, default=16, help="decoding batch")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--train-batches", default="20,256")
    parser.add_argument("--updates", type=int, default=30, help="timed training updates")
    parser.add_argument("--no-train", action="store_true", help="only the step times")
    parser.add_argument(
        "--prepared", help="a prepared CMUdict directory (default: prepare the embedded one)"
    )
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    steps = step_times(lengths, args.batch, args.steps, args.repeats)
    first, final = str(lengths[0]), str(lengths[-1])
    growth = {name: round(times[final] / times[first], 2) for name, times in steps.items()}
    report = {
        "benchmark": "local_attention_scaling",
        "threads": 2,
        "cpus": os.cpu_count(),
        "decode_batch": args.batch,
        "step_ms": {
            name: {S: round(1000 * t, 3) for S, t in times.items()} for name, times in steps.items()
        },
        f"growth_S{final}_over_S{first}": growth,
        "goal_local_growth": GOAL,
        "meets_goal": growth["local_monotonic"] <= GOAL,
    }
    if not args.no_train:
        prepared = args.prepared
        if prepared is None:
            from transduce.data.prepare import PrepareRequest, prepare

            prepared = str(Path(tempfile.mkdtemp()) / "cmudict")
            prepare(PrepareRequest("cmudict", Path(prepared)))
        batches = [int(b) for b in args.train_batches.split(",")]
        report["training"] = training(prepared, batches, args.updates)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
