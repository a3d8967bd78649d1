"""`benchmarks/gpu_check.py` on the CPU (`--device cpu --tiny`), so that its first GPU run
is not its first run: two of its parts, the files it streams and its summary table."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import REPO, transduce_env


def test_gpu_check_streams_its_results_and_a_summary(tmp_path):
    out = tmp_path / "check"
    done = subprocess.run(
        [
            sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu",
            "--tiny", "--out", str(out), "--parts", "env,main", "--minutes", "2",
        ],
        capture_output=True, text=True, env=transduce_env(), timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [line["part"] for line in lines] == ["env", "main"]
    env, main = lines
    assert env["device"] == "cpu" and env["torch"] and env["cores"] >= 1
    assert main["exit"] == 0 and main["updates"] == 10 and main["device"] == "cpu"
    assert main["busy_training"] is None  # no GPU to sample
    summary = (out / "summary.md").read_text()
    assert "| env |" in summary and "| main | wall " in summary
    assert summary in done.stdout  # printed at the end too
    assert (out / "log.txt").is_file()
