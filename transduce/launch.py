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
it is set; a plain `torchrun` keeps 30 s). SIGTERM and SIGHUP (`kill PID`, a closed
terminal) to this process are passed on the same way, as a Ctrl-C; and if this process
is killed (kill -9), the training processes stop as at Ctrl-C by themselves
(`io.stop_with_parent`). A training process killed by a signal (the out-of-memory
killer's SIGKILL) is named with the signal.
"""

from __future__ import annotations

import logging
import os
import signal

from transduce import config as configuration
from transduce.errors import EXIT_INTERRUPTED, ConfigError, TransduceError
from transduce.io import PARENT_VARIABLE

SHUTDOWN_SECONDS = 1800  # $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, unless it is set
PASSED_ON = ("SIGTERM", "SIGHUP")  # handled as a Ctrl-C (SIGINT), which torchrun passes on
# why a process may have had a signal, for the message that names it
SENDERS = {
    "SIGKILL": "the out-of-memory killer sends it",
    "SIGSEGV": "a crash in native code",
    "SIGBUS": "a crash in native code, or a file mapped in memory that went away",
    "SIGABRT": "a crash in native code",
}


class RankKilled(TransduceError):
    """A training process ended by a signal, with no message of its own."""


def killed(rank: int, exitcode: int) -> str:
    """What to say of training process `rank` ended with `exitcode` (negative: a signal)."""
    number = -exitcode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    why = SENDERS.get(name)
    return f"rank {rank} was killed by {name} (signal {number}{'; ' + why if why else ''})"


def launch(nproc: int, config: configuration.Config, arguments: list[str]) -> int:
    """Run `transduce ARGUMENTS` in `nproc` processes; the exit status."""
    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from transduce.preflight import preflight

    # what every process would refuse, refused once here
    _, where, _ = preflight(config, resume="--resume" in arguments)
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
    # torchrun would pass a SIGTERM on as such, which ends a training process at once:
    # it handles Ctrl-C only (its --signals-to-handle, read from $PET_SIGNALS_TO_HANDLE;
    # older versions read $TORCHELASTIC_SIGNALS_TO_HANDLE), and this process turns the
    # others into one (`_as_ctrl_c`)
    for variable in ("PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE"):
        os.environ[variable] = "SIGINT,SIGQUIT"
    os.environ[PARENT_VARIABLE] = str(os.getpid())  # they stop if this process is killed
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed")]:
        # its failure report and its "Received SIGINT death signal" (torch sets the
        # level of some of its loggers itself: every one, not just the parent)
        logging.getLogger(name).setLevel(logging.CRITICAL)
    options = ["--standalone", f"--nproc-per-node={nproc}", "-m", "transduce", *arguments]
    previous = {
        name: signal.signal(getattr(signal, name), _as_ctrl_c)
        for name in PASSED_ON
        if hasattr(signal, name)
    }
    try:
        run(parse_args(options))
    except ChildFailedError as error:  # the status of the process that failed first
        rank, failure = error.get_first_failure()
        own = any(f.exitcode > 0 for f in error.failures.values())  # said why itself
        signalled = {
            r: f
            for r, f in error.failures.items()
            # SIGTERM is how torchrun stops the others once one has failed: named only
            # when no process said why it stopped
            if f.exitcode < 0 and not (own and -f.exitcode == signal.SIGTERM)
        }
        if signalled:  # no message of its own: say which signal
            rank, failure = min(signalled.items(), key=lambda item: item[1].timestamp)
            raise RankKilled(killed(rank, failure.exitcode)) from None
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as error:  # Ctrl-C: torchrun passed it on to the processes
        return EXIT_INTERRUPTED if error.sigval == signal.SIGINT else 128 + int(error.sigval)
    finally:
        os.environ.pop(PARENT_VARIABLE, None)
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
    return 0


def _as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP: a Ctrl-C, which torchrun passes on to the training processes
    (they stop after their update, rank 0 writing last.pt and train.json)."""
    signal.raise_signal(signal.SIGINT)
