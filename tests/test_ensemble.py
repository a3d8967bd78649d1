"""Ensembles at decode time: one model is that model, two are the hand computation of
their combined distributions (exhaustively, for greedy and beam), every family takes part,
and `decode A B` refuses models of different vocabularies in one line."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch import Tensor
from typer.testing import CliRunner

from transduce.cli import app
from transduce.config import DecodeConfig
from transduce.data.batching import Batch, collate
from transduce.data.prepare import PrepareRequest, prepare
from transduce.decoding import beam_search, decode_all, greedy
from transduce.ensemble import Ensemble, combine
from transduce.models import build_model
from transduce.models.base import ModelConfig, Seq2SeqModel, Seq2SeqOutput, State, Step
from transduce.special import BOS_ID, EOS_ID, PAD_ID, SEP_ID

from .test_models import VARIANTS
from .toy import TINY_LSTM, recipe, write_task

VOCAB = 14
SOURCES = [[5, 6, 7, 8, 9], [9, 5], [6, 6, 6, 7, 8, 9, 10], [11]]


def test_combine_is_the_mean_of_probabilities_or_of_log_probabilities():
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.1, 0.3, 0.6])
    mean = combine([p.log(), q.log()])
    assert torch.allclose(mean.exp(), torch.tensor([0.4, 0.25, 0.35]))
    geometric = (p * q).sqrt()  # exp of the mean log-probability, then renormalized
    logs = combine([p.log(), q.log()], "log-probability")
    assert torch.allclose(logs.exp(), geometric / geometric.sum())
    assert torch.allclose(combine([p.log()]), p.log()) and torch.allclose(
        combine([p.log()], "log-probability"), p.log()
    )


class Table(Seq2SeqModel):
    """A toy model whose next-symbol distribution is a fixed function of the prefix: the
    same logits for every sentence, drawn from a seeded generator per (prefix length,
    last symbol)."""

    name = "table"
    Config = ModelConfig

    def __init__(self, seed: int, vocab: int = 6) -> None:
        super().__init__(ModelConfig(), vocab, vocab)
        generator = torch.Generator().manual_seed(seed)
        self.logits = torch.randn(8, vocab, vocab, generator=generator) * 2  # t x prev x V

    @property
    def attention_names(self) -> list[str]:
        return ["attention"]

    def distribution(self, t: int, previous: int) -> Tensor:
        return torch.log_softmax(self.logits[min(t, 7), previous], dim=-1)

    def forward(self, batch: Batch) -> Seq2SeqOutput:
        raise NotImplementedError  # not needed: decoding only

    def init_state(self, batch: Batch) -> State:
        return {"t": torch.zeros(len(batch), dtype=torch.long)}

    def step(self, state: State, previous: Tensor) -> Step:
        t = state["t"]
        log_probs = torch.stack(
            [self.distribution(int(a), int(b)) for a, b in zip(t, previous)]
        )  # B x V
        return Step(log_probs, torch.zeros(len(t), 1, 1), {"t": t + 1})


def _exhaustive(models: list[Table], mean: str, length: int) -> list[tuple[float, list[int]]]:
    """Every output of at most `length` symbols with its combined score, best first: what
    beam search must find when the beam holds them all."""
    symbols = [s for s in range(6) if s not in (PAD_ID, BOS_ID, EOS_ID, SEP_ID)]

    def step_log_probs(t: int, previous: int) -> Tensor:
        combined = combine([m.distribution(t, previous) for m in models], mean)
        combined[PAD_ID] = combined[BOS_ID] = combined[SEP_ID] = -math.inf  # as decoding does
        return combined

    scored = []
    for n in range(length + 1):
        for output in itertools.product(symbols, repeat=n):
            score, previous = 0.0, BOS_ID
            for t, symbol in enumerate(output):
                score += float(step_log_probs(t, previous)[symbol])
                previous = symbol
            score += float(step_log_probs(n, previous)[EOS_ID])
            scored.append((score, list(output)))
    return sorted(scored, key=lambda x: -x[0])


@pytest.mark.parametrize("mean", ["probability", "log-probability"])
def test_two_models_decode_as_the_hand_computed_combination(mean: str):
    models = [Table(1), Table(2)]
    ensemble = Ensemble(models, mean).eval()
    batch = collate([[3]])  # the table models ignore the source
    length = 3
    best = _exhaustive(models, mean, length)
    # beam search with a beam that holds every prefix: the exhaustive top 5, scores equal
    hyps = beam_search(ensemble, batch, beam=3**length + 1, nbest=5, max_output_length=length)[0]
    assert [h.tokens for h in hyps] == [tokens for _, tokens in best[:5]]
    for h, (score, _) in zip(hyps, best):
        assert h.score == pytest.approx(score, abs=1e-5)
    # greedy: the argmax of the combined distribution at every step, by hand
    hyp = greedy(ensemble, batch, max_output_length=length)[0]
    tokens, previous, score = [], BOS_ID, 0.0
    for t in range(length + 1):
        combined = combine([m.distribution(t, previous) for m in models], mean)
        combined[PAD_ID] = combined[BOS_ID] = -math.inf
        choice = EOS_ID if t == length else int(combined.argmax())
        score += float(combined[choice])
        if choice == EOS_ID:
            break
        tokens.append(choice)
        previous = choice
    assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=1e-5)
    # and the combination differs from either model alone (the test can fail)
    alone = [beam_search(m, batch, beam=40, nbest=5, max_output_length=length)[0] for m in models]
    assert all([h.score for h in a] != [h.score for h in hyps] for a in alone)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_family_ensembles(variant: str):
    """An ensemble of one model is that model; of two, its teacher-forced distribution is
    the combination of theirs, and decoding scores what that distribution says."""
    family, config = VARIANTS[variant]
    torch.manual_seed(3)
    first = build_model(family, config, VOCAB, VOCAB).eval()
    second = build_model(family, config, VOCAB, VOCAB).eval()
    data = [s for s in SOURCES]
    options = DecodeConfig(beam=3, nbest=2, batch_size=4)
    alone = decode_all(first, data, options)
    one = decode_all(Ensemble([first]), data, options)
    for a, b in zip(alone, one):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    pair = Ensemble([first, second]).eval()
    targets = [[5, 6], [7, 8, 9, 5, 12], [6], [13, 12, 11]]
    batch = collate(SOURCES, targets)
    with torch.no_grad():
        expected = combine([first(batch).log_probs, second(batch).log_probs])
        output = pair(batch)
    mask = batch.target_mask
    assert torch.allclose(output.log_probs[mask], expected[mask], atol=1e-5)
    assert len(output.attention_names) == 2 * len(first.attention_names)
    hyps = decode_all(pair, data, DecodeConfig(beam=2, batch_size=4))
    for source, (hyp,) in zip(data, hyps):
        one_batch = collate([source], [hyp.tokens])
        with torch.no_grad():
            log_probs = pair(one_batch).log_probs
        picked = log_probs.gather(-1, one_batch.target_out.unsqueeze(-1)).sum()
        assert hyp.score == pytest.approx(float(picked), abs=1e-3)


# ------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny models on one prepared dataset, and one on another."""
    root = tmp_path_factory.mktemp("ensemble")
    prepared = write_task(root, "reverse", n=120)
    raw = root / "upper.tsv"  # another target vocabulary: upper-case letters
    words = sorted({line.split("\t")[0] for line in (prepared / "train.tsv").open()})
    raw.write_text("".join(f"{w.replace(' ', '')}\t{w.upper()}\n" for w in words))
    other = root / "upper"
    prepare(PrepareRequest("tsv", other, inputs={"train": [raw]}, dev_ratio=0.1, test_ratio=0.1))
    made = []
    for name, data, seed in (("a", prepared, 1), ("b", prepared, 2), ("c", other, 1)):
        config = root / f"{name}.yaml"
        settings = recipe(data, TINY_LSTM, max_updates=30, validate_every=15, seed=seed)
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        result = CliRunner().invoke(
            app, ["train", "-q", "--config", str(config), "--out", str(root / name), "--no-test"]
        )
        assert result.exit_code == 0, result.output
        made.append(root / name)
    return made, prepared


