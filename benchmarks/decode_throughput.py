"""Decoding throughput (words/s) on the CMUdict test split, greedy and beam 5, batch 256.

Decodes with checkpoints given by `--lstm` and `--transformer` (run directories or .pt
files). Without them it first trains each model briefly (`--train-updates` updates: the
LSTM in bf16 on batches of 128, the transformer in float32 on batches of 400) so that outputs have
realistic lengths: an untrained model runs every hypothesis to its length limit. A model
trained with bf16 decodes with bf16 autocast, as `transduce decode` does. The shapes are
those of ../shared/BENCHMARKS.md (LSTM: embeddings 200, encoder 2 x 400, decoder 400;
transformer: 4 + 4 layers, d 256, 4 heads, ff 1024). Words are the test split's distinct
words (12,605 for the embedded CMUdict). Prints one JSON line with the median of
`--repeats` timings, 2 threads.

No peer figure: `../shared/peer-bench/peer.sh` measures the peer's training only, and a
peer number from another machine or day is no baseline (the machines differ), so this
script prints ours alone until the peer's decoding can be measured side by side.

    python benchmarks/decode_throughput.py [--lstm RUN] [--transformer RUN] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def train_briefly(family: str, prepared: str, updates: int) -> str:
    from transduce import config as configuration
    from transduce.precision import bf16_works
    from transduce.training import Trainer

    model = (
        {
            "name": "lstm",
            "embedding_dim": 200,
            "encoder_layers": 2,
            "encoder_size": 400,
            "decoder_size": 400,
        }
        if family == "lstm"
        else {
            "name": "transformer",
            "encoder_layers": 4,
            "decoder_layers": 4,
            "d_model": 256,
            "heads": 4,
            "feedforward": 1024,
        }
    )
    train = {
        "batch_size": 128,
        "max_updates": updates,
        # bf16 where this CPU runs a bfloat16 LSTM (an AVX2-only one does not)
        "precision": "bf16" if bf16_works("cpu") else "fp32",
        "threads": 2,
        "select_on": "wer",
    }
    if family == "transformer":
        schedule = {"type": "inverse_sqrt", "warmup": 200}
        train.update(batch_size=400, precision="fp32", schedule=schedule)
    run = Path(tempfile.mkdtemp()) / family
    Trainer(
        configuration.parse({"data": {"prepared": prepared}, "model": model, "train": train}), run
    ).run()
    print(f"trained {family}: {run} (reuse with --{family} {run})", file=sys.stderr)
    return str(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lstm")
    parser.add_argument("--transformer")
    parser.add_argument(
        "--prepared", help="a prepared CMUdict directory (default: prepare the embedded one)"
    )
    parser.add_argument("--train-updates", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from transduce import checkpoint
    from transduce.config import DecodeConfig
    from transduce.data.dataset import eval_set, load_prepared
    from transduce.data.prepare import PrepareRequest, prepare
    from transduce.decoding import decode_all
    from transduce.inference import Transducer

    torch.set_num_threads(2)
    prepared = args.prepared
    if prepared is None and not (args.lstm and args.transformer):
        prepared = str(Path(tempfile.mkdtemp()) / "cmudict")
        prepare(PrepareRequest("cmudict", Path(prepared)))
    runs = {
        "lstm": args.lstm or train_briefly("lstm", prepared, args.train_updates),
        "transformer": args.transformer
        or train_briefly("transformer", prepared, args.train_updates),
    }
    results = {}
    for family, run in runs.items():
        payload = checkpoint.load(run)
        transducer = Transducer.from_checkpoint(payload)
        data = load_prepared(
            prepared or payload["config"]["data"]["prepared"] or Path(run) / "data"
        )
        words = eval_set(data.splits["test"]).sources
        ids = [transducer.source_vocab.encode(w) for w in words]
        for beam in (1, 5):
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                with transducer.autocast():
                    decode_all(transducer.model, ids, DecodeConfig(beam=beam), "cpu")
                times.append(time.perf_counter() - start)
            rate = len(words) / statistics.median(times)
            results[f"{family}_beam{beam}"] = {
                "words_per_s": round(rate, 1),
                "seconds_runs": [round(t, 2) for t in times],
            }
    header = {
        "benchmark": "decode_throughput",
        "words": len(words),
        "batch": 256,
        "threads": 2,
        "peer": "not measured: peer.sh measures the peer's training only",
    }
    print(json.dumps({**header, "cpus": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
