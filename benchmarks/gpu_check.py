"""Check a GPU machine in minutes, in one command, streaming what it finds.

    python benchmarks/gpu_check.py [--device cuda|cpu] [--tiny] [--out DIR] [--work DIR]
        [--minutes 8] [--data-root DIR] [--workers 1,4,8]

On a machine with one GPU and no network, within `--minutes` (each part gets a share of
the time left, and is stopped at it), in this order:

1. env: the GPU, its driver, torch and its CUDA, the cores.
2. tests: `python -m pytest -m cuda -v` (tests/test_cuda.py).
3. main: the main job, `transduce train --config g2p` (its wall time, training time, test
   WER and PER), with the GPU's utilization sampled by `nvidia-smi` every 0.5 s: the busy
   fraction is the mean utilization over the training window.
4. compile: the main job again with `train.compile: true` (transduce.compiling: the
   model's forward through torch.compile, the same numbers): wall time, training time,
   test scores and busy fraction beside the main part's.
5. bench: `benchmarks/device_training.py` for the LSTM and the transformer recipes in
   fp32 and bf16 (examples/s, the median of 3 runs; peak memory; busy fraction).
6. grid: short runs (`small/g2p-lstm`, which was `small/g2p` until that became hard
   attention, so the numbers stay comparable; 200 updates, on 1,000 CMUdict words) as
   `experiment run` cells, with 1, 4 and 8 at once on the one GPU (`--workers N
   --per-gpu N`): runs per hour, and the GPU's mean utilization meanwhile.
7. issue16: the Rios et al. (2021) transformer on CMUdict without and with the
   monotonicity loss (λ = 0 and 0.1, seed 1; `rios2021-g2p-transformer`), both at once,
   for the time left (with `--data-root` holding g2p-wu2018-cmudict-nettalk; the runs
   stop as at Ctrl-C and resume when the same command is run with the same `--work`).
   `--rios-experiment rios2021-g2p-rnn --rios-cells rnn.cmudict.seed1,...` runs other
   cells (all at once), e.g. the RNN's CMUdict half of issue 31; each cell's updates per
   second are reported, to say how long a whole run needs.

Then the summary table, printed and in DIR/summary.md.

`--device cpu --tiny` runs every part on the CPU with tiny sizes (the CUDA tests are then
all skipped, and nothing samples a GPU), in under 3 minutes on 2 cores: the check of this
script itself, so that its first GPU run is not its first run.

Files in --out DIR (default gpu-check/), each written as soon as its part has a result,
so a run cut short still reports what finished:

    results.jsonl  one JSON line per result ({"part": "env" | "tests" | "main" | "bench" |
                   "grid" | "issue16", ...})
    summary.md     the summary table so far (complete at the end)
    log.txt        every command run and what it printed
    tests.log      the output of pytest -m cuda -v

Run directories, checkpoints and the prepared data go to --work (default DIR/work).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PARTS = ("env", "tests", "main", "compile", "bench", "grid", "issue16")
# each part's most seconds: on a GPU, and with --tiny
CAPS = {
    "tests": (150, 90),
    "main": (90, 60),
    "compile": (120, 100),  # the first compilation (cold cache) is part of its wall time
    "bench": (150, 60),
    "grid": (110, 60),
}
RIOS_DATA = "g2p-wu2018-cmudict-nettalk"
RIOS_CELLS = ("transformer.cmudict.seed1", "transformer-mono.cmudict.seed1")


class Check:
    """The output files, the clock, and the results so far."""

    def __init__(self, out: Path, work: Path, deadline: float) -> None:
        self.out, self.work, self.deadline = out, work, deadline
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.results: list[dict[str, Any]] = []
        self.started = time.monotonic()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def result(self, part: str, **values: Any) -> dict[str, Any]:
        line = {"part": part, "at_s": round(time.monotonic() - self.started, 1), **values}
        self.results.append(line)
        with open(self.out / "results.jsonl", "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)
        (self.out / "summary.md").write_text(summary(self.results), encoding="utf-8")
        return line

    def log(self, text: str) -> None:
        with open(self.out / "log.txt", "a", encoding="utf-8") as file:
            file.write(text if text.endswith("\n") else text + "\n")

    def run(
        self, command: list[Any], seconds: float, log: Path | None = None, **kwargs: Any
    ) -> tuple[int | None, float, str]:
        """Run `command` for at most `seconds` (then Ctrl-C, then a kill): its exit status
        (None: stopped at the limit), its wall time, and what it printed (also in the log,
        line by line as it comes; `self.times` holds when each line came)."""
        self.log(f"$ {' '.join(map(str, command))}   (at most {seconds:.0f} s)")
        start = time.monotonic()
        process = subprocess.Popen(
            [str(c) for c in command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            start_new_session=True,
            **kwargs,
        )
        lines: list[str] = []
        self.times: list[tuple[float, str]] = []
        target = log or self.out / "log.txt"

        def read() -> None:
            assert process.stdout is not None
            with open(target, "a", encoding="utf-8") as file:
                for line in process.stdout:
                    lines.append(line)
                    self.times.append((time.monotonic(), line))
                    file.write(line)
                    file.flush()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code: int | None = process.wait(timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            code = None
            stop(process)
        except BaseException:  # Ctrl-C here: the child has a session of its own, stop it
            stop(process)
            raise
        reader.join(timeout=10)
        return code, time.monotonic() - start, "".join(lines)


def stop(process: subprocess.Popen, grace: float = 30) -> None:
    """Ctrl-C to its process group (the runs write last.pt), then after `grace` s a kill of the
    group and of every process it started: `experiment run` starts its cells in sessions of
    their own, outside the group, and they would otherwise finish their update first."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        gone = (ProcessLookupError, PermissionError)  # PermissionError: not ours (any more)
        # The group stopped first: a child that ends meanwhile stays a zombie of its
        # stopped parent, so its PID is not freed and reused before the kills below.
        with contextlib.suppress(*gone):
            os.killpg(process.pid, signal.SIGSTOP)
        for pid in reversed(descendants(process.pid)):  # the deepest first
            with contextlib.suppress(*gone):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(*gone):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes that `pid` started, and those they started, from Linux's /proc
    (`proc`/PID/stat, whose 4th field is the parent); none where there is no /proc."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "PID (command)"
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not a process
            continue
    found: list[int] = []
    waiting = [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


class Sampler:
    """The GPU's utilization (%) and memory in use (MiB) every 0.5 s, by `nvidia-smi`,
    stamped with this process's clock (nothing where there is no nvidia-smi)."""

    def __init__(self, active: bool) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.process = None
        if active and shutil.which("nvidia-smi"):
            query = "--query-gpu=utilization.gpu,memory.used"
            self.process = subprocess.Popen(
                ["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "500"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            parts = [p.strip() for p in line.split(",")]
            with contextlib.suppress(ValueError, IndexError):
                self.samples.append((time.monotonic(), float(parts[0]), float(parts[1])))

    def busy(self, start: float, end: float) -> tuple[float | None, float | None, int]:
        """The mean utilization (0-1) and the most memory (MiB) between two times, and
        how many samples they are of."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if not inside:
            return None, None, 0
        return (
            round(statistics.mean(s[1] for s in inside) / 100, 3),
            max(s[2] for s in inside),
            len(inside),
        )

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def share(check: Check, part: str, tiny: bool, later: int) -> float:
    """The seconds `part` may take: its cap, or the time left less a minimal share for each
    of the `later` parts after it."""
    cap = CAPS[part][1 if tiny else 0]
    return max(5.0, min(cap, check.left() - 20 * later))


# ----------------------------------------------------------------------------- parts


def env_part(check: Check, device: str) -> None:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cores": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
        "device": device,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info.update(
            gpu=properties.name,
            gpus=torch.cuda.device_count(),
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            bf16=torch.cuda.is_bf16_supported(),
        )
    if shutil.which("nvidia-smi"):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        info["driver"] = done.stdout.strip().splitlines()[0] if done.stdout.strip() else None
    from transduce.version import __version__

    info["transduce"] = __version__
    check.result("env", **info)


def tests_part(check: Check, tiny: bool) -> None:
    seconds = share(check, "tests", tiny, later=4)
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-rs", "-p", "no:cacheprovider"]
    code, wall, text = check.run(command, seconds, log=check.out / "tests.log")
    outcomes = {"PASSED": 0, "FAILED": 0, "ERROR": 0, "SKIPPED": 0}
    failed = []
    for line in text.splitlines():
        if "::" in line:
            for word in outcomes:
                if f" {word}" in line:
                    outcomes[word] += 1
                    if word in ("FAILED", "ERROR"):
                        failed.append(line.split(" ")[0])
    check.result(
        "tests",
        exit=code,
        stopped_at_limit=code is None,
        seconds=round(wall, 1),
        passed=outcomes["PASSED"],
        failed=outcomes["FAILED"] + outcomes["ERROR"],
        skipped=outcomes["SKIPPED"],
        failures=failed[:20],
        last_line=text.strip().splitlines()[-1] if text.strip() else "",
    )


def main_part(check: Check, device: str, tiny: bool, sampler: Sampler, part: str = "main") -> None:
    """The main job (`part` "main"), or the same with `train.compile: true` ("compile")."""
    seconds = share(check, part, tiny, later=3 if part == "main" else 2)
    run = check.work / part
    shutil.rmtree(run, ignore_errors=True)
    command = [sys.executable, "-m", "transduce", "train", "--config", "g2p", "--out", run]
    command += ["--device", device]
    if part == "compile":
        command += ["--set", "train.compile=true"]
    if tiny:  # 10 updates on 1,000 words: the mechanics only
        train, dev, test = short_data(check)
        command += ["--set", "data.format=tsv"]
        command += ["--set", "data.options={source_unit: char, target_unit: symbol}"]
        for split, path in (("train", train), ("dev", dev), ("test", test)):
            command += ["--set", f"data.{split}=[{path}]"]
        command += ["--set", "train.max_updates=10", "--set", "train.validate_every=10"]
        command += ["--set", "train.batch_size=32", "--set", "train.threads=1"]
    start = time.monotonic()
    code, wall, _ = check.run(command, seconds)
    report: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    training = report.get("training_seconds")
    # the training window: from the note "training on ..." for its training_seconds
    marks = [t for t, line in check.times if "training on" in line]
    begin = marks[0] if marks else start
    busy, memory, samples = sampler.busy(begin, begin + (training or wall))
    whole, _, _ = sampler.busy(start, start + wall)
    check.result(
        part,
        exit=code,
        stopped_at_limit=code is None,
        wall_s=round(wall, 1),
        wall_seconds_own=report.get("wall_seconds"),
        training_s=None if training is None else round(training, 1),
        updates=report.get("updates"),
        device=report.get("device"),
        precision=report.get("precision"),
        test=report.get("test"),
        busy_training=busy,
        busy_whole_job=whole,
        gpu_memory_mib=memory,
        samples=samples,
        tiny=tiny,
    )


def bench_part(check: Check, device: str, tiny: bool) -> None:
    seconds = share(check, "bench", tiny, later=1)
    command = [sys.executable, REPO / "benchmarks" / "device_training.py", "--device", device]
    from transduce.precision import bf16_works

    # bf16 where the device runs it (not on GPUs before Ampere, nor CPUs without it)
    command += ["--precision", "fp32,bf16" if bf16_works(device) else "fp32"]
    if tiny:
        command += ["--updates", "3", "--repeats", "1", "--profile-updates", "2"]
    else:
        command += ["--updates", "30", "--repeats", "3", "--profile-updates", "5"]
    command += ["--prepared", str(prepared_cmudict(check))]
    code, _, text = check.run(command, seconds)
    summaries = 0
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if data.get("kind") == "summary":
                summaries += 1
                own = data["device"]
                check.result(
                    "bench",
                    recipe=data["recipe"],
                    precision=own["precision"],
                    device=own["device"],
                    examples_per_s=own["examples_per_s"],
                    runs=own["runs"],
                    peak_memory_mb=own["peak_memory_mb"],
                    busy_fraction=own.get("busy_fraction"),
                )
    if code != 0:
        check.result("bench", exit=code, stopped_at_limit=code is None, summaries=summaries)


def prepared_cmudict(check: Check) -> Path:
    """The embedded CMUdict, prepared once into the work directory."""
    directory = check.work / "cmudict"
    if not (directory / "manifest.json").is_file():
        shutil.rmtree(directory, ignore_errors=True)
        from transduce.data.prepare import PrepareRequest, prepare

        prepare(PrepareRequest("cmudict", directory))
    return directory


def short_data(check: Check) -> tuple[Path, Path, Path]:
    """Raw TSV files (word TAB phonemes) of the first 1,000 training words of the embedded
    CMUdict and 100 of its dev and test words: the data of the short runs."""
    prepared = prepared_cmudict(check)
    made = []
    for split, count in (("train", 1000), ("dev", 100), ("test", 100)):
        raw = check.work / f"short-{split}.tsv"
        lines = (prepared / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[:count]
        words = [line.split("\t") for line in lines]
        raw.write_text("".join(f"{w.replace(' ', '')}\t{p}\n" for w, p in words), "utf-8")
        made.append(raw)
    return made[0], made[1], made[2]


def grid_part(check: Check, device: str, tiny: bool, workers: list[int], sampler: Sampler) -> None:
    seconds = share(check, "grid", tiny, later=0 if tiny else 1)
    train, dev, test = short_data(check)
    updates, every = (20, 10) if tiny else (200, 100)
    end = time.monotonic() + seconds
    for count in workers:
        left = end - time.monotonic()
        if left < 10:
            check.result("grid", workers=count, skipped="no time left")
            continue
        cells = 2 * count
        experiment = check.work / f"short-{count}.yaml"
        settings = {
            "data.train": [str(train)],
            "data.dev": [str(dev)],
            "data.test": [str(test)],
            "train.max_updates": updates,
            "train.validate_every": every,
            "train.device": device,
            "train.precision": "fp32",
        }
        spec = {
            "systems": {"short": {"recipe": "small/g2p-lstm", "set": settings}},
            "seeds": list(range(1, cells + 1)),
            "metrics": ["wer"],
        }
        experiment.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
        out = check.work / f"grid-{count}"
        shutil.rmtree(out, ignore_errors=True)
        command = [sys.executable, "-m", "transduce", "experiment", "run", experiment]
        command += ["--out", out, "--workers", count, "-q"]
        command += ["--per-gpu", count] if device == "cuda" else ["--threads", "1"]
        start = time.monotonic()
        code, wall, _ = check.run(command, left)
        done = len(list(out.glob("runs/*/test.predictions")))
        busy, memory, samples = sampler.busy(start, start + wall)
        check.result(
            "grid",
            workers=count,
            cells=cells,
            done=done,
            exit=code,
            wall_s=round(wall, 1),
            runs_per_hour=round(done / wall * 3600) if done else 0,
            updates_per_run=updates,
            busy=busy,
            gpu_memory_mib=memory,
            samples=samples,
        )


def issue16_part(
    check: Check,
    device: str,
    data_root: Path | None,
    experiment: str = "rios2021-g2p-transformer",
    cells: tuple[str, ...] = RIOS_CELLS,
) -> None:
    seconds = check.left() - 10
    if data_root is None or not (data_root / RIOS_DATA).is_dir():
        check.result("issue16", skipped=f"no {RIOS_DATA} under --data-root")
        return
    if seconds < 30:
        check.result("issue16", skipped=f"{seconds:.0f} s left")
        return
    out = check.work / "issue16"
    command: list[Any] = [sys.executable, "-m", "transduce", "experiment", "run", experiment]
    command += ["--out", out, "--data-root", data_root, "--workers", str(len(cells)), "-q"]
    command += ["--per-gpu", str(len(cells))] if device == "cuda" else ["--threads", "1"]
    for cell in cells:
        command += ["--cells", cell]
    code, wall, _ = check.run(command, seconds)
    for cell in cells:
        report: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            report = json.loads((out / "runs" / cell / "train.json").read_text("utf-8"))
        history = report.get("history") or []
        training = report.get("training_seconds")
        updates = report.get("updates")
        check.result(
            "issue16",
            experiment=experiment,
            cell=cell,
            exit=code,
            wall_s=round(wall, 1),
            updates=updates,
            training_s=None if training is None else round(training, 1),
            updates_per_s=round(updates / training, 2) if updates and training else None,
            stop=report.get("stop"),
            last_dev=history[-1].get("dev_scores") if history else None,
            test=report.get("test"),
            resumable=str(out),
        )


# ---------------------------------------------------------------------------- summary


def summary(results: list[dict[str, Any]]) -> str:
    """The table of what was measured so far (Markdown)."""
    rows = []
    for r in results:
        part = r["part"]
        if "error" in r or isinstance(r.get("skipped"), str):  # failed, or no time or data
            what = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("part", "at_s"))
        elif part == "env":
            what = (
                f"{r.get('gpu', 'no GPU')}, driver {r.get('driver')}, torch {r['torch']} "
                f"(CUDA {r['torch_cuda']}), {r['cores']} cores"
            )
        elif part == "tests":
            what = f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped" + (
                f" ({', '.join(r['failures'])})" if r["failures"] else ""
            )
            what += ", stopped at its time limit" if r["stopped_at_limit"] else ""
        elif part in ("main", "compile") and "wall_s" in r:
            test = r.get("test") or {}
            scores = ", ".join(
                f"{k.upper()} {v:.2f}" for k, v in test.items() if k in ("wer", "per")
            )
            what = (
                f"wall {r['wall_s']} s, training {r['training_s']} s, {r['updates']} updates, "
                f"{r['device']} {r['precision']}"
                + (f", test {scores}" if scores else "")
                + f"; GPU busy {_percent(r['busy_training'])} in training, "
                f"{_percent(r['busy_whole_job'])} over the job"
            )
        elif part == "bench" and "recipe" in r:
            what = (
                f"{r['recipe']} {r['precision']} on {r['device']}: {r['examples_per_s']:,.0f} "
                f"examples/s (median of {len(r['runs'])}), peak {r['peak_memory_mb']} MB, "
                f"busy {_percent(r['busy_fraction'])} (profiler)"
            )
        elif part == "grid" and "cells" in r:
            what = (
                f"{r['workers']} at once: {r['done']}/{r['cells']} short runs in {r['wall_s']} s"
                f" = {r['runs_per_hour']:,} runs/hour; GPU busy {_percent(r['busy'])}"
            )
        elif part == "issue16" and "cell" in r:
            what = (
                f"{r['cell']}: {r['updates']} updates in {r['wall_s']} s "
                f"({r.get('updates_per_s')} updates/s in training), stop {r['stop']}"
            )
        else:
            what = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("part", "at_s"))
        rows.append(f"| {part} | {what} | {r['at_s']} |")
    head = "| part | result | at (s) |\n| --- | --- | --- |\n"
    return "# gpu_check\n\n" + head + "\n".join(rows) + "\n"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: the check of the script")
    parser.add_argument("--out", type=Path, default=Path("gpu-check"))
    parser.add_argument("--work", type=Path, help="run directories (default: OUT/work)")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--data-root", type=Path, help=f"holding {RIOS_DATA} (for issue16)")
    parser.add_argument(
        "--workers", help="cells at once in the grid part (default 1,4,8; tiny 1,2)"
    )
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts, in order")
    parser.add_argument("--rios-experiment", default="rios2021-g2p-transformer")
    parser.add_argument(
        "--rios-cells",
        default=",".join(RIOS_CELLS),
        help=f"cell names, comma-separated, not patterns (their data: {RIOS_DATA})",
    )
    args = parser.parse_args()
    rios_cells = tuple(c.strip() for c in args.rios_cells.split(",") if c.strip())
    if not rios_cells or any(set(c) & set("*?[") for c in rios_cells):
        parser.error(f"--rios-cells: cell names, not patterns or nothing: {args.rios_cells!r}")
    workers = [int(w) for w in (args.workers or ("1,2" if args.tiny else "1,4,8")).split(",")]
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: {unknown[0]!r} is not one of {', '.join(PARTS)}")
    out = args.out.resolve()
    work = (args.work or out / "work").resolve()
    check = Check(out, work, time.monotonic() + 60 * args.minutes)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error(
                "--device cuda: torch sees no GPU here (--device cpu --tiny checks this script)"
            )
    sampler = Sampler(args.device == "cuda")
    try:
        for part in parts:
            if check.left() <= 0:
                check.result(part, skipped="no time left")
                continue
            try:
                if part == "env":
                    env_part(check, args.device)
                elif part == "tests":
                    tests_part(check, args.tiny)
                elif part in ("main", "compile"):
                    main_part(check, args.device, args.tiny, sampler, part)
                elif part == "bench":
                    bench_part(check, args.device, args.tiny)
                elif part == "grid":
                    grid_part(check, args.device, args.tiny, workers, sampler)
                elif part == "issue16":
                    experiment = args.rios_experiment
                    issue16_part(check, args.device, args.data_root, experiment, rios_cells)
            except Exception as error:  # one part's failure is reported; the others go on
                check.result(part, error=f"{type(error).__name__}: {error}")
    finally:
        sampler.close()
    print(summary(check.results))


if __name__ == "__main__":
    main()
