"""Start-up time of the command line: `transduce --version`, a TAB of shell completion
and `transduce score --help` (none of them needs torch; target: under 0.5 s median for
the first two). Prints one JSON line with the median of several runs of each.

    python benchmarks/startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

TARGET_SECONDS = 0.5


def seconds(command: list[str], env: dict[str, str], runs: int) -> float:
    """The median wall time of `command` over `runs` runs (after one warm-up run)."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
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
    }
    result["meets_target"] = max(result["version_s"], result["completion_s"]) < TARGET_SECONDS
    print(json.dumps(result))


if __name__ == "__main__":
    main()
