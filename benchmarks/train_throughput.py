"""Training throughput on CMUdict: our trainer, the peer and plain PyTorch loops, side by side.

Configurations (../shared/BENCHMARKS.md): the attentive LSTM (embeddings 200, 2-layer
bidirectional encoder of 400, decoder 400, no input feeding) at batch 20 and 256, and the
transformer (4 + 4 layers, d 256, 4 heads, ff 1024) at batch 400; 2 threads.

* ours: `Trainer.update` (the trainer's own update: length-bucketed batches, fused Adam,
  bf16 autocast where the row says so) on the embedded CMUdict's training split;
* ceiling: a plain loop (forward, backward, Adam; bf16 autocast in the bf16 row) on
  batches of shuffled training examples padded to their longest member, the decoder over
  the whole target in one call and the attention in one bmm (LSTM), or `nn.Transformer`
  with pre-norm; no dropout (it costs time, so the ceiling stays an upper bound; ours
  trains with dropout 0.4 and 0.3);
* peer and plain: yoyodyne 0.5.27 (`peer.sh train`) and the shared plain PyTorch loop
  (`peer.sh raw`: lstm_fast, transformer), from `../shared/peer-bench/peer.sh` (run
  `bash peer.sh setup` once first). Never a constant: `--peer measure` (the default where
  peer.sh is set up) measures them in this run, between our repeats, so that all see the
  same machine; `--peer-file FILE` takes the JSON lines that peer.sh printed just before
  (the report says which, and the file's age); `--peer none` leaves them out.

* compiled (`--compile`): ours with `train.compile` (transduce.compiling), warmed up for
  `COMPILED_WARMUP` updates so that the compilations of new batch shapes fall before the
  clock starts; its row has `compiled_over_ours`, the ratio of the two medians. Ours and
  compiled time the same batches, those from number `COMPILED_WARMUP` on (ours warms up
  on the `WARMUP` before them).

Each of ours, the ceiling (and compiled) runs in its own process (so its peak RSS is its
own) `--repeats` times, alternating, and reports the median examples/s; the peer and its
plain loop run `--peer-repeats` times (default 1: one peer measurement takes minutes). A
bf16 row is skipped where this CPU cannot run an LSTM in bfloat16
(`transduce.precision.bf16_works`).
Prints one JSON line.

    python benchmarks/train_throughput.py [--repeats 3] [--rows lstm_b20,lstm_b256,...]
        [--compile] [--peer measure|none | --peer-file FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = {
    # name: (model, batch, updates, bf16)
    "lstm_b20": ("lstm", 20, 120, False),
    "lstm_b256": ("lstm", 256, 16, False),
    "lstm_b256_bf16": ("lstm", 256, 16, True),
    "transformer_b400": ("transformer", 400, 10, False),
}
# peer.sh's names of the same configurations: (yoyodyne model, plain loop model)
PEER_MODELS = {"lstm": ("lstm", "lstm_fast"), "transformer": ("transformer", "transformer")}
# Updates per peer measurement: peer.sh times the steady state after 20 warm-up batches.
PEER_STEPS = {"lstm_b20": 120, "lstm_b256": 40, "lstm_b256_bf16": 40, "transformer_b400": 40}
TARGET_FACTOR = 4.0  # ../shared/BENCHMARKS.md: at least 4x the peer for every model
WARMUP = 3
COMPILED_WARMUP = 20  # as benchmarks/device_training.py: compilations before the clock


# The LSTM of BENCHMARKS.md (the peer's sizes), shared by the benchmarks of this folder.
LSTM_SIZES = {
    "embedding_dim": 200,
    "encoder_layers": 2,
    "encoder_size": 400,
    "decoder_layers": 1,
    "decoder_size": 400,
    "dropout": 0.4,
}


def lstm_config():
    from transduce.models.lstm import LSTMConfig

    return LSTMConfig(**LSTM_SIZES)


def transformer_config():
    from transduce.models.transformer import TransformerConfig

    return TransformerConfig(
        encoder_layers=4, decoder_layers=4, d_model=256, heads=4, feedforward=1024, dropout=0.3
    )


def embedded_cmudict(prepared: str | None) -> str:
    """`prepared`, or the embedded CMUdict prepared into a temporary directory."""
    if prepared is not None:
        return prepared
    from transduce.data.prepare import PrepareRequest, prepare

    directory = Path(tempfile.mkdtemp()) / "cmudict"
    prepare(PrepareRequest("cmudict", directory))
    return str(directory)


def trainer_setup(data: dict):
    """The trainer of the recipe `data` (a tagger's too), ready to call `update`: the
    trainer, its loaded data, model (seed 1, in training mode), optimizer, schedule and
    first epoch's batches."""
    import torch

    from transduce import config as configuration
    from transduce.schedules import Schedule
    from transduce.training import Trainer

    config = configuration.parse(data)
    config.train.seed = 1
    trainer = Trainer(config, Path(tempfile.mkdtemp()))
    state = trainer.setup()  # as `Trainer.run` sets up (threads, heap)
    torch.set_num_threads(2)
    state.schedule = Schedule(trainer.config.train.schedule, state.optimizer, 1e-3)
    state.model.train()
    return (
        trainer,
        state.data,
        state.model,
        state.optimizer,
        state.schedule,
        trainer.batches(state.data, 0),
    )


def timed_updates(
    data: dict, updates: int, warmup: int = WARMUP, start: int | None = None
) -> tuple[float, float, int]:
    """Train the recipe `data` with the trainer's own `Trainer.update`: `warmup` updates,
    then `updates` timed ones, the batches from `start` (default: right after the warm-up;
    the same `start` times the same batches). Returns examples/s, seconds per update and
    the parameter count."""
    trainer, _, model, _, _, batches = trainer_setup(data)
    first = warmup if start is None else start
    for number, indices in enumerate(batches[first - warmup : first], 1):
        trainer.update(indices, number)
    clock, examples = time.perf_counter(), 0
    for number, indices in enumerate(batches[first : first + updates], warmup + 1):
        trainer.update(indices, number)
        examples += len(indices)
    seconds = time.perf_counter() - clock
    return examples / seconds, seconds / updates, model.parameter_count()


def ours(prepared: str, row: str, compiled: bool = False) -> float:
    from transduce import config as configuration

    family, batch_size, updates, bf16 = ROWS[row]
    data = {
        "data": {"prepared": prepared},
        "model": {
            "name": family,
            **configuration.to_dict(lstm_config() if family == "lstm" else transformer_config()),
        },
        "train": {
            "batch_size": batch_size,
            "precision": "bf16" if bf16 else "fp32",
            "threads": 2,
            "compile": compiled,
        },
    }
    # ours and compiled time the same batches (from COMPILED_WARMUP on): bucketed batches
    # differ in length, so other batches would be another workload
    warmup = COMPILED_WARMUP if compiled else WARMUP
    return timed_updates(data, updates, warmup, start=COMPILED_WARMUP)[0]


def ceiling(prepared: str, row: str) -> float:
    import torch
    from torch import nn

    from transduce.data.batching import collate
    from transduce.data.dataset import build_vocabs, load_prepared

    family, batch_size, updates, bf16 = ROWS[row]
    torch.set_num_threads(2)
    torch.manual_seed(1)
    splits = load_prepared(prepared)
    pairs = [p for p in splits.splits["train"] if p.target]
    source_vocab, target_vocab = build_vocabs(pairs)
    data = [(source_vocab.encode(p.source), target_vocab.encode(p.target)) for p in pairs]
    rng = random.Random(1)
    rng.shuffle(data)
    V_s, V_t = len(source_vocab), len(target_vocab)
    if family == "lstm":

        class Plain(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.src, self.tgt = nn.Embedding(V_s, 200), nn.Embedding(V_t, 200)
                self.encoder = nn.LSTM(200, 400, num_layers=2, bidirectional=True, batch_first=True)
                self.decoder = nn.LSTM(200, 400, batch_first=True)
                self.attention = nn.Linear(800, 400, bias=False)
                self.combine = nn.Linear(1200, 1200)
                self.out = nn.Linear(1200, V_t)

            def forward(self, batch):
                memory, _ = self.encoder(self.src(batch.source))  # B x S x 800
                states, _ = self.decoder(self.tgt(batch.target_in))  # B x T x 400
                scores = torch.bmm(states, self.attention(memory).transpose(1, 2))  # B x T x S
                alpha = torch.softmax(
                    scores.masked_fill(~batch.source_mask[:, None, :], float("-inf")), -1
                )
                combined = torch.tanh(
                    self.combine(torch.cat([states, torch.bmm(alpha, memory)], -1))
                )
                return torch.log_softmax(self.out(combined), -1)

        model = Plain()
    else:

        class Plain(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.src, self.tgt = nn.Embedding(V_s, 256), nn.Embedding(V_t, 256)
                self.net = nn.Transformer(
                    256, 4, 4, 4, 1024, 0.0, batch_first=True, norm_first=True
                )
                self.out = nn.Linear(256, V_t)

            def forward(self, batch):
                T = batch.target_in.shape[1]
                causal = nn.Transformer.generate_square_subsequent_mask(T)
                pad = ~batch.source_mask
                h = self.net(
                    self.src(batch.source) * 16,
                    self.tgt(batch.target_in) * 16,
                    tgt_mask=causal,
                    src_key_padding_mask=pad,
                    memory_key_padding_mask=pad,
                )
                return torch.log_softmax(self.out(h), -1)

        model = Plain()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    model.train()

    def step(start: int) -> int:
        chunk = data[start : start + batch_size]
        batch = collate([s for s, _ in chunk], [t for _, t in chunk])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            log_probs = model(batch)
            nll = -log_probs.gather(-1, batch.target_out.unsqueeze(-1)).squeeze(-1)
            loss = (nll * batch.target_mask).sum() / batch.target_mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return len(chunk)

    for i in range(WARMUP):
        step(i * batch_size)
    start, examples = time.perf_counter(), 0
    for i in range(WARMUP, WARMUP + updates):
        examples += step(i * batch_size)
    return examples / (time.perf_counter() - start)


def child(kind: str, prepared: str, row: str) -> None:
    if kind == "compiled":
        rate = ours(prepared, row, compiled=True)
    else:
        rate = (ours if kind == "ours" else ceiling)(prepared, row)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB (Linux: KB)
    print(json.dumps({"examples_per_s": rate, "peak_rss_mb": rss}))


def measure(kind: str, prepared: str, row: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, prepared, row],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_peer_bench() -> Path | None:
    """../shared/peer-bench beside the checkout, or $TRANSDUCE_PEER_BENCH."""
    env = os.environ.get("TRANSDUCE_PEER_BENCH")
    here = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "peer-bench"
    return here if (here / "peer.sh").is_file() else None


def peer_is_set_up() -> bool:
    """Whether `peer.sh setup` has made its virtualenv (peer.sh's own default place)."""
    work = Path(os.environ.get("PEER_BENCH_DIR", "/tmp/peer-bench"))
    return (work / ".venv" / "bin" / "activate").is_file()


def peer_sh(bench: Path, *args: str) -> dict:
    """One peer.sh measurement: its JSON line."""
    out = subprocess.run(
        ["bash", str(bench / "peer.sh"), *args], capture_output=True, text=True, check=False
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"peer.sh {' '.join(args)} failed ({out.returncode}): {out.stderr[-500:]}")
    return json.loads(lines[-1])


def peer_args(row: str) -> tuple[list[str], list[str]]:
    """peer.sh arguments of the peer and of the plain loop for one row."""
    family, batch, _, bf16 = ROWS[row]
    yoyodyne, plain = PEER_MODELS[family]
    steps = str(PEER_STEPS[row])
    return (
        ["train", yoyodyne, str(batch), steps],  # the peer has no bf16: fp32 in every row
        ["raw", plain, str(batch), steps, *(["--bf16"] if bf16 else [])],
    )


def peer_from_file(path: Path, row: str) -> tuple[dict | None, dict | None]:
    """The peer's and the plain loop's lines of `row` in a file of peer.sh output."""
    family, batch, _, bf16 = ROWS[row]
    yoyodyne, plain = PEER_MODELS[family]
    peer = raw = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("batch") != batch:
            continue
        if entry.get("peer") == "yoyodyne" and entry.get("model") == yoyodyne:
            peer = entry  # the last line of each kind wins
        elif entry.get("mode") == "train" and entry.get("model") == plain + (
            "+bf16" if bf16 else ""
        ):
            raw = entry
    return peer, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer-repeats", type=int, default=1)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument(
        "--prepared", help="a prepared CMUdict directory (default: prepare the embedded one)"
    )
    parser.add_argument(
        "--peer",
        choices=("measure", "none"),
        help="measure the peer and the plain loop in this run (default where peer.sh is set "
        "up), or leave them out",
    )
    parser.add_argument("--peer-file", type=Path, help="JSON lines printed by peer.sh just before")
    parser.add_argument("--peer-bench", type=Path, default=default_peer_bench())
    parser.add_argument(
        "--compile", action="store_true", help="also measure ours with train.compile"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from transduce.precision import bf16_works

    mode = args.peer or (
        "file" if args.peer_file else "measure" if args.peer_bench and peer_is_set_up() else "none"
    )
    if args.peer and args.peer_file:
        raise SystemExit("--peer and --peer-file: give one (a file is read, --peer measures)")
    if mode == "measure" and not (args.peer_bench and peer_is_set_up()):
        raise SystemExit("--peer measure: run `bash ../shared/peer-bench/peer.sh setup` first")
    prepared = embedded_cmudict(args.prepared)
    results = {}
    for row in args.rows.split(","):
        if ROWS[row][3] and not bf16_works("cpu"):
            results[row] = {"skipped": "this CPU cannot run an LSTM in bfloat16 (oneDNN)"}
            continue
        runs: dict[str, list[float]] = {
            "ours": [],
            "ceiling": [],
            "compiled": [],
            "peer": [],
            "plain": [],
        }
        rss: dict[str, list[float]] = {"ours": [], "ceiling": [], "compiled": [], "peer": []}
        kinds = ("ours", "ceiling", "compiled") if args.compile else ("ours", "ceiling")
        for repeat in range(args.repeats):  # alternate, so all see the same machine load
            for kind in kinds:
                measured = measure(kind, prepared, row)
                runs[kind].append(measured["examples_per_s"])
                rss[kind].append(measured["peak_rss_mb"])
            if mode == "measure" and repeat < args.peer_repeats:
                peer_line, plain_line = (peer_sh(args.peer_bench, *a) for a in peer_args(row))
                runs["peer"].append(peer_line["examples_per_s"])
                rss["peer"].append(peer_line["peak_rss_mb"])
                runs["plain"].append(plain_line["examples_per_s"])
        if mode == "file":
            peer_line, plain_line = peer_from_file(args.peer_file, row)
            if peer_line:
                runs["peer"].append(peer_line["examples_per_s"])
                rss["peer"].append(peer_line["peak_rss_mb"])
            if plain_line:
                runs["plain"].append(plain_line["examples_per_s"])
        median = {k: statistics.median(v) if v else None for k, v in runs.items()}
        entry = {
            "ours_examples_per_s": round(median["ours"], 1),
            "ceiling_examples_per_s": round(median["ceiling"], 1),
            "ours_over_ceiling": round(median["ours"] / median["ceiling"], 2),
            "ours_runs": [round(r, 1) for r in runs["ours"]],
            "ceiling_runs": [round(r, 1) for r in runs["ceiling"]],
            "ours_peak_rss_mb": round(max(rss["ours"])),
        }
        if median["compiled"]:
            entry |= {
                "compiled_examples_per_s": round(median["compiled"], 1),
                "compiled_over_ours": round(median["compiled"] / median["ours"], 2),
                "compiled_runs": [round(r, 1) for r in runs["compiled"]],
                "compiled_peak_rss_mb": round(max(rss["compiled"])),
            }
        if median["peer"]:
            entry |= {
                "peer_examples_per_s": median["peer"],
                "ours_over_peer": round(median["ours"] / median["peer"], 2),
                "peer_peak_rss_mb": max(rss["peer"]),
                "target": f"ours >= {TARGET_FACTOR} x peer and >= 0.9 x ceiling",
                "meets_target": median["ours"] >= TARGET_FACTOR * median["peer"]
                and median["ours"] >= 0.9 * median["ceiling"],
            }
        if median["plain"]:
            entry |= {
                "plain_examples_per_s": median["plain"],
                "ours_over_plain": round(median["ours"] / median["plain"], 2),
            }
        results[row] = entry
    if mode == "file":
        age = time.time() - args.peer_file.stat().st_mtime
        peer_source = f"file {args.peer_file}, written {age / 60:.0f} minutes before this report"
    else:
        peer_source = {
            "measure": f"measured in this run with {args.peer_bench}/peer.sh",
            "none": "not measured (--peer none, or peer.sh not set up)",
        }[mode]
    print(
        json.dumps(
            {
                "benchmark": "train_throughput",
                "threads": 2,
                "cpus": os.cpu_count(),
                "cpu_capability": __import__("torch").backends.cpu.get_cpu_capability(),
                "peer": peer_source,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
