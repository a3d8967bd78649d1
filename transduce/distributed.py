"""Data-parallel training over several processes, launched by `torchrun` (torch.distributed).

    torchrun --nproc-per-node 2 -m transduce train --config recipe.yaml --out runs/x
    transduce train --config recipe.yaml --out runs/x --nproc 2     # the same, launched for you

Every process runs the same `Trainer` on the same batch plan; each update's batch (of
`train.batch_size`, planned with bucketing as in one process) is cut into one contiguous
part per process and per micro-batch (`train.accumulate`), and each part's loss is weighted
by its share of the batch's tokens (`Task.training_loss`). After the backward passes the
gradients are summed over the processes (one all-reduce of all gradients, flattened), so
every process takes the same optimizer step a single process would take on the whole
batch: `train.batch_size` is the batch of one update whatever the number of processes,
the batch plan does not depend on it, and `--resume` continues a run on another number of
processes (or of GPUs) exactly where it stopped.

Why not the `DistributedDataParallel` wrapper: it synchronizes gradients through hooks
set up by its own `forward`, while the tasks call the model's contract (`forward`,
`loss`, the attention the monotonicity loss reads) and some models leave parameters
unused in an update (a REINFORCE baseline, heads a loss does not read), which DDP must
search for at every step. An all-reduce after the backward pass does what the wrapper
does, without its overlap of communication and computation, which matters little for
models of this field's size (a few million parameters).

Only rank 0 writes: the run directory (lock, prepared data, config.yaml, checkpoints,
train.json, test.predictions) and the progress display. It validates alone while the
others wait; the outcome (progress, schedule) is broadcast so that every process applies
the same learning rate and stops at the same update. A stop that only one process can see
(Ctrl-C, train.max_minutes) is agreed over a small gloo group after each update, on the
CPU, so that no GPU has to wait for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from transduce.errors import ConfigError, TransduceError

# collectives wait this long for the others (rank 0 validates and tests alone meanwhile)
TIMEOUT = datetime.timedelta(hours=2)


# what a collective says when another process has gone (gloo, NCCL, the TCP store)
PEER_GONE = ("connection closed", "connection reset", "broken pipe", "peer", "timed out")


class PeerFailed(TransduceError):
    """Another training process stopped (its own message says why), so this one must."""


@contextlib.contextmanager
def _together() -> Iterator[None]:
    """A collective operation: a peer that has gone is a `PeerFailed`, not a traceback."""
    try:
        yield
    except RuntimeError as error:
        text = str(error).lower()
        if not any(sign in text for sign in PEER_GONE):
            raise  # this process's own trouble (out of memory, ...): its own message
        raise PeerFailed(
            "another training process stopped first, so this one stops too (the other's "
            "message says why, or `train --nproc` names the signal that killed it)"
        ) from None


@dataclass
class World:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1  # the processes on this machine
    launched: bool = False  # started by torchrun: in a process group, of one process too
    backend: str | None = None  # nccl or gloo, once `start` joined the group
    _control: Any = field(default=None, repr=False)  # the gloo group of `agree`

    @property
    def active(self) -> bool:
        """Whether this process is one of a process group: there are others, or torchrun
        started it alone (`--nproc 1`: the distributed path, NCCL on a GPU, in one process)."""
        return self.size > 1 or self.launched

    @property
    def main(self) -> bool:
        """Whether this process writes (rank 0)."""
        return self.rank == 0

    @classmethod
    def from_environment(cls) -> World:
        """The world `torchrun` describes in WORLD_SIZE, RANK and LOCAL_RANK (one process
        when they are absent)."""
        try:
            size = int(os.environ.get("WORLD_SIZE", "1"))
            if size <= 1 and not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
                return cls()
            local = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
            rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        except (KeyError, ValueError) as error:
            raise ConfigError(
                f"WORLD_SIZE, RANK, LOCAL_RANK: not a torchrun environment ({error}); launch "
                "with torchrun or `transduce train --nproc N`"
            ) from None
        return cls(rank, size, local_rank, local, launched=True)

    def threads(self, threads: int) -> int:
        """A process's share of the CPU threads of the run (`train.threads`) on this machine."""
        return max(1, threads // self.local_size)

    def device(self, device: torch.device) -> torch.device:
        """This process's device: its own GPU (LOCAL_RANK) when training on CUDA."""
        if device.type == "cuda" and self.active:
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return device

    def start(self, device: torch.device) -> None:
        """Join the process group: NCCL between GPUs, gloo between CPUs; a gloo group
        for the small agreements of `agree` in either case."""
        import torch.distributed as dist

        if not self.active or dist.is_initialized():
            return
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=TIMEOUT)
        self.backend = backend
        self._control = dist.new_group(backend="gloo") if backend != "gloo" else None

    def share(self, progress: Any, schedule: Any) -> None:
        """After rank 0 validated: its progress (a dataclass) and learning-rate schedule
        (`state_dict`, `load_state_dict`) in every process."""
        if not self.active:
            return
        shared = self.broadcast(
            (dataclasses.asdict(progress), schedule.state_dict()) if self.main else None
        )
        if not self.main:
            for key, value in shared[0].items():
                setattr(progress, key, value)
            schedule.load_state_dict(shared[1])

    def stop(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist

        if self.active and dist.is_initialized():
            dist.destroy_process_group()

    def barrier(self) -> None:
        """Wait until every process gets here."""
        if self.active:
            import torch.distributed as dist

            with _together():
                dist.barrier(group=self._control)

    def agree(self, flags: Sequence[bool]) -> list[bool]:
        """Each flag, true if it is true in any process (on the CPU: no GPU waits)."""
        if not self.active:
            return list(flags)
        import torch.distributed as dist

        values = torch.tensor([float(f) for f in flags])
        with _together():
            dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._control)
        return [bool(v) for v in values.tolist()]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` (any picklable object), in every process."""
        if not self.active:
            return value
        import torch.distributed as dist

        box = [value]
        with _together():
            dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]

    def sum_each(self, values: torch.Tensor) -> list[float]:
        """Each element of the 1-D tensor `values`, summed over the processes."""
        values = values.cpu()
        if self.active:
            import torch.distributed as dist

            with _together():
                dist.all_reduce(values, group=self._control)
        return [float(v) for v in values.tolist()]

    def same_parameters(self, module: torch.nn.Module) -> None:
        """Give every process rank 0's parameters and buffers."""
        if not self.active:
            return
        import torch.distributed as dist

        with torch.no_grad(), _together():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def sum_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients of `parameters` over the processes, in one all-reduce. A
        parameter without a gradient in a process counts as zero there; one without a
        gradient in every process keeps none (so the optimizer skips it, as in one)."""
        if not self.active or not parameters:
            return
        import torch.distributed as dist

        grads = [
            p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters
        ]  # fmt: skip
        # which parameters have a gradient somewhere: known on the host, agreed on the
        # CPU (gloo), so that no GPU has to wait for it
        had = torch.tensor([float(p.grad is not None) for p in parameters])
        flat = torch.cat([g.reshape(-1) for g in grads])  # all gradients, one after another
        with _together():
            dist.all_reduce(had, group=self._control)
            dist.all_reduce(flat)
        anywhere = [bool(v) for v in had.tolist()]
        offset = 0
        for p, g, used in zip(parameters, grads, anywhere):
            p.grad = flat[offset : offset + g.numel()].view_as(g) if used else None
            offset += g.numel()

    def parts(self, indices: list[int], accumulate: int) -> Iterator[list[int]]:
        """This process's micro-batches of an update's batch `indices`: the batch cut
        into `size x accumulate` contiguous parts of (nearly) equal size, parts
        `rank x accumulate` to `(rank + 1) x accumulate - 1`; empty parts are skipped."""
        count = self.size * accumulate
        bounds = [round(i * len(indices) / count) for i in range(count + 1)]
        for part in range(self.rank * accumulate, (self.rank + 1) * accumulate):
            chunk = indices[bounds[part] : bounds[part + 1]]
            if chunk:
                yield chunk
