"""Shell completions: the shipped scripts are current, and bash completion really completes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from transduce.cli.completion import SHELLS, script

from .conftest import transduce_env

COMPLETIONS = Path(__file__).parent.parent / "completions"


@pytest.mark.parametrize("shell", SHELLS)
def test_shipped_scripts_are_current(shell):
    shipped = (COMPLETIONS / f"transduce.{shell}").read_text(encoding="utf-8")
    assert shipped == script(shell), "stale: run `python -m transduce.cli.completion completions`"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["transduce", "sc"], ["score"]),
        (["transduce", "rec"], ["recipes"]),
        (["transduce", "prepare", "c"], ["cmudict", "conllu"]),
        (["transduce", "score", "h", "r", "--metric", "m"], ["mfs"]),
        (
            ["transduce", "train", "--config", "paper/rios2021/rnn-g2p-cmudict-m"],
            ["paper/rios2021/rnn-g2p-cmudict-mono"],
        ),
        (["transduce", "train", "--set", "train.optimizer.l"], ["train.optimizer.lr="]),
        (["transduce", "train", "--set", "model.encoder_s"], ["model.encoder_size="]),
    ],
)
def test_bash_completion_completes(words, expected):
    command = (
        f"source {COMPLETIONS / 'transduce.bash'}; COMP_WORDS=({' '.join(words)}); "
        f"COMP_CWORD={len(words) - 1}; _transduce_completion transduce; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=transduce_env()
    )
    assert result.stdout.split() == expected, result.stderr
