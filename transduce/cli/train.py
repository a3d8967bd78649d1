"""`transduce train --config RECIPE [--set KEY=VALUE ...] [--out RUN_DIR] [--resume]`."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from transduce import config as configuration
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Device, Verbosity, complete_recipe, complete_setting
from transduce.errors import EXIT_INTERRUPTED, ConfigError, interrupted
from transduce.io import deferred_interrupts
from transduce.outputs import check_run_dir
from transduce.progress import ConsoleReporter
from transduce.runs import RunDir


@app.command(name="train")
def train_command(
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            help="A recipe file, or a shipped recipe's name (`transduce recipes` lists them).",
            show_default=False,
            autocompletion=complete_recipe,
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a setting: section.key=value (YAML value); repeatable.",
            show_default=False,
            autocompletion=complete_setting,
        ),
    ] = None,
    data_root: Annotated[
        Path | None,
        typer.Option(
            "--data-root",
            help="The folder of the recipe's $DATA/ paths (the datasets).",
            show_default="$TRANSDUCE_DATA, else ../shared/data",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Run directory.",
            show_default="runs/RECIPE, or runs/RECIPE-2, ... if taken",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --out from its last.pt.")
    ] = False,
    device: Annotated[
        Device | None,
        typer.Option(help="cpu, cuda or auto (overrides train.device).", show_default=False),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            min=1,
            help="Train in N processes on this machine (one per GPU with CUDA), launched "
            "with torchrun; each update's batch is split between them (1: one process in a "
            "process group, NCCL on a GPU).",
            show_default="in this process",
        ),
    ] = None,
    test: Annotated[
        bool | None,
        typer.Option(
            "--test/--no-test",
            help="Decode the test split with the run's model at the end (train.test).",
            show_default="as the recipe says: test",
        ),
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """Train a model; the run directory gets the config, checkpoints and train.json."""
    overrides = list(set_ or [])
    if device is not None:
        overrides.append(f"train.device={device.value}")
    if test is not None:
        overrides.append(f"train.test={'true' if test else 'false'}")
    if out is None and (resume or config is None):
        raise ConfigError("give --config RECIPE (or --out RUN_DIR --resume to continue a run)")
    if out is None and os.environ.get("WORLD_SIZE", "1") != "1":
        raise ConfigError("under torchrun, give --out RUN_DIR: every process must write one")
    if out is not None:
        run_dir = out
    else:
        assert config is not None  # refused above
        run_dir = _fresh_run_dir(Path(config).stem)
    if resume:
        source = config or str(RunDir(run_dir).config)
    else:
        if RunDir(run_dir).last.exists():
            raise ConfigError(
                f"{run_dir}: already holds a run; --resume continues it, or choose another --out"
            )
        if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 has made it, maybe
            check_run_dir(run_dir, resume)  # a user's own folder is never written in
        if config is None:
            raise ConfigError("give --config RECIPE")
        source = config
    cfg, _ = configuration.load(source, overrides, data_root)
    notes = [f"recipe: {_which(source)}"]
    local = Path(source if source.endswith(".yaml") else f"{source}.yaml")
    if not Path(source).is_file() and local.is_file():
        notes.append(
            f"warning: {local} here is not the recipe used: `--config {source}` names the "
            f"shipped recipe; give --config ./{local} for the file"
        )
    if nproc is not None:  # --nproc 1 too: one process under torchrun, in a process group
        from transduce.launch import launch
        from transduce.locking import DirectoryLock

        files = RunDir(run_dir)
        if files.marker.is_file():  # one of ours, maybe in use: said once, here,
            DirectoryLock(files.lock, run_dir).acquire().release()  # not by each rank

        arguments = ["--config", source, "--out", str(run_dir)]
        arguments += [part for value in overrides for part in ("--set", value)]
        arguments += ["--data-root", str(data_root)] if data_root is not None else []
        arguments += ["--resume"] if resume else []
        arguments += {ui.QUIET: ["--quiet"], ui.VERBOSE: ["--verbose"]}.get(ui.verbosity(), [])
        raise typer.Exit(launch(nproc, cfg, ["train", *arguments]))
    reporter = ConsoleReporter(ui.stderr, quiet=ui.verbosity() < ui.NORMAL)
    from transduce.training import Interrupted, Trainer  # torch: only when training

    stop = None
    try:
        try:
            trainer = Trainer(cfg, run_dir, resume=resume, reporter=reporter)
            trainer.notes[:0] = notes
            report = trainer.run()
        except Interrupted as stopped:
            stop = f"interrupted after update {stopped.update}; last.pt and train.json are written"
        except (KeyboardInterrupt, RuntimeError) as error:  # a second Ctrl-C: at once
            if not interrupted(error):
                raise
            stop = "stopped at once"
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's stop was under way
        stop = "stopped at once"
    if stop is not None:
        _stopped(stop, run_dir)
    if report is not None:  # None: a process of a torchrun other than rank 0
        _summary(report, run_dir)


def _stopped(what: str, run_dir: Path) -> NoReturn:
    """Say how a Ctrl-C left the run, and how to go on; exit 130 (the processes of a
    torchrun other than rank 0 say nothing). A further Ctrl-C waits until the line is
    said: the process is already stopping, and the line must not be cut short."""
    if os.environ.get("RANK", "0") != "0":
        raise typer.Exit(EXIT_INTERRUPTED) from None
    with deferred_interrupts():
        if RunDir(run_dir).resumable():
            how = f"continue with: transduce train --out {shlex.quote(str(run_dir))} --resume"
        else:
            how = "no validation was reached, so there is nothing to resume: start it again"
        ui.stderr.print(f"{what}; {how}", markup=False, highlight=False)
    raise typer.Exit(EXIT_INTERRUPTED) from None


def _fresh_run_dir(name: str) -> Path:
    """runs/NAME, or runs/NAME-2, -3, ... if it is taken: rerunning never collides."""
    for number in range(1, 10_000):
        candidate = Path("runs") / (name if number == 1 else f"{name}-{number}")
        if not candidate.exists():
            return candidate
    raise ConfigError("no free run directory under runs/: give --out")


def _summary(report: dict[str, Any], run_dir: Path) -> None:
    best = report["best"]
    score = f"{best['metric']} {best['score']:.2f}"
    ui.info(f"best dev {score} at update {best['update']} ({report['stop']})")
    # the averaged model's dev scores were said as it was made (training.average_best_last)
    model = "final.pt (best.pt and last.pt averaged)" if report.get("final") else "best checkpoint"
    if report["test"] and ui.verbosity() >= ui.NORMAL:
        table = Table(
            title=f"test ({report['data']['test_sources']} sources), {model}",
            title_justify="left",
        )
        for name in report["test"]:
            table.add_column(name, justify="right")
        table.add_row(*(f"{v:.2f}" for v in report["test"].values()))
        ui.stderr.print(table)
    files = RunDir(run_dir)
    predictions = f"; predictions: {files.predictions}" if report["test"] else ""
    ui.info(f"{files.report}{predictions}")


def _which(source: str) -> str:
    """The recipe file a --config value names, said plainly."""
    path = configuration.recipe_path(source)
    return str(path) if Path(source).is_file() else f"{source} (shipped: {path})"
