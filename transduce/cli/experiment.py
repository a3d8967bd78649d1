"""`transduce experiment run EXPERIMENT.yaml`, `transduce experiment report EXP_DIR` and
`transduce experiment export EXP_DIR DEST`: grids of runs (and the ensembles of their
seeds), their tables, and the results without checkpoints (`transduce.experiments`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity, choices
from transduce.errors import EXIT_INTERRUPTED, ConfigError

Executor = choices("Executor", ("local", "ray"))

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
    ] = Executor.local,  # type: ignore[attr-defined]
    address: Annotated[
        str | None,
        typer.Option(
            metavar="ADDR",
            help="The Ray cluster to join (ray only).",
            show_default="a local one, started for the run",
        ),
    ] = None,
    cpus: Annotated[
        float, typer.Option(min=0.01, metavar="N", help="CPUs a Ray cell asks for (its threads).")
    ] = 1.0,
    gpus_each: Annotated[
        float,
        typer.Option(
            "--gpus", min=0.0, metavar="F", help="GPUs a Ray cell asks for (0.25: 4 share one)."
        ),
    ] = 0.0,
    verbosity: Verbosity = None,
) -> None:
    """Run every cell not finished yet; again after a stop, to go on."""
    from transduce.experiments import ensembles, runner, spec
    from transduce.io import DirectoryLock
    from transduce.progress import clock

    ray = executor.value == "ray"
    if not ray and (address is not None or cpus != 1.0 or gpus_each != 0.0):
        raise ConfigError("--address, --cpus and --gpus are options of --executor ray")
    if ray and (workers, threads, per_gpu, gpu_memory) != (None, None, None, None):
        raise ConfigError(
            "--workers, --threads, --per-gpu and --gpu-memory are of --executor local "
            "(Ray places cells by --cpus/--gpus)"
        )
    for name, value in (("--cpus", cpus), ("--gpus", gpus_each)):
        if value > 1 and value != int(value):
            raise ConfigError(f"{name} {value:g}: above 1, Ray takes whole numbers only")
    if ray:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ConfigError("--executor ray: needs Ray: pip install 'transduce[ray]'")
    if ray and address is not None:
        from transduce.experiments.ray_executor import reachable

        reachable(address)
    loaded = spec.load(experiment, data_root)
    chosen_cells = loaded.cells
    if cells:
        import fnmatch

        for pattern in cells:
            if not any(fnmatch.fnmatchcase(c.id, pattern) for c in loaded.cells):
                raise ConfigError(
                    f"--cells {pattern}: no cell of {loaded.path.name} matches "
                    f"(its cells are like {loaded.cells[0].id})"
                )
        chosen_cells = [c for c in loaded.cells if any(fnmatch.fnmatchcase(c.id, p) for p in cells)]
    if not ray:  # Ray's cells run on its workers, which may have other devices
        spec.check_machine(loaded)
    gpus = [] if ray else runner.visible_gpus()
    if (per_gpu is not None or gpu_memory is not None) and not ray and not gpus:
        raise ConfigError("--per-gpu and --gpu-memory: torch sees no GPU on this machine")
    if all(c.device == "cpu" for c in chosen_cells):  # train.device: cpu: no GPU to share
        gpus = []
    per_gpu = per_gpu or runner.PER_GPU
    directory = out or Path("experiments") / loaded.path.stem
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory}: exists and is not a directory; choose another --out")
    directory.mkdir(parents=True, exist_ok=True)
    lock = DirectoryLock(directory / ".lock", directory).acquire()
    try:
        count = workers or runner.default_workers(len(gpus), per_gpu)
        if ray:
            threads = max(1, int(cpus))
        elif threads is None:
            threads = runner.threads_per_cell(count)
        todo = [c for c in chosen_cells if not runner.finished(directory / runner.RUNS / c.id)]
        each = f"{threads} thread{'s' if threads > 1 else ''} each"
        how = f"as Ray tasks, {cpus:g} CPU and {gpus_each:g} GPU" if ray else f"{count} at a time"
        if gpus:
            how += f" on {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}, at most {per_gpu} on each"
        of = f" ({len(chosen_cells)} chosen by --cells)" if cells else ""
        ui.info(
            f"{len(loaded.cells)} cells in {directory}{of}: "
            f"{len(chosen_cells) - len(todo)} finished before, {len(todo)} to run ({how}, {each})"
        )
        ensemble_outcomes: list[ensembles.EnsembleOutcome] = []

        def save(outcomes: list[runner.Outcome]) -> dict:
            data = runner.state(
                loaded,
                directory,
                outcomes,
                ensembles.states(loaded, directory, ensemble_outcomes) if loaded.ensemble else None,
                todo=[c.id for c in todo],
            )
            runner.write_state(directory, data)
            return data

        save([])

        def progress(outcomes: list[runner.Outcome]) -> None:
            data = save(outcomes)
            last = outcomes[-1]
            statuses = [c["status"] for c in data["cells"]]
            done = statuses.count(runner.DONE)
            timed = [o.seconds for o in outcomes if o.status == runner.DONE]
            left = len(todo) - len(outcomes)
            eta = (
                f"; about {clock(sum(timed) / len(timed) * left / count)} left"
                if timed and left
                else ""
            )
            what = f"{last.status}" + (f" ({last.error})" if last.error else "")
            ui.info(
                f"{last.cell.id} {what} in {clock(last.seconds)}: {done}/{len(statuses)} done, "
                f"{statuses.count(runner.FAILED)} failed{eta}"
            )

        chosen: runner.Executor
        if ray:
            from transduce.experiments.ray_executor import RayExecutor

            chosen = RayExecutor(
                directory, cpus, gpus_each, address, data_root=data_root, announce=ui.info
            )
        else:
            chosen = runner.LocalExecutor(
                directory,
                count,
                threads,
                gpus,
                per_gpu,
                gpu_memory,
                data_root=data_root,
                announce=ui.info,
            )
        outcomes = chosen.run(todo, progress)
        stopped = chosen.stopping
        if loaded.ensemble is not None and not stopped:  # here, on this machine, also after Ray

            def ensemble_progress(done: list[ensembles.EnsembleOutcome]) -> None:
                ensemble_outcomes[:] = done
                save(outcomes)
                last = done[-1]
                what = f"{last.status}" + (f" ({last.error})" if last.error else "")
                ui.info(f"the ensemble {last.group.id} {what} in {clock(last.seconds)}")

            _, stopped = ensembles.run_all(
                loaded,
                directory,
                count,
                threads,
                chosen_cells,
                ui.info,
                ensemble_progress,
            )
    finally:
        lock.release()
    failed = [o for o in outcomes if o.status == runner.FAILED]
    failed_ensembles = [o for o in ensemble_outcomes if o.status == runner.FAILED]
    left = [c for c in chosen_cells if not runner.finished(directory / runner.RUNS / c.id)]
    waiting = [  # ensembles whose runs are done, not decoded (or out of date)
        g
        for g in ensembles.groups(loaded)
        if ensembles.ready(directory, g) and not ensembles.up_to_date(directory, g)
    ]
    if stopped and (left or waiting):
        ui.stderr.print(
            f"stopped: {len(chosen_cells) - len(left)} of {len(chosen_cells)} cells "
            "finished; run the same command again to go on",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    _show(directory, loaded)
    if failed or left or failed_ensembles:
        for outcome in failed:
            ui.error(
                f"{outcome.cell.id}: {outcome.error} (log: {directory}/logs/{outcome.cell.id}.log)"
            )
        for ensemble in failed_ensembles:
            ui.error(
                f"the ensemble {ensemble.group.id}: {ensemble.error} (log: "
                f"{directory}/logs/{ensemble.group.id}.ensemble.log)"
            )
        unfinished = [c.id for c in left if c.id not in {o.cell.id for o in failed}]
        if unfinished:
            ui.error(f"not finished: {', '.join(unfinished)}; run the same command again")
        raise typer.Exit(1)


def _show(directory: Path, loaded: object) -> None:
    from transduce.experiments import report

    if ui.verbosity() >= ui.NORMAL:
        ui.stderr.print(report.markdown(report.table(loaded, directory)), markup=False)  # type: ignore[arg-type]


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
            help="The dev scores of each run's best validation instead of its test scores "
            "(to choose between systems; no ensembles, references or published numbers).",
        ),
    ] = False,
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
    data = report.table(loaded, directory, "dev" if dev else "test")
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
