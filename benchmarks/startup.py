"""Start-up time of the command line: `transduce --version`, a TAB of shell completion
and `transduce score --help` (none of them needs torch; target: under 0.5 s median for
the first two). Prints one JSON line with the median of several runs of each.

With `--training`, also what a process that trains pays before its first update, in CPU
seconds of fresh processes (median of the runs; CPU time, so that other jobs on the
machine inflate it less than wall time). In one `python -c` process: `import torch`;
then constructing and stepping the Adam that training uses (`transduce.optimizers.Adam`,
which is PyTorch's without its import of `torch._dynamo`; the JSON says whether it
imported TorchDynamo all the same, `optimizer_imports_dynamo`); then `import torch._dynamo`,
what `torch.optim.Adam` would have cost on top (`dynamo_import_cpu_s`; near 0 where the
optimizer imported it). In processes of their own: a whole toy `transduce
train` (`small/g2p-lstm`, the soft-attention LSTM that `small/g2p` was until 2026-12-07, so
the numbers stay comparable; a 200-word reversal TSV, 12 updates, one validation, the test
split decoded),
with the CPU time of all its threads. These are the costs the test suite pays once per
process it starts (README, Development).

    python benchmarks/startup.py [--runs 7] [--training]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.5


def seconds(command: list[str], env: dict[str, str], runs: int) -> float:
    """The median wall time of `command` over `runs` runs (after one warm-up run)."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


# Run in a fresh interpreter: CPU seconds of each import, and whether constructing an
# optimizer imported TorchDynamo.
IMPORTS = """
import json, sys, time
start = time.process_time()
import torch
after_torch = time.process_time()
from transduce import optimizers
parameter = torch.nn.Parameter(torch.zeros(1))
optimizer = optimizers.Adam([parameter])
parameter.grad = torch.ones(1)
optimizer.step()
optimizer.zero_grad()
after_optimizer = time.process_time()
imported = "torch._dynamo" in sys.modules
import torch._dynamo  # nothing more to do if the optimizer imported it
after_dynamo = time.process_time()
print(json.dumps({"torch": after_torch - start, "optimizer_imports_dynamo": imported,
                  "optimizer": after_optimizer - after_torch,
                  "dynamo": after_dynamo - after_optimizer}))
"""


def children_cpu() -> float:
    """CPU seconds (user + system) of the waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def toy_lines(count: int = 200, seed: int = 1) -> list[str]:
    """`count` random words of 3 to 7 letters, each with its reversal, as TSV lines."""
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefgh", k=rng.randint(3, 7))) for _ in range(count)]
    return [f"{w}\t{' '.join(reversed(w))}" for w in words]


def training(base: list[str], env: dict[str, str], runs: int) -> dict[str, object]:
    """Median CPU seconds of the imports (in `python -c`) and of a toy `transduce train`."""
    imports = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", IMPORTS], env=env, capture_output=True, text=True
        )
        if out.returncode != 0:
            sys.exit(f"startup: the import measurement failed: {out.stderr.strip()}")
        imports.append(json.loads(out.stdout))
    trains = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "toy.tsv")
        data.write_text("\n".join(toy_lines()) + "\n", encoding="utf-8")
        for run in range(runs):
            command = [*base, "train", "--config", "small/g2p-lstm",
                       "--out", str(Path(tmp, f"run{run}")),
                       "--set", f"data.train=[{data}]", "--set", "data.dev=null",
                       "--set", "data.test=null", "--set", "train.max_updates=12",
                       "--set", "train.validate_every=12"]  # fmt: skip
            before = children_cpu()
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"startup: the toy training failed: {done.stderr.strip()}")
            trains.append(children_cpu() - before)
    return {
        "import_torch_cpu_s": statistics.median(r["torch"] for r in imports),
        "optimizer_imports_dynamo": all(r["optimizer_imports_dynamo"] for r in imports),
        "optimizer_cpu_s": statistics.median(r["optimizer"] for r in imports),
        "dynamo_import_cpu_s": statistics.median(r["dynamo"] for r in imports),
        "toy_train_cpu_s": statistics.median(trains),
        "toy_train_cpu_s_all": [round(t, 2) for t in trains],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--training", action="store_true", help="also the start-up costs of a training process"
    )
    args = parser.parse_args()
    program = shutil.which("transduce") or sys.executable
    base = [program] if program != sys.executable else [sys.executable, "-m", "transduce"]
    env = dict(os.environ)
    completion = dict(env, _TRANSDUCE_COMPLETE="complete_bash", COMP_WORDS="transduce sc",
                      COMP_CWORD="1")  # fmt: skip
    result = {
        "benchmark": "startup",
        "version_s": seconds([*base, "--version"], env, args.runs),
        "completion_s": seconds(base, completion, args.runs),
        "score_help_s": seconds([*base, "score", "--help"], env, args.runs),
        "target_s": TARGET_SECONDS,
        "runs": args.runs,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        # False where PYTHONDONTWRITEBYTECODE is set (as on the development machine): no
        # bytecode is written, so where no __pycache__ exists yet every process compiles the
        # package's sources again, about 0.1 s of CPU here
        "bytecode_cached": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
    }
    result["meets_target"] = max(result["version_s"], result["completion_s"]) < TARGET_SECONDS
    if args.training:
        result["training"] = training(base, env, args.runs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
