"""`benchmarks/gpu_check.py` on the CPU (`--device cpu --tiny`), so that its first GPU run
is not its first run: two of its parts, the files it streams and its summary table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transduce import compiling

from .conftest import REPO, benchmark_script, transduce_env


def tiny_check(out: Path, parts: str, minutes: int) -> subprocess.CompletedProcess:
    """`gpu_check.py --device cpu --tiny` with these parts, its files in `out`."""
    return subprocess.run(
        [
            sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu",
            "--tiny", "--out", str(out), "--parts", parts, "--minutes", str(minutes),
        ],
        capture_output=True, text=True, env=transduce_env(), timeout=100 * minutes + 100,
        cwd=REPO,
    )  # fmt: skip


def test_gpu_check_streams_its_results_and_a_summary(tmp_path):
    out = tmp_path / "check"
    done = tiny_check(out, "env,main", 2)
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


@pytest.mark.slow
@pytest.mark.skipif(
    compiling.missing(torch.device("cpu")) is not None, reason="no C++ compiler for Inductor"
)
@pytest.mark.usefixtures("inductor_cache")
def test_gpu_check_runs_the_main_job_compiled(tmp_path):
    out = tmp_path / "check"
    done = tiny_check(out, "compile", 3)
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert line["part"] == "compile" and line["exit"] == 0 and line["updates"] == 10
    config = (out / "work" / "compile" / "config.yaml").read_text(encoding="utf-8")
    assert "compile: true" in config
    assert "| compile | wall " in (out / "summary.md").read_text()


def gpu_check_module():
    """benchmarks/gpu_check.py as a module."""
    return benchmark_script("gpu_check")


def test_gpu_check_summary_shows_a_failed_part():
    """A part that failed before it measured anything (on its first GPU run: the package
    not importable) is a row of its error, not a KeyError that loses the summary."""
    module = gpu_check_module()
    error = "ModuleNotFoundError: No module named 'transduce'"
    table = module.summary([{"part": "env", "at_s": 6.7, "error": error}])
    assert f"| env | error {error} | 6.7 |" in table
    tests = {"part": "tests", "at_s": 9.0, "exit": 0, "stopped_at_limit": False, "passed": 3}
    table = module.summary([{**tests, "failed": 0, "skipped": 0, "failures": []}])
    assert "| tests | 3 passed, 0 failed, 0 skipped | 9.0 |" in table  # its own row
    table = module.summary([{"part": "issue16", "at_s": 2.0, "skipped": "5 s left"}])
    assert "| issue16 | skipped 5 s left | 2.0 |" in table


def test_descendants_reads_the_process_tree(tmp_path):
    """Children and grandchildren of a PID from /proc/PID/stat files written by hand (a
    command name with a space and a parenthesis in it; a folder that is not a process)."""
    module = gpu_check_module()
    tree = {10: ("python", 1), 11: ("transduce run", 10), 12: ("a) b", 11), 13: ("x", 10),
            20: ("y", 1), 21: ("z", 20)}  # fmt: skip
    for pid, (command, parent) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({command}) S {parent} {pid} 0 0\n")
    (tmp_path / "99" / "stat").mkdir(parents=True)  # unreadable as a file: skipped
    assert sorted(module.descendants(10, tmp_path)) == [11, 12, 13]
    assert module.descendants(20, tmp_path) == [21]
    assert module.descendants(12, tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_stop_kills_what_the_command_started_in_a_session_of_its_own(tmp_path):
    """A command that ignores Ctrl-C, and its child in a session of its own (as `experiment
    run` starts its cells) that ignores it too: after the grace both are gone, not only
    the command's process group."""
    import contextlib
    import os
    import signal
    import time

    module = gpu_check_module()
    pid_file = tmp_path / "child.pid"
    ignore = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    child = ignore + "time.sleep(600)"
    parent = ignore + (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)"
    )
    process = subprocess.Popen([sys.executable, "-c", parent], start_new_session=True)
    grandchild = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pid_file.read_text())
        module.stop(process, grace=1)
        assert process.returncode is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                stat = Path(f"/proc/{grandchild}/stat").read_text()
            except OSError:
                break  # reaped
            if stat.rsplit(")", 1)[1].split()[0] == "Z":  # killed, not reaped yet
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the child in its own session outlived stop()")
    finally:  # whatever failed above: leave nothing sleeping
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        if grandchild is not None:
            with contextlib.suppress(OSError):
                os.killpg(grandchild, signal.SIGKILL)  # its own group: never a reused PID's
        process.wait()
