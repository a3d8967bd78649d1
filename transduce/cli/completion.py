"""Shell completion scripts for bash, zsh and fish, generated from the Typer app.

The scripts are thin: at each TAB they call `transduce` back with `_TRANSDUCE_COMPLETE`
set, and the app itself answers with its current commands and options. Regenerate the
copies in `completions/` with `python -m transduce.cli.completion completions`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from typer.completion import get_completion_script

PROG = "transduce"
COMPLETE_VAR = "_TRANSDUCE_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def script(shell: str) -> str:
    """The completion script of `shell`, ending with a newline."""
    return (
        get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell).strip() + "\n"
    )


def write_all(directory: Path) -> list[Path]:
    """Write `transduce.bash`, `transduce.zsh` and `transduce.fish` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for shell in SHELLS:
        path = directory / f"{PROG}.{shell}"
        path.write_text(script(shell), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "completions")):
        print(written)
