"""`transduce prepare`: raw data in any supported format -> a prepared dataset directory.

The directory holds `train.tsv`, `dev.tsv` and `test.tsv` in one canonical format (source
symbols separated by single spaces, TAB, target symbols, and optionally TAB and feature
symbols; the target is empty in a test file without answers) and `manifest.json`. It is
built under a temporary name and renamed into place, so a failure leaves nothing behind.
With the tsv and sigmorphon option `hallucinate` (Anastasopoulos & Neubig 2019), that
many hallucinated pairs follow the real ones in `train.tsv` (`transduce.data.hallucinate`).
"""

from __future__ import annotations

import datetime
import json
import platform
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transduce import defaults
from transduce.data import hallucinate
from transduce.data.formats import (
    Example,
    Format,
    HallucinationOptions,
    InputFile,
    Problems,
    ReadContext,
    get_format,
)
from transduce.data.splits import check_ratios, source_key, split_examples
from transduce.errors import ConfigError, DataError
from transduce.io import atomic_directory, recover_directory, sha256_bytes, sha256_file, write_file
from transduce.lines import resolved
from transduce.locking import DirectoryLock
from transduce.reporting import to_json
from transduce.version import __version__

SPLITS = ("train", "dev", "test")
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "transduce.prepared/1"


@dataclass
class PrepareRequest:
    """Everything `prepare` needs; the CLI fills it from its arguments.

    Attributes:
        format: A name from `transduce.data.formats.FORMATS`.
        out: The directory to create.
        inputs: Split name -> its file(s); a format with two files per split (parallel)
            takes source then target. Missing dev/test are carved out of train.
        options: Format options (only those the user set; the rest keep their defaults).
    """

    format: str
    out: Path
    inputs: dict[str, list[Path]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    dev_ratio: float = defaults.DEV_RATIO
    test_ratio: float = defaults.TEST_RATIO
    seed: int = defaults.SPLIT_SEED
    skip_invalid: bool = False
    force: bool = False
    encoding: str = defaults.ENCODING


def _check_inputs(fmt: Format, inputs: dict[str, list[Path]]) -> None:
    unknown = set(inputs) - set(SPLITS)
    if unknown:
        raise ConfigError(f"unknown split {sorted(unknown)} (valid: {', '.join(SPLITS)})")
    n = fmt.files_per_split
    for split, paths in inputs.items():
        if len(paths) != n:
            what = "one file" if n == 1 else f"{n} files (source, then target)"
            raise ConfigError(
                f"the {fmt.name} format takes {what} per split; {split} got {len(paths)}: "
                + ", ".join(map(str, paths))
            )


def _check_output(out: Path, force: bool, inputs: dict[str, list[Path]]) -> None:
    """Refuse an output directory whose replacement would destroy something else.

    `--force` replaces an empty directory or a prepared dataset (one with a transduce
    manifest, holding only what prepare wrote); never another directory, one holding an
    input or something the user added, or the working directory.
    """
    target = resolved(out)
    for paths in inputs.values():
        for path in paths:
            if resolved(path).is_relative_to(target):
                raise ConfigError(f"{path}: an input file is inside the output directory {out}")
    if resolved(Path.cwd()).is_relative_to(target):
        raise ConfigError(f"{out}: the output directory contains the working directory")
    if force and target.is_dir() and any(target.iterdir()):
        try:
            manifest = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
            ours = (
                set(manifest["outputs"]) | {MANIFEST}
                if manifest["schema"] == MANIFEST_SCHEMA
                else None
            )
        except (OSError, ValueError, KeyError, TypeError):
            ours = None
        if ours is None:
            raise ConfigError(
                f"{out}: --force replaces only a prepared dataset directory, and this one has "
                "no transduce manifest.json; choose another --out"
            )
        others = sorted(p.name for p in target.iterdir() if p.name not in ours)
        if others:
            raise ConfigError(
                f"{out}: --force would delete files that prepare did not write: "
                f"{', '.join(others[:5])}; move them or choose another --out"
            )
        # the manifest names the files prepare wrote, with their SHA-256: a file whose
        # content is not what it says was not written by prepare (or was changed since)
        for name in sorted(ours - {MANIFEST}):
            path = target / name
            if not path.exists() and not path.is_symlink():
                continue
            recorded = (manifest["outputs"].get(name) or {}).get("sha256")
            if not path.is_file() or path.is_symlink() or sha256_file(path) != recorded:
                raise ConfigError(
                    f"{out / name}: is not the file prepare wrote (its SHA-256 is not the "
                    "manifest's); --force would delete it: move it or choose another --out"
                )


def prepare(request: PrepareRequest, notify: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Read, split, and write a prepared dataset directory; return its manifest.

    The output is locked while prepare runs; what an interrupted earlier prepare left is
    put back or removed first (`notify` hears of it).

    Raises:
        ConfigError: bad options (before any data is read).
        DataError: malformed input, with file, line and value.
        TransduceError: the output directory exists (without `force`).
    """
    fmt = get_format(request.format, **request.options)
    check_ratios(request.dev_ratio, request.test_ratio)
    _check_inputs(fmt, request.inputs)
    out = Path(request.out)
    try:
        parent = out.absolute().parent
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create the output's folder: {error.strerror}", out) from None
    with DirectoryLock(parent / f".{out.name}.lock", out):
        for message in recover_directory(out):
            if notify is not None:
                notify(message)
        _check_output(out, request.force, request.inputs)
        return _prepare(request, fmt)


def _prepare(request: PrepareRequest, fmt: Format) -> dict[str, Any]:
    with atomic_directory(request.out, force=request.force) as workdir:
        files = {
            split: [InputFile.read(p) for p in paths] for split, paths in request.inputs.items()
        }
        if "train" not in files:
            default = fmt.default_inputs()
            if default is None:
                raise ConfigError(f"the {fmt.name} format needs training data: an INPUT file")
            files = {"train": default, **files}
        problems = Problems(skip=request.skip_invalid)
        splits: dict[str, list[Example]] = {}
        for split in SPLITS:  # train first: it settles `auto` units
            if split in files:
                ctx = ReadContext(split, request.encoding, problems, require_target=split != "test")
                splits[split] = fmt.read(files[split], ctx)
                _check_split(splits[split], split, files[split])
        carved = [s for s in ("test", "dev") if s not in splits]
        ratios = {"test": request.test_ratio, "dev": request.dev_ratio}
        carve = {s: ratios[s] for s in carved}
        if carve:
            pieces = split_examples(splits["train"], carve, request.seed, files["train"][0].name)
            splits.update(pieces)
        hallucination = _hallucinate(fmt, splits, request.seed, files["train"][0].name)
        splits = fmt.finish(splits, workdir)
        outputs = _write_splits(splits, workdir)
        manifest = _manifest(request, fmt, files, splits, carved, problems, outputs, hallucination)
        write_file(workdir / MANIFEST, to_json(manifest).encode("utf-8"))
    return manifest


def _hallucinate(
    fmt: Format, splits: dict[str, list[Example]], seed: int, name: str
) -> dict[str, Any]:
    """Append the format's `hallucinate` pairs to the training split (never dev or test).

    train.tsv then holds the real pairs, then the hallucinated ones; the returned manifest
    entry says how many of each, so they can be told apart.
    """
    options = fmt.options
    if not isinstance(options, HallucinationOptions) or not options.hallucinate:
        return {"pairs": 0}
    if options.hallucinate_seed is None:
        options.hallucinate_seed = seed  # resolved, so the manifest's options say it
    sides = fmt.sides()
    units = sides.source.unit, sides.target.unit
    if units[0] != units[1]:
        raise ConfigError(
            f"--hallucinate needs source and target in the same units, not {units[0]} and "
            f"{units[1]} (set --source-unit and --target-unit)"
        )
    real = splits["train"]
    style = options.hallucinate_style
    new, counts = hallucinate.hallucinate(
        real, options.hallucinate, options.hallucinate_seed, name, style
    )
    splits["train"] = [*real, *new]
    return {
        "pairs": len(new),
        "seed": options.hallucinate_seed,
        "real_pairs": len(real),  # train.tsv: lines 1..real_pairs real, the rest hallucinated
        **counts,
        "min_stretch": hallucinate.MIN_STRETCH,
        "alignment": hallucinate.ALIGNMENT,
        "style": style,
        "method": hallucinate.METHODS[style],
    }


def _check_split(examples: list[Example], split: str, files: Sequence[InputFile]) -> None:
    if not examples:
        raise DataError(f"no entries in the {split} data", ", ".join(f.name for f in files))
    if split == "test":
        labelled = [e.target is not None for e in examples]
        if any(labelled) and not all(labelled):
            first = examples[labelled.index(False)]
            raise DataError(
                "test data mixes entries with and without a target: this one has none",
                files[0].name,
                first.line,
            )


def canonical_line(example: Example) -> str:
    """One line of a prepared split: `source<TAB>target[<TAB>features]`."""
    fields = [" ".join(example.source), " ".join(example.target or ())]
    if example.features is not None:
        fields.append(" ".join(example.features))
    return "\t".join(fields)


def _write_splits(splits: dict[str, list[Example]], workdir: Path) -> dict[str, dict[str, Any]]:
    outputs = {}
    for split in SPLITS:
        data = "".join(canonical_line(e) + "\n" for e in splits[split]).encode("utf-8")
        write_file(workdir / f"{split}.tsv", data)
        outputs[f"{split}.tsv"] = {"lines": len(splits[split])}
    for path in sorted(workdir.iterdir()):  # split files and any learned models
        data = path.read_bytes()
        outputs.setdefault(path.name, {}).update(bytes=len(data), sha256=sha256_bytes(data))
    return outputs


def _inventory(splits: dict[str, list[Example]], side: str) -> dict[str, list[int]]:
    """Symbol -> [count in train, dev, test], sorted by symbol."""
    counts = {split: Counter() for split in SPLITS}
    for split in SPLITS:
        for example in splits[split]:
            counts[split].update(getattr(example, side) or ())
    symbols = sorted(set().union(*counts.values()))
    return {s: [counts[split][s] for split in SPLITS] for s in symbols}


def _overlap(splits: dict[str, list[Example]]) -> dict[str, int]:
    """Distinct sources shared by each pair of splits (0 for carved splits)."""
    keys = {split: {source_key(e) for e in splits[split]} for split in SPLITS}
    pairs = [("train", "dev"), ("train", "test"), ("dev", "test")]
    return {f"{a}-{b}": len(keys[a] & keys[b]) for a, b in pairs}


def _manifest(
    request: PrepareRequest,
    fmt: Format,
    files: dict[str, list[InputFile]],
    splits: dict[str, list[Example]],
    carved: list[str],
    problems: Problems,
    outputs: dict[str, dict[str, Any]],
    hallucination: dict[str, Any],
) -> dict[str, Any]:
    sides = fmt.sides()
    present = sides.to_manifest()
    return {
        "schema": MANIFEST_SCHEMA,
        "transduce_version": __version__,
        "python": platform.python_version(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "format": fmt.name,
        "options": fmt.resolved_options(),
        "encoding": request.encoding,
        "sides": present,
        "split": {
            "given": [s for s in SPLITS if s not in carved],
            "carved": carved,
            "method": "distinct sources ranked by sha256(seed, source); "
            "no source in two carved splits",
            "seed": request.seed,
            "dev_ratio": request.dev_ratio,
            "test_ratio": request.test_ratio,
        },
        "lines": {split: len(splits[split]) for split in SPLITS},
        "hallucination": hallucination,  # its pairs are the last lines of train.tsv
        "test_has_targets": all(e.target is not None for e in splits["test"]),
        "overlap": _overlap(splits),
        "skipped": problems.as_dict(),
        "ignored_columns": problems.ignored_dict(),
        "inventory": {
            side: _inventory(splits, side)
            for side in ("source", "target", "features")
            if side in present
        },
        "inputs": [
            {"split": split, "name": f.name, "bytes": len(f.data), "sha256": sha256_bytes(f.data)}
            for split in SPLITS
            for f in files.get(split, [])
        ],
        "outputs": outputs,
    }
