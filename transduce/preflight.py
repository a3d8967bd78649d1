"""What `train` refuses before it writes anything, in one place: `Trainer` and `train
--nproc` (`transduce.launch`, before it starts the processes) run the same checks in the
same order; `experiment run` checks each cell setting's device, precision and logs once
(`experiments.spec.check_machine`) with the same functions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from transduce import config as configuration
from transduce.compiling import missing
from transduce.errors import ConfigError
from transduce.precision import choose, resolve_device
from transduce.runlog import check as check_logs
from transduce.tasks import Task, check_task


def preflight(
    config: configuration.Config,
    resume: bool = False,
    place: Callable[[torch.device], torch.device] | None = None,
) -> tuple[type[Task], torch.device, str]:
    """Check a recipe against its task and this machine: the task's problems first
    (`check_task`), then the device (`train.device`, placed by `place`: a training
    process's own GPU, `World.device`), the precision that device runs
    (`train.precision`), that `train.compile` can compile there, the logs (`train.log`)
    and, for a run that starts (not `resume`), the checkpoint it is to start from
    (`train.init_from`). The task class, the device and the precision that runs.

    Raises:
        ConfigError: the first problem, in one line naming the option.
        CheckpointError: `train.init_from` is not a checkpoint of this version.
    """
    kind = check_task(config)
    where = resolve_device(config.train.device)
    if place is not None:
        where = place(where)
    precision = choose(config.train.precision, where)
    if config.train.compile and (reason := missing(where)) is not None:
        raise ConfigError(f"train.compile: {reason}; or set train.compile: false")
    check_start(config, resume)
    return kind, where, precision


def check_start(config: configuration.Config, resume: bool = False) -> None:
    """The checks of `preflight` that do not depend on the task and device: the logs,
    and the checkpoint a starting run is to start from."""
    check_logs(list(config.train.log))
    if config.train.init_from is not None and not resume:
        from transduce.finetune import check

        check(config.train.init_from, config)
