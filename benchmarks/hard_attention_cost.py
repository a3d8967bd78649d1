"""The cost of hard attention: training time per update against soft attention (`lstm`).

The models share the sizes of ../shared/BENCHMARKS.md (embeddings 200, 2-layer bidirectional
encoder of 400, decoder 400, d_s = 1200, dropout 0.4, no input feeding, fp32, 2 threads):

* `lstm`: soft attention, system ③;
* `hard`: 0th-order hard attention with exact marginalization, system ④ (a mixture of
  softmaxes: the emission is B x T x S x d_s);
* `hard_monotonic`: exact hard monotonic attention (the forward algorithm, O(|x|^2 |y|)).

Each (model, batch) runs in its own process (its peak RSS is its own) with the trainer's own
`Trainer.update` on the same length-bucketed CMUdict batches, after 3 warm-up updates
(`train_throughput.timed_updates`); the
models alternate within each repeat so they see the same machine load. Reports medians of
seconds per update, examples/s, the ratio to `lstm` (goal: hard <= 1.5x) and peak RSS.
With `--peer measure` (the default where ../shared/peer-bench/peer.sh is set up), the
peer's hard attention (`peer.sh train hard_attention_lstm BATCH STEPS`) is measured in the
same run, after each repeat of ours, and the hard models' examples/s are given over it.
Prints one JSON line.

    python benchmarks/hard_attention_cost.py [--repeats 3] [--batches 20,256] [--prepared DIR]
        [--peer measure|none]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from train_throughput import default_peer_bench, peer_is_set_up, peer_sh  # this folder

MODELS = {
    "lstm": {"name": "lstm"},
    "hard": {"name": "hard"},
    "hard_monotonic": {"name": "hard", "monotonic": True},
}
UPDATES = {20: 60, 256: 10}
PEER_STEPS = {20: 120, 256: 40}  # batches the peer trains for (its first 20 are warm-up)
GOAL = 1.5


def child(prepared: str, model: str, batch_size: int, bf16: bool) -> dict:
    from train_throughput import LSTM_SIZES, timed_updates

    data = {
        "data": {"prepared": prepared},
        "model": {**MODELS[model], **LSTM_SIZES},
        "train": {
            "batch_size": batch_size,
            "precision": "bf16" if bf16 else "fp32",
            "threads": 2,
        },
    }
    rate, seconds, parameters = timed_updates(data, UPDATES.get(batch_size, 10))
    return {
        "seconds_per_update": seconds,
        "examples_per_s": rate,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parameters": parameters,
    }


def measure(prepared: str, model: str, batch_size: int, bf16: bool) -> dict:
    command = [sys.executable, __file__, "--child", prepared, model, str(batch_size)]
    out = subprocess.run(
        command + (["--bf16"] if bf16 else []), capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="20,256")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast")
    parser.add_argument(
        "--prepared", help="a prepared CMUdict directory (default: prepare the embedded one)"
    )
    parser.add_argument(
        "--peer",
        choices=("measure", "none"),
        help="measure the peer's hard attention in this run (default where peer.sh is set "
        "up), or leave it out",
    )
    parser.add_argument("--peer-bench", type=Path, default=default_peer_bench())
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        prepared, model, batch_size = args.child
        print(json.dumps(child(prepared, model, int(batch_size), args.bf16)))
        return
    if args.bf16:
        from transduce.precision import bf16_works

        if not bf16_works("cpu"):
            raise SystemExit("--bf16: this CPU's oneDNN cannot run an LSTM in bfloat16")
    peer = args.peer or ("measure" if args.peer_bench and peer_is_set_up() else "none")
    if peer == "measure" and not (args.peer_bench and peer_is_set_up()):
        raise SystemExit("--peer measure: run `bash ../shared/peer-bench/peer.sh setup` first")
    prepared = args.prepared
    if prepared is None:
        from transduce.data.prepare import PrepareRequest, prepare

        prepared = str(Path(tempfile.mkdtemp()) / "cmudict")
        prepare(PrepareRequest("cmudict", Path(prepared)))
    models = args.models.split(",")
    results = {}
    for batch_size in map(int, args.batches.split(",")):
        runs: dict[str, list[dict]] = {model: [] for model in models}
        peer_runs: list[dict] = []
        for _ in range(args.repeats):  # alternate, so all see the same machine load
            for model in models:
                runs[model].append(measure(prepared, model, batch_size, args.bf16))
            if peer == "measure":
                steps = str(PEER_STEPS.get(batch_size, 40))
                line = peer_sh(
                    args.peer_bench, "train", "hard_attention_lstm", str(batch_size), steps
                )
                peer_runs.append(line)
        row = {}
        for model in models:
            seconds = statistics.median(r["seconds_per_update"] for r in runs[model])
            row[model] = {
                "seconds_per_update": round(seconds, 4),
                "examples_per_s": round(
                    statistics.median(r["examples_per_s"] for r in runs[model]), 1
                ),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs[model])),
                "parameters": runs[model][0]["parameters"],
                "runs_seconds_per_update": [round(r["seconds_per_update"], 4) for r in runs[model]],
            }
        if "lstm" in row:
            base = row["lstm"]["seconds_per_update"]
            for model in models:
                row[model]["over_lstm"] = round(row[model]["seconds_per_update"] / base, 2)
            if "hard" in row:
                row["hard"]["meets_goal"] = row["hard"]["over_lstm"] <= GOAL
        if peer_runs:
            peer_rate = statistics.median(r["examples_per_s"] for r in peer_runs)
            row["peer_hard"] = {
                "examples_per_s": round(peer_rate, 1),
                "runs_examples_per_s": [r["examples_per_s"] for r in peer_runs],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in peer_runs),
            }
            for model in models if not args.bf16 else ():  # the peer runs float32 only
                if model.startswith("hard"):  # hard_monotonic too: the peer has no such model
                    row[model]["over_peer_hard"] = round(
                        row[model]["examples_per_s"] / peer_rate, 2
                    )
        results[f"b{batch_size}"] = row
    print(
        json.dumps(
            {
                "benchmark": "hard_attention_cost",
                "threads": 2,
                "cpus": os.cpu_count(),
                "bf16": args.bf16,
                "goal_hard_over_lstm": GOAL,
                "peer": "yoyodyne 0.5.27 hard_attention_lstm, measured by peer.sh in this run"
                if peer == "measure"
                else "not measured (--peer none, or peer.sh not set up)",
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
