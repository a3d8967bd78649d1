"""`transduce train --nproc N`: the training processes launched with torchrun's own
launcher (`torch.distributed.run`, on this machine: `--standalone`), as if the user had
typed `torchrun --standalone --nproc-per-node N -m transduce train ...`.

The configuration, device and precision are checked here first, so that a mistake is one
line from this process, not one per training process. The exit status is rank 0's (2 for
a user's mistake, 130 for Ctrl-C) rather than torchrun's 1 with its report of the failure.
torchrun starts each training process in a session of its own and passes a Ctrl-C (SIGINT)
on to them: they stop after their update, as one process does, rank 0 writing last.pt and
train.json, within the time torchrun gives them before it kills them
($TORCH_ELASTIC_SHUTDOWN_TIMEOUT: 30 s by default, set to `SHUTDOWN_SECONDS` here unless
it is set; a plain `torchrun` keeps 30 s).
"""

from __future__ import annotations

import logging
import os
import signal

from transduce import config as configuration
from transduce.errors import EXIT_INTERRUPTED, ConfigError

SHUTDOWN_SECONDS = 1800  # $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, unless it is set


def launch(nproc: int, config: configuration.Config, arguments: list[str]) -> int:
    """Run `transduce ARGUMENTS` in `nproc` processes; the exit status."""
    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from transduce.precision import choose
    from transduce.runlog import check
    from transduce.tasks import check_task
    from transduce.training import device

    check_task(config)  # what every process would refuse, refused once here
    check(config.train.log)
    where = device(config.train.device)
    choose(config.train.precision, where)
    if where.type == "cuda" and nproc > torch.cuda.device_count():
        raise ConfigError(
            f"--nproc {nproc}: this machine has {torch.cuda.device_count()} CUDA devices "
            "(one process per GPU)"
        )
    if where.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # torchrun's default is 1 thread per process; train.threads splits in `Trainer`
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    # torchrun gives the processes this long after passing on a Ctrl-C, then kills them:
    # rank 0 may be validating or testing, and must get to write last.pt and train.json
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_SECONDS))
    logging.getLogger("torch.distributed").setLevel(logging.CRITICAL)  # its failure report
    options = ["--standalone", f"--nproc-per-node={nproc}", "-m", "transduce", *arguments]
    try:
        run(parse_args(options))
    except ChildFailedError as error:  # the status of the process that failed first
        _, failure = error.get_first_failure()
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as error:  # Ctrl-C: torchrun passed it on to the processes
        return EXIT_INTERRUPTED if error.sigval == signal.SIGINT else 128 + int(error.sigval)
    return 0
