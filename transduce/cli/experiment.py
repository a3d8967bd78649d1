"""`transduce experiment run EXPERIMENT.yaml`, `transduce experiment report EXP_DIR` and
`transduce experiment export EXP_DIR DEST`: grids of runs (and the ensembles of their
seeds), their tables, and the results without checkpoints (`transduce.experiments`)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity
from transduce.errors import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from transduce.experiments.spec import Experiment


class Executor(str, Enum):
    """Where `experiment run` runs its cells."""

    local = "local"
    ray = "ray"


experiment_app = typer.Typer(
    name="experiment",
    help="Grids of runs (systems x datasets x seeds) and their tables.",
    no_args_is_help=True,
)
app.add_typer(experiment_app)


@experiment_app.command(name="run")
def run_command(
    experiment: Annotated[
        Path,
        typer.Argument(
            metavar="EXPERIMENT",
            help="An experiment file (YAML), or a shipped experiment's name.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Experiment directory.",
            show_default="experiments/NAME",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="Cells run at once.",
            show_default="the cores, at most 8; with GPUs, --per-gpu on each",
        ),
    ] = None,
    cells: Annotated[
        list[str] | None,
        typer.Option(
            "--cells",
            metavar="PATTERN",
            help="Run only the cells whose id (SYSTEM.DATASET.seedN) matches this shell "
            "pattern, e.g. 'hard.*' or '*.english.*'; repeat for more.",
            show_default="every cell",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="Threads of each local cell (e.g. 1 when two experiments share the cores).",
            show_default="the cores divided between the workers",
        ),
    ] = None,
    per_gpu: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="Local cells at once on each GPU, where torch sees GPUs (each cell is given "
            "one, the least busy).",
            show_default="4",
        ),
    ] = None,
    gpu_memory: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=1.0,
            metavar="F",
            help="The fraction of its GPU's memory each local cell may allocate.",
            show_default="no limit",
        ),
    ] = None,
    data_root: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="The folder of $DATA/ paths.", show_default="as train"),
    ] = None,
    executor: Annotated[
        Executor,
        typer.Option(help="local: processes here; ray: Ray tasks (the ray extra)."),
    ] = Executor.local,
    address: Annotated[
        str | None,
        typer.Option(
            metavar="ADDR",
            help="The Ray cluster to join (ray only).",
            show_default="a local one, started for the run",
        ),
    ] = None,
    cpus: Annotated[
        float | None,
        typer.Option(
            min=0.01, metavar="N", help="CPUs a Ray cell asks for (its threads).", show_default="1"
        ),
    ] = None,
    gpus_each: Annotated[
        float | None,
        typer.Option(
            "--gpus",
            min=0.0,
            metavar="F",
            help="GPUs a Ray cell asks for (0.25: 4 share one).",
            show_default="0",
        ),
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """Run every cell not finished yet; again after a stop, to go on."""
    from transduce.experiments import runner, spec
    from transduce.experiments.run import choose_cells, executor_class, run_experiment

    options = runner.ExecutorOptions(
        workers, threads, per_gpu, gpu_memory, address, cpus, gpus_each, data_root
    )
    kind = executor_class(executor.value)
    loaded = spec.load(experiment, data_root)
    chosen = choose_cells(loaded, cells)
    if kind is runner.LocalExecutor:  # Ray's cells run on its workers: other devices
        spec.check_machine(loaded)
    directory = out or Path("experiments") / loaded.path.stem
    made = kind.from_options(directory, options, chosen, ui.info)
    result = run_experiment(loaded, directory, made, chosen, ui.info)
    if result.stopped and (result.left or result.waiting):
        done = len(chosen) - len(result.left)
        ui.stderr.print(
            f"stopped: {done} of {len(chosen)} cells finished; run the same command again to go on",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    _show(directory, loaded)
    if result.failed or result.left or result.failed_ensembles:
        logs = directory / runner.LOGS
        for outcome in result.failed:
            ui.error(f"{outcome.cell.id}: {outcome.error} (log: {logs}/{outcome.cell.id}.log)")
        for ensemble in result.failed_ensembles:
            group = ensemble.group.id
            ui.error(f"the ensemble {group}: {ensemble.error} (log: {logs}/{group}.ensemble.log)")
        failed = {o.cell.id for o in result.failed}
        unfinished = [c.id for c in result.left if c.id not in failed]
        if unfinished:
            ui.error(f"not finished: {', '.join(unfinished)}; run the same command again")
        raise typer.Exit(1)


def _show(directory: Path, loaded: Experiment) -> None:
    from transduce.experiments import report

    if ui.verbosity() >= ui.NORMAL:
        ui.stderr.print(report.markdown(report.table(loaded, directory)), markup=False)


@experiment_app.command(name="list")
def list_command(verbosity: Verbosity = None) -> None:
    """List the shipped experiments (`experiment run NAME`): NAME<TAB>WHAT on stdout."""
    from transduce.cli.common import echo_names
    from transduce.experiments import spec

    echo_names([(name, spec.summary(name)) for name in spec.shipped_experiments()])


@experiment_app.command(name="report")
def report_command(
    directory: Annotated[
        Path, typer.Argument(metavar="EXP_DIR", help="An experiment directory.", show_default=False)
    ],
    markdown: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write the Markdown table to this file too."),
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option("--json", metavar="FILE", help="Write the table as JSON to this file."),
    ] = None,
    csv_file: Annotated[
        Path | None,
        typer.Option(
            "--csv", metavar="FILE", help="Write a CSV row per system, dataset and metric."
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Draw the learning curves (dev loss and scores per update, a panel per "
            "dataset, a colour per system) to FILE.png, .pdf or .svg (needs matplotlib).",
            show_default=False,
        ),
    ] = None,
    dev: Annotated[
        bool,
        typer.Option(
            "--dev",
            help="The dev scores of each run's best validation and of each ensemble "
            "instead of the test scores (to choose between systems; no references or "
            "published numbers).",
        ),
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            metavar="SYSTEM",
            help="Compare every other system with this one (instead of the experiment "
            "file's baseline): per dataset by Welch's t-test over the seeds, and over the "
            "datasets by the paired t-test.",
            show_default=False,
        ),
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """The table of an experiment: mean ± std over seeds beside the published numbers."""
    import json

    from transduce.experiments import report, runner
    from transduce.io import atomic_write_text
    from transduce.outputs import check_outputs

    outputs = [p for p in (markdown, json_file, csv_file, plot) if p is not None]
    check_outputs(outputs, [])
    if plot is not None:
        report.plot_format(plot)
    loaded = runner.read_state(directory)
    data = report.table(loaded, directory, "dev" if dev else "test", baseline)
    text = report.markdown(data)
    ui.stderr.print(text, markup=False, highlight=False)
    if markdown is not None:
        atomic_write_text(markdown, text)
    if json_file is not None:
        atomic_write_text(json_file, json.dumps(data, indent=1) + "\n")
    if csv_file is not None:
        atomic_write_text(csv_file, report.csv_text(data))
    if plot is not None:
        report.plot(loaded, directory, plot)
        ui.info(f"learning curves: {plot}")


@experiment_app.command(name="export")
def export_command(
    directory: Annotated[
        Path, typer.Argument(metavar="EXP_DIR", help="An experiment directory.", show_default=False)
    ],
    destination: Annotated[
        Path,
        typer.Argument(
            metavar="DEST",
            help="Where to copy the results (e.g. results/NAME in a repository).",
            show_default=False,
        ),
    ],
    verbosity: Verbosity = None,
) -> None:
    """Copy what `experiment report` reads, without checkpoints, to commit the results."""
    from transduce.experiments.export import MANIFEST, export

    written = export(directory, destination)
    size = sum((destination / name).stat().st_size for name in written)
    ui.info(
        f"{len(written)} files ({size / 1024:.0f} KiB) in {destination} (listed in "
        f"{destination / MANIFEST}); `transduce experiment report {destination}` gives the table"
    )
