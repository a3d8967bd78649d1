"""What decoding says of its outputs: `decode --scores` (the probability of each output
symbol and of the sequence) and `decode --alignment` (Pharaoh pairs), and
`Transducer.explain` under both."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transduce import config as configuration
from transduce.cli import app
from transduce.inference import Transducer
from transduce.training import Trainer

from .toy import TINY_LSTM, recipe, write_task

HARD = {**TINY_LSTM, "name": "hard"}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("explain"), "copy", n=300)


@pytest.fixture(scope="module")
def runs(copy, tmp_path_factory) -> dict[str, Path]:
    """A soft-attention LSTM and a hard-attention model that have learned to copy."""
    root = tmp_path_factory.mktemp("explain-runs")
    made = {}
    for name, model in (("soft", TINY_LSTM), ("hard", HARD)):
        data = recipe(copy, model, max_updates=400, validate_every=100, precision="fp32")
        Trainer(configuration.parse(data), root / name).run()
        made[name] = root / name
    return made


def _lines(copy: Path) -> list[str]:
    return (copy / "test.tsv").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("beam", [1, 3])
def test_the_symbol_probabilities_multiply_to_the_sequence_probability(runs, copy, beam):
    """And the sequence log-probability is the search's own score (no length penalty)."""
    model = Transducer.from_checkpoint(runs["soft"])
    predictions = model.transduce(_lines(copy)[:20], input_format="tsv", beam=beam, nbest=beam)
    for prediction, explained in zip(predictions, model.explain(predictions), strict=True):
        assert len(explained) == len(prediction.texts) == beam
        for k, said in enumerate(explained):
            assert len(said.symbol_probs) == len(prediction.symbols[k]) + 1  # and the end
            assert math.fsum(math.log(p) for p in said.symbol_probs) == pytest.approx(
                said.log_prob, abs=1e-6
            )
            assert said.log_prob == pytest.approx(prediction.scores[k], abs=1e-4)
            assert all(0 < p <= 1 for p in said.symbol_probs)


def test_the_alignment_of_a_copy_is_the_diagonal(runs, copy):
    """Hard attention trained to copy: each output symbol comes from the input symbol at
    its own position (the posterior's argmax), for every test word of distinct symbols
    (where a symbol repeats, either copy of it is a right alignment)."""
    lines = [
        line
        for line in _lines(copy)
        if len(set(line.split("\t")[0].split())) == len(line.split("\t")[0].split())
    ]
    model = Transducer.from_checkpoint(runs["hard"])
    predictions = model.transduce(lines, input_format="tsv")
    diagonal = 0
    for prediction, (said,) in zip(predictions, model.explain(predictions), strict=True):
        n = len(prediction.symbols[0])
        diagonal += said.alignment == [(j, j) for j in range(n)]
    assert len(lines) >= 10 and diagonal >= 0.9 * len(lines), f"{diagonal} of {len(lines)}"


