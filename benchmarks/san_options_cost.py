"""What the self-attention options of Dufter et al. (2020) cost per training update.

The `san_tagger` recipes `paper/dufter2020/` (UD settings of Table 1b: 4 layers
of 4 heads, t = 60, batch 32) train on the same UD English-EWT batches in one process,
alternating update by update (after a warm-up of each), with the trainer's own
`Trainer.update`. For each option the median seconds per update and the median of
the per-batch ratios to SAN+PE[add] are reported, with the parameter count. fp32, 2
threads; prints one JSON line.

    python benchmarks/san_options_cost.py --prepared DIR [--updates 40] [--variants ...]

DIR: `transduce prepare conllu --train en_ewt-ud-train.conllu --dev en_ewt-ud-dev.conllu
--test en_ewt-ud-test.conllu --out DIR` (the files of ../shared/data/ud/UD_English-EWT).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from train_throughput import WARMUP, trainer_setup  # this folder is on sys.path

from transduce import config as configuration

VARIANTS = ("pe-add", "p", "r", "p-r", "temp", "conv", "conv2d")
BASE = "pe-add"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", required=True, help="a prepared UD EWT directory")
    parser.add_argument("--updates", type=int, default=40, help="timed updates")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = args.variants.split(",")
    if BASE not in variants:
        variants.insert(0, BASE)
    runs = {}
    for name in variants:
        # composed with its bases (the variants state only what differs), data not needed
        _, recipe = configuration.load(f"paper/dufter2020/ewt-san-{name}", check_data=False)
        recipe["data"] = {"prepared": args.prepared, "vocab_fraction": 0.5}
        recipe["train"] = {**recipe["train"], "threads": 2}
        runs[name] = trainer_setup(recipe)
    plan = runs[BASE][-1]  # the same batches for all (same data, seed and batch size)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for number, indices in enumerate(plan[: WARMUP + args.updates], 1):
        for name, (trainer, _loaded, _model, _optimizer, _schedule, _) in runs.items():
            start = time.perf_counter()
            trainer.update(indices, number)
            if number > WARMUP:
                times[name].append(time.perf_counter() - start)
    report = {
        "benchmark": "san_options_cost",
        "threads": 2,
        "cpus": os.cpu_count(),
        "batch": runs[BASE][0].config.train.batch_size,
        "updates": args.updates,
        "variants": {
            name: {
                "seconds_per_update": round(statistics.median(times[name]), 4),
                "over_pe_add": round(
                    statistics.median(b / a for a, b in zip(times[BASE], times[name])), 3
                ),
                "parameters": runs[name][2].parameter_count(),
            }
            for name in runs
        },
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
