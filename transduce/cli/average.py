"""`transduce average RUN_DIR --best K | --last K --out FILE` or `transduce average
CHECKPOINT... --out FILE`: a checkpoint-averaged model (`transduce.averaging`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity
from transduce.errors import ConfigError, plural
from transduce.outputs import check_outputs


@app.command(name="average")
def average_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="RUN_DIR|CHECKPOINT...",
            help="A run directory with kept checkpoints (--best or --last), or checkpoint "
            "files of one model.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The averaged checkpoint to write (a new file).")
    ],
    best: Annotated[
        int | None,
        typer.Option(help="Average the K best kept checkpoints (train.keep_best).", metavar="K"),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option(help="Average the K last kept checkpoints (train.keep_last).", metavar="K"),
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """Average the weights of several checkpoints of one model into one checkpoint."""
    if best is not None and last is not None:
        raise ConfigError("--best and --last: give one of them")
    run_dir = Path(paths[0])
    if best is not None or last is not None:
        if len(paths) != 1 or not run_dir.is_dir():
            raise ConfigError("--best and --last choose among a run directory's kept checkpoints")
    elif len(paths) == 1 and run_dir.is_dir():
        raise ConfigError(
            f"{run_dir}: a run directory: say which checkpoints (--best K or --last K)"
        )
    if out.exists():
        raise ConfigError(f"{out}: exists; give a new file for the averaged checkpoint")
    check_outputs([out], paths)
    from transduce import checkpoint
    from transduce.averaging import average, kept_checkpoints

    if best is not None:
        files = kept_checkpoints(run_dir, "best", best)
    elif last is not None:
        files = kept_checkpoints(run_dir, "last", last)
    else:
        files = [Path(p) for p in paths]
    payload = average(files)
    checkpoint.save(out, payload)
    numbers = payload["averaged"]["updates"]  # None: an averaged one, of no one update
    updates = f"update{'s' if len(numbers) != 1 else ''} {', '.join(map(str, numbers))}"
    said = f" ({updates})" if None not in numbers else ""
    ui.info(f"averaged {plural(len(files), 'checkpoint')}{said} into {out}")