def test_decode_prints_scores_and_alignments(runs, copy, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("abc\n\ncab\n", encoding="utf-8")
    run = runs["hard"]
    invoke = CliRunner().invoke
    aligned = invoke(app, ["decode", str(run), str(words), "--alignment"])
    assert aligned.exit_code == 0, aligned.output
    rows = aligned.stdout.splitlines()
    assert rows[1] == "\t" and rows[0].split("\t")[1] == "0-0 1-1 2-2"
    scored = invoke(
        app,
        ["decode", str(run), str(words), "--scores", "--alignment", "--nbest", "2", "--beam", "2"],
    )
    assert scored.exit_code == 0, scored.output
    lines = [json.loads(line) for line in scored.stdout.splitlines()]
    assert [line["line"] for line in lines] == [1, 2, 3] and lines[1]["outputs"] == []
    best = lines[0]["outputs"][0]
    assert best["text"] == "a b c" and best["alignment"] == "0-0 1-1 2-2"
    assert len(best["symbol_probs"]) == 4 and best["log_prob"] <= 0
    nbest = invoke(
        app, ["decode", str(run), str(words), "--alignment", "--nbest", "2", "--beam", "2"]
    )
    assert nbest.stdout.splitlines()[0].count("\t") == 3  # line, text, score, alignment


def test_an_ensemble_is_refused_in_one_line(runs, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("abc\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["decode", str(runs["soft"]), str(runs["hard"]), str(words), "--scores"]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "one sequence-to-sequence model" in lines[0]


def test_prob_mass_one_returns_every_output_of_the_exhaustive_enumeration(runs):
    """Outputs of at most 2 symbols over the model's target vocabulary (but <pad>, <s> and
    <sep>, which decoding never writes; the end forced after 2): a beam wide enough holds
    them all, and `prob_mass` 1.0 keeps every one (their probabilities, without the end
    forced at the limit, add up to less); a smaller mass keeps the shortest best-first
    prefix that reaches it."""
    import itertools

    from transduce.config import DecodeConfig
    from transduce.decoding import decode_all
    from transduce.special import BOS_ID, EOS_ID, PAD_ID, SEP_ID

    model = Transducer.from_checkpoint(runs["soft"])
    source = model.source_vocab.encode(list("ab"))
    size = len(model.target_vocab)
    symbols = [i for i in range(size) if i not in (EOS_ID, PAD_ID, BOS_ID, SEP_ID)]
    everything = [()] + [(a,) for a in symbols] + list(itertools.product(symbols, repeat=2))
    wide = DecodeConfig(beam=len(everything) + 5, nbest=len(everything) + 5, max_output_length=2)
    found = decode_all(model.model, [source], DecodeConfig(**{**wide.__dict__, "prob_mass": 1.0}))[
        0
    ]
    assert sorted(tuple(h.tokens) for h in found) == sorted(everything)
    assert math.fsum(math.exp(h.score) for h in found) < 1.0 + 1e-6
    best_first = decode_all(model.model, [source], wide)[0]
    masses = list(itertools.accumulate(math.exp(h.score) for h in best_first))
    mass = (masses[1] + masses[2]) / 2  # reached by the third hypothesis, not before
    some = decode_all(model.model, [source], DecodeConfig(**{**wide.__dict__, "prob_mass": mass}))
    assert [h.tokens for h in some[0]] == [h.tokens for h in best_first[:3]]


def test_alignment_posterior_is_the_models_exact_posterior(runs, tmp_path):
    """`--alignment-posterior`: the JSON's matrix is `alignment_posterior` of the model on
    (input, output), its rows distributions over the input symbols; the text column lists
    the pairs of at least 0.01, the diagonal of a copy among them, most probable."""
    import torch

    from transduce.data.batching import collate

    words = tmp_path / "words.txt"
    words.write_text("abc\ncab\n", encoding="utf-8")
    invoke = CliRunner().invoke
    run = runs["hard"]
    scored = invoke(app, ["decode", str(run), str(words), "--scores", "--alignment-posterior"])
    assert scored.exit_code == 0, scored.output
    model = Transducer.from_checkpoint(run)
    for line in scored.stdout.splitlines():
        best = json.loads(line)["outputs"][0]
        matrix = best["alignment_posterior"]
        source = list(best["text"].replace(" ", ""))  # a copy: the output is the input
        assert len(matrix) == len(best["symbols"]) and all(len(r) == 3 for r in matrix)
        assert all(abs(math.fsum(row) - 1) < 1e-5 for row in matrix)
        batch = collate(
            [model.source_vocab.encode(source)], [model.target_vocab.encode(best["symbols"])]
        )
        expected = model.model.alignment_posterior(batch)[0, 0, : len(matrix)]
        assert torch.allclose(expected, torch.tensor(matrix), atol=1e-6)
        pairs = dict(pair.split(":") for pair in best["alignment"].split())
        assert all(float(p) >= 0.01 for p in pairs.values())
        assert {"0-0", "1-1", "2-2"} <= set(pairs) and float(pairs["1-1"]) > 0.5
    text = invoke(app, ["decode", str(run), str(words), "--alignment-posterior"])
    assert text.exit_code == 0 and ":" in text.stdout.splitlines()[0].split("\t")[1]


def test_alignment_posterior_is_refused_for_attention(runs, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("abc\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["decode", str(runs["soft"]), str(words), "--alignment-posterior"]
    )
    assert result.exit_code == 2 and result.stdout == ""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a latent alignment" in lines[0]
