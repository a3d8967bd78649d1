"""`transduce decode RUN_DIR|CHECKPOINT... [INPUT|-]`: predictions on stdout, a line per line.

Several models decode as an ensemble (`transduce.ensemble`). The last argument is the
input unless it is a model too (a directory, or a checkpoint file: a zip archive, as
torch.save writes them); with no input, standard input is read.

`--tie-break-rules TRAIN` (inflection ensembles): each model also decodes alone, and where
their outputs differ, suffix rules learned from TRAIN settle it (`transduce.rules`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from transduce import config as configuration
from transduce import defaults
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Device, Verbosity, choices
from transduce.errors import ConfigError
from transduce.lines import STDIN, display, line_batches
from transduce.outputs import check_outputs
from transduce.reporting import versions, write_json

InputFormat = choices("InputFormat", ("raw", "tsv"))
EnsembleMean = choices("EnsembleMean", defaults.ENSEMBLE_MEANS)
RAW, CPU, PROBABILITY = InputFormat("raw"), Device.cpu, EnsembleMean("probability")


def is_model(path: str) -> bool:
    """A run directory or a checkpoint file (torch.save writes a zip archive)."""
    if path == STDIN:
        return False
    candidate = Path(path)
    if candidate.is_dir():
        return True
    if not candidate.is_file():  # a pipe or a terminal: reading would consume its input
        return False
    try:
        with open(candidate, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def split_paths(paths: list[str]) -> tuple[list[str], str]:
    """(models, input) of the positional arguments."""
    if len(paths) > 1 and not is_model(paths[-1]):
        return paths[:-1], paths[-1]
    return paths, STDIN


@app.command(name="decode")
def decode_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="MODEL... [INPUT]",
            help="Run directories (their final.pt or best.pt) or checkpoint files (several: an "
            "ensemble), then the input lines ('-' or none: stdin).",
            show_default=False,
        ),
    ],
    input_format: Annotated[
        InputFormat,
        typer.Option(
            help="raw: text tokenized as in training (inflection: lemma<TAB>tags); "
            "tsv: the source column of a prepared split."
        ),
    ] = RAW,
    beam: Annotated[int, typer.Option(help="Beam size (1: greedy).")] = 1,
    ensemble_mean: Annotated[
        EnsembleMean,
        typer.Option(
            help="An ensemble's next-symbol distribution: the mean of its models' "
            "probabilities, or of their log-probabilities (renormalized): probability or "
            "log-probability.",
            case_sensitive=False,
            metavar="MEAN",
        ),
    ] = PROBABILITY,
    length_penalty: Annotated[
        float,
        typer.Option(help="Rank hypotheses by score / |Y|^ALPHA (|Y| counts the end of sequence)."),
    ] = 0.0,
    nbest: Annotated[
        int, typer.Option(help="Hypotheses per input: N lines 'line<TAB>hypothesis<TAB>score'.")
    ] = 1,
    batch_size: Annotated[int, typer.Option(help="Sentences per batch.")] = 256,
    max_output_length: Annotated[
        int | None,
        typer.Option(help="Output limit in symbols (default: 2 x input + 10).", show_default=False),
    ] = None,
    device: Annotated[Device, typer.Option(help="cpu, cuda or auto.")] = CPU,
    max_line_length: Annotated[
        int, typer.Option(help="The longest input line, in characters (a longer one is an error).")
    ] = defaults.MAX_LINE_LENGTH,
    bf16: Annotated[
        bool | None,
        typer.Option(
            "--bf16/--no-bf16",
            help="bfloat16 autocast (default: as the model was trained).",
            show_default=False,
        ),
    ] = None,
    report: Annotated[
        str | None,
        typer.Option(help="Write a JSON report (options, counts, words/s).", show_default=False),
    ] = None,
    prob_mass: Annotated[
        float | None,
        typer.Option(
            "--prob-mass",
            metavar="P",
            help="Of the --nbest, only the best ones until their probabilities add up to P.",
            show_default=False,
        ),
    ] = None,
    scores: Annotated[
        bool,
        typer.Option(
            "--scores",
            help="A JSON line per input: each output's text, search score, log-probability "
            "and the probability of each symbol.",
        ),
    ] = False,
    alignment: Annotated[
        bool,
        typer.Option(
            "--alignment",
            help="Each output's input position per output symbol, Pharaoh i-j pairs (a "
            "column after the output; in the JSON of --scores).",
        ),
    ] = False,
    alignment_posterior: Annotated[
        bool,
        typer.Option(
            "--alignment-posterior",
            help="Hard attention: the exact alignment posterior, i-j:p pairs of p >= 0.01 "
            "(the whole matrix in the JSON of --scores); implies --alignment.",
        ),
    ] = False,
    tie_break_rules: Annotated[
        str | None,
        typer.Option(
            "--tie-break-rules",
            metavar="TRAIN",
            help="Inflection ensembles: where the models' own outputs differ, the output of "
            "suffix rules learned from TRAIN (lemma<TAB>form<TAB>tags) if one of the models "
            "wrote it, the ensemble's otherwise (+1.0 dev accuracy over 26 SIGMORPHON 2017 "
            "languages: RESULTS.md). Each model also decodes alone.",
            show_default=False,
        ),
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """Transduce input lines with a trained model: one output line per input line."""
    options = configuration.from_flags(
        configuration.DecodeConfig,
        {
            "beam": beam,
            "length_penalty": length_penalty,
            "nbest": nbest,
            "prob_mass": prob_mass,
            "max_output_length": max_output_length,
            "batch_size": batch_size,
        },
    )
    if max_line_length < 1:
        raise ConfigError(f"--max-line-length: must be at least 1, not {max_line_length}")
    models, input = split_paths(paths)
    if tie_break_rules == STDIN:
        raise ConfigError("--tie-break-rules: a file, not standard input (the input may be)")
    rules = [tie_break_rules] if tie_break_rules is not None else []
    check_outputs([report], [*models, input, *rules])
    from transduce import checkpoint
    from transduce.inference import Transducer

    payloads = [checkpoint.load(model) for model in models]
    check_outputs([report], [p["path"] for p in payloads])
    transducer = Transducer.ensemble(payloads, device.value, bf16, ensemble_mean.value)
    if transducer.precision_warning:
        ui.warn(transducer.precision_warning)
    alignment = alignment or alignment_posterior
    threshold = POSTERIOR_SHOWN if alignment_posterior else None
    tie_break = None
    if tie_break_rules is not None:
        _check_tie_break(transducer, len(models), nbest, scores or alignment, input_format.value)
        tie_break = _TieBreak(tie_break_rules, transducer.alone)
    if scores or alignment:
        transducer.check_explain(alignment_posterior)  # before anything is decoded
    out = sys.stdout
    seconds, count, decoded = 0.0, 0, 0
    # up to 16 batches at a time while input keeps coming: length bucketing across them
    # keeps padding low; fewer as soon as no more input is ready
    for first, lines in line_batches(input, 16 * options.batch_size, max_line_length):
        start = time.perf_counter()
        predictions = transducer.transduce(
            lines, display(input), input_format.value, options=options, first_line=first
        )
        if tie_break is not None:
            tie_break.apply(lines, predictions, display(input), options, first)
        explained = (
            transducer.explain(predictions, posterior=alignment_posterior)
            if scores or alignment
            else None
        )
        seconds += time.perf_counter() - start
        for index, (number, prediction) in enumerate(enumerate(predictions, first)):
            said = explained[index] if explained is not None else []
            if scores:
                out.write(_scores_line(number, prediction, said, alignment, threshold) + "\n")
            elif nbest == 1:
                text = prediction.texts[0] if prediction.texts else ""
                pairs = said[0].pharaoh(threshold) if said else ""
                out.write(text + (f"\t{pairs}" if alignment else ""))
                out.write("\n")
            elif not prediction.texts:  # an empty input line: one line, nothing in it
                out.write(f"{number}\t\t" + ("\t" if alignment else "") + "\n")
            else:
                for k, (text, score) in enumerate(zip(prediction.texts, prediction.scores)):
                    column = f"\t{said[k].pharaoh(threshold)}" if alignment else ""
                    out.write(f"{number}\t{text}\t{score:.6f}{column}\n")
        out.flush()  # a line in, a line out: the output of each batch as soon as it is ready
        count += len(lines)
        decoded += sum(1 for p in predictions if p.texts)
    if transducer.unknown:
        how = "read as <unk>" + ("; copied as they are" if transducer.copies else "")
        ui.warn(f"{transducer.unknown} input symbols are unknown to the model ({how})")
    ui.detail(f"{decoded} lines in {seconds:.2f} s ({decoded / max(seconds, 1e-9):.0f} lines/s)")
    if report is not None:
        write_json(
            report,
            {
                "schema": "transduce.decode/1",
                "checkpoint": transducer.members[0],
                "ensemble": transducer.members if len(transducer.members) > 1 else None,
                "input": input,
                "options": {
                    "input_format": input_format.value,
                    "beam": options.beam,
                    "length_penalty": options.length_penalty,
                    "nbest": options.nbest,
                    "prob_mass": options.prob_mass,
                    "batch_size": options.batch_size,
                    "max_output_length": options.max_output_length,
                    "ensemble_mean": ensemble_mean.value if len(models) > 1 else None,
                    "tie_break_rules": tie_break_rules,
                    "device": str(transducer.device),
                    "bf16": transducer.bf16,
                },
                "lines": count,
                "tie_broken": None if tie_break is None else tie_break.changed,
                "empty_lines": count - decoded,
                "unknown_symbols": transducer.unknown,
                "seconds": seconds,
                "words_per_second": decoded / max(seconds, 1e-9),
                "versions": versions(),
            },
        )


POSTERIOR_SHOWN = 0.01  # --alignment-posterior: the pairs of at least this probability


def _check_tie_break(
    transducer: Any, models: int, nbest: int, explained: bool, input_format: str
) -> None:
    """--tie-break-rules needs an inflection ensemble, one output per raw input line."""
    if models < 2:
        raise ConfigError(
            "--tie-break-rules: give several models (an ensemble): the rules settle where "
            "their outputs differ"
        )
    if not transducer.sides.source.tagged:
        raise ConfigError(
            f"--tie-break-rules: for inflection models (lemma<TAB>tags input); "
            f"{transducer.members[0]} is not one"
        )
    if nbest != 1 or explained:
        raise ConfigError(
            "--tie-break-rules gives one output per line: not with --nbest, --scores or --alignment"
        )
    if input_format != "raw":
        raise ConfigError("--tie-break-rules reads lemma<TAB>tags lines: not --input-format tsv")


class _TieBreak:
    """Each member decoded alone, and `transduce.rules.tie_break` applied to each line."""

    def __init__(self, train: str, members: list[Any]) -> None:
        from transduce.rules import SuffixRules

        self.rules = SuffixRules.from_file(train)
        self.members = members  # the ensemble's own models, each decoding alone
        self.changed = 0  # lines whose output is not the ensemble's

    def apply(
        self, lines: list[str], predictions: list[Any], path: str, options: Any, first: int
    ) -> None:
        from transduce.rules import tie_break

        alone = [
            m.transduce(lines, path, "raw", options=options, first_line=first) for m in self.members
        ]
        for index, (line, prediction) in enumerate(zip(lines, predictions, strict=True)):
            if not prediction.texts:  # an empty line
                continue
            lemma, _, tags = line.partition("\t")
            outputs = [member[index].texts[0] for member in alone]
            chosen = tie_break(outputs, prediction.texts[0], self.rules(lemma.strip(), tags))
            if chosen != prediction.texts[0]:
                prediction.texts[0] = chosen
                self.changed += 1


def _scores_line(
    number: int,
    prediction: Any,
    explained: list[Any],
    alignment: bool,
    threshold: float | None = None,
) -> str:
    """`--scores`: the JSON line of one input line."""
    import json

    outputs = []
    for k, text in enumerate(prediction.texts):
        said = explained[k]
        entry = {
            "text": text,
            "score": prediction.scores[k] if k < len(prediction.scores) else None,
            "log_prob": said.log_prob,
            "symbols": prediction.symbols[k],
            "symbol_probs": said.symbol_probs,  # one per symbol, then the end
        }
        if alignment:
            entry["alignment"] = said.pharaoh(threshold)
        if said.posterior is not None:  # each output symbol's row over the input symbols
            entry["alignment_posterior"] = said.posterior
        outputs.append(entry)
    return json.dumps({"line": number, "outputs": outputs}, ensure_ascii=False)