def test_decode_an_ensemble_from_the_command_line(run, runs, tmp_path: Path):
    (a, b, c), _prepared = runs
    words = tmp_path / "words.txt"
    words.write_text("abc\nbca\ncab\n", encoding="utf-8")
    single = run("decode", a, words)
    same = run("decode", a, a / "best.pt", words)  # a model with itself: the model
    assert single.exit_code == 0 and same.exit_code == 0, same.output
    assert same.stdout == single.stdout
    report = tmp_path / "report.json"
    pair = run("decode", a, b, words, "--beam", "3", "--report", report)
    assert pair.exit_code == 0, pair.output
    assert len(pair.stdout.splitlines()) == 3
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["ensemble"] == [str(a / "best.pt"), str(b / "best.pt")]
    assert written["options"]["ensemble_mean"] == "probability"
    stdin = run("decode", a, b, "--nbest", "2", "--beam", "2", input="abc\n")
    assert stdin.exit_code == 0 and len(stdin.stdout.splitlines()) == 2
    mismatched = run("decode", a, c, words)
    assert mismatched.exit_code == 2
    lines = [line for line in mismatched.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "an ensemble needs models trained on the same" in lines[0]


def test_a_pipe_as_input_is_read_whole(runs, tmp_path: Path):
    """Telling a model from the input reads only regular files: a pipe keeps its bytes."""
    import subprocess

    from .conftest import transduce_env

    (a, _, _), _ = runs
    command = f"printf 'abc\\nbca\\n' | transduce decode {a} /dev/stdin"
    piped = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=transduce_env()
    )
    direct = subprocess.run(
        ["bash", "-c", f"printf 'abc\\nbca\\n' | transduce decode {a} -"],
        capture_output=True, text=True, env=transduce_env(),
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == direct.stdout and len(piped.stdout.splitlines()) == 2
