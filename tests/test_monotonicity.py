"""The monotonicity loss and %mono (Rios et al. 2021, eqs. 3-4 and §4.2), by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.monotonicity import (
    MonotonicityStats,
    monotonicity_loss,
    pairwise_costs,
    select_mechanisms,
)
from transduce.schedules import MonotonicityWeight
from transduce.special import SEP_ID
from transduce.training import Trainer

from .toy import TINY_LSTM, recipe, write_task

DIAGONAL = torch.eye(3)
REVERSED = torch.eye(3).flip(1)
CONSTANT = torch.tensor([[0.0, 1.0, 0.0]] * 3)


def one(matrix: torch.Tensor, source=None):
    """A batch of one: attention 1 x 1 x T x S, source ids, masks (every position real)."""
    T, S = matrix.shape
    source = torch.tensor([source or [7] * S])
    return matrix[None, None].double(), source, source != 0, torch.ones(1, T, dtype=torch.bool)


def stats_of(matrix, delta, source=None) -> tuple[float, float]:
    stats = MonotonicityStats(["attention"], delta)
    stats.add(*one(matrix, source))
    return stats.loss(0), stats.percent(0)


# |X| = |Y| = 3, so the margin delta |X| / |Y| = delta. Mean positions (eq. 3): diagonal
# 1, 2, 3; reversed 3, 2, 1; constant 2, 2, 2. Eq. (4) per pair: (a_i - a_{i+1} + delta) / 3;
# L_mono = the sum over the 2 pairs / 3 target tokens.
@pytest.mark.parametrize(
    ("matrix", "delta", "loss", "mono"),
    [
        (DIAGONAL, 0.0, 0.0, 100.0),
        (DIAGONAL, 0.5, 0.0, 100.0),
        (DIAGONAL, 1.0, 0.0, 100.0),  # rises by exactly |X| / |Y|: monotone
        (REVERSED, 0.0, (1 / 3 + 1 / 3) / 3, 0.0),
        (REVERSED, 0.5, (1.5 / 3 + 1.5 / 3) / 3, 0.0),
        (REVERSED, 1.0, (2 / 3 + 2 / 3) / 3, 0.0),
        (CONSTANT, 0.0, 0.0, 100.0),  # weakly increasing
        (CONSTANT, 0.5, (0.5 / 3 + 0.5 / 3) / 3, 0.0),
        (CONSTANT, 1.0, (1 / 3 + 1 / 3) / 3, 0.0),
    ],
    ids=[f"{m}-{d}" for m in ("diagonal", "reversed", "constant") for d in (0, 0.5, 1)],
)
def test_hand_computed_loss_and_percent(matrix, delta, loss, mono):
    assert stats_of(matrix, delta) == (pytest.approx(loss), pytest.approx(mono))
    attention, source, source_mask, target_mask = one(matrix)
    value = monotonicity_loss(attention, source, source_mask, target_mask, delta, [0])
    assert float(value) == pytest.approx(loss)


def test_unequal_lengths_and_a_half_monotone_output():
    # |X| = 4, |Y| = 3: margin at delta 1 is 4/3. Mean positions 1.5, 3.5, 3.0.
    matrix = torch.tensor([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], [0, 0, 1.0, 0]])
    loss, mono = stats_of(matrix, 1.0)
    # pair 1: (1.5 - 3.5 + 4/3) / 4 < 0 -> 0; pair 2: (3.5 - 3 + 4/3) / 4 = 11/24
    assert loss == pytest.approx((11 / 24) / 3) and mono == pytest.approx(50.0)
    assert stats_of(matrix, 0.0) == (pytest.approx((0.5 / 4) / 3), pytest.approx(50.0))


def test_sentences_summed_is_batch_size_times_tokens_with_equal_lengths():
    """The issue's case: B = 20 sentences of equal length, the authors' normalization
    (each sentence's costs / its |Y|, summed over the batch) is exactly 20 times ours."""
    torch.manual_seed(0)
    attention = torch.softmax(torch.randn(20, 2, 6, 5, dtype=torch.double), dim=-1)
    source = torch.full((20, 5), 7)
    target_mask = torch.ones(20, 6, dtype=torch.bool)
    args = (attention, source, source != 0, target_mask, 0.0, [0, 1])
    ours = monotonicity_loss(*args)
    theirs = monotonicity_loss(*args, normalize="sentences_summed")
    assert float(ours) > 0 and float(theirs) == pytest.approx(20 * float(ours))


def test_sentences_summed_by_hand_with_unequal_lengths():
    # sentence 1: REVERSED (|Y| = 3): costs 1/3 + 1/3; sentence 2: the first two steps of
    # REVERSED and one padded step (|Y| = 2): cost 1/3
    attention = torch.stack([REVERSED, REVERSED]).double()[:, None]  # 2 x 1 x 3 x 3
    source = torch.full((2, 3), 7)
    target_mask = torch.tensor([[True, True, True], [True, True, False]])
    args = (attention, source, source != 0, target_mask, 0.0, [0])
    assert float(monotonicity_loss(*args)) == pytest.approx((2 / 3 + 1 / 3) / 5)
    summed = monotonicity_loss(*args, normalize="sentences_summed")
    assert float(summed) == pytest.approx((2 / 3) / 3 + (1 / 3) / 2)
    with pytest.raises(ValueError, match="normalize"):
        monotonicity_loss(*args, normalize="batch")


def authors_of(matrices, delta=0.0):
    """mono_authors and loss_authors of a batch of (T x S) attention matrices."""
    T = max(m.shape[0] for m in matrices)
    S = max(m.shape[1] for m in matrices)
    attention = torch.zeros(len(matrices), 1, T, S, dtype=torch.double)
    source = torch.zeros(len(matrices), S, dtype=torch.long)
    target_mask = torch.zeros(len(matrices), T, dtype=torch.bool)
    for b, m in enumerate(matrices):
        attention[b, 0, : m.shape[0], : m.shape[1]] = m
        source[b, : m.shape[1]] = 7
        target_mask[b, : m.shape[0]] = True
    stats = MonotonicityStats(["attention"], delta)
    stats.add(attention, source, source != 0, target_mask)
    overall = stats.summary()["overall"]
    return overall["mono_authors"], overall["loss_authors"], overall["mono"]


def test_the_authors_measures_by_hand():
    # a diagonal of |X| = |Y| = 5: 4 strictly rising pairs over |Y| = 5 steps: 80 (ours 100)
    assert authors_of([torch.eye(5)]) == (pytest.approx(80.0), 0.0, pytest.approx(100.0))
    # attention stuck on one position: no pair strictly rises: 0 (ours: 100, ties count)
    stuck = torch.zeros(5, 5)
    stuck[:, 2] = 1
    assert authors_of([stuck]) == (0.0, 0.0, pytest.approx(100.0))
    # REVERSED, |Y| = 3: d = a_i - a_{i+1} = 1, 1; loss without /|X|: (1 + 1) / 3
    assert authors_of([REVERSED]) == (0.0, pytest.approx(2 / 3), 0.0)
    # per sentence, then the mean over sentences: (80 + 0) / 2, not pooled over pairs
    mono, loss, ours = authors_of([torch.eye(5), REVERSED])
    assert mono == pytest.approx(40.0) and loss == pytest.approx((0 + 2 / 3) / 2)
    assert ours == pytest.approx(100 * 4 / 6)  # ours pools the 6 pairs
    # |X| = 4, |Y| = 3, delta 1 (margin 4/3): mean positions 1.5, 3.5, 3.0;
    # d_1 = -2 + 4/3 < 0 (rises), d_2 = 0.5 + 4/3 = 11/6
    matrix = torch.tensor([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], [0, 0, 1.0, 0]])
    mono, loss, _ = authors_of([matrix], delta=1.0)
    assert mono == pytest.approx(100 / 3) and loss == pytest.approx((11 / 6) / 3)


def test_sep_positions_lemma_or_absolute_the_issues_case():
    """`V SG 3 <sep> u s e`; step 1 all on u, step 2 half on V, half on s. Ours (lemma):
    the tags' mass is set aside, a = 1, 2: no cost. The authors' (absolute): u s e at 5 6
    7, the tags at 0, not renormalized: a = 5, 3; (5 - 3) / |X| = 2/3 over |Y| = 2."""
    V, SG, THREE, u, s_, e = 20, 21, 22, 23, 24, 25
    source = torch.tensor([[V, SG, THREE, SEP_ID, u, s_, e]])
    attention = torch.zeros(1, 1, 2, 7, dtype=torch.double)
    attention[0, 0, 0, 4] = 1.0
    attention[0, 0, 1, 0] = attention[0, 0, 1, 5] = 0.5
    target_mask = torch.ones(1, 2, dtype=torch.bool)
    args = (attention, source, source != 0, target_mask, 0.0, [0])
    assert float(monotonicity_loss(*args)) == 0.0
    theirs = monotonicity_loss(*args, sep_positions="absolute")
    assert float(theirs) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="sep_positions"):
        monotonicity_loss(*args, sep_positions="relative")
    # the authors' measures read the absolute positions; ours the lemma's
    stats = MonotonicityStats(["attention"], 0.0)
    stats.add(attention, source, source != 0, target_mask)
    overall = stats.summary()["overall"]
    assert overall["mono"] == pytest.approx(100.0) and overall["loss"] == 0.0
    assert overall["mono_authors"] == 0.0 and overall["loss_authors"] == pytest.approx(1.0)


def test_padding_is_left_out():
    # item 1: the diagonal of 2 x 2 inside a 3 x 3 padded batch; item 2: reversed 3 x 3
    attention = torch.zeros(2, 1, 3, 3, dtype=torch.float64)
    attention[0, 0, :2, :2] = torch.eye(2)
    attention[1, 0] = REVERSED
    source = torch.tensor([[7, 7, 0], [7, 7, 7]])
    target_mask = torch.tensor([[True, True, False], [True, True, True]])
    stats = MonotonicityStats(["attention"], 0.0)
    stats.add(attention, source, source != 0, target_mask)
    assert stats.pairs == 1 + 2 and stats.tokens == 2 + 3
    assert stats.percent(0) == pytest.approx(100 / 3)
    assert stats.loss(0) == pytest.approx((1 / 3 + 1 / 3) / 5)


def test_sums_over_batches_add_up_and_a_sentence_without_counted_positions_is_left_out():
    # the running sums stay on the device and are read when asked for: after each batch
    # alone, and after both, the counts and sums are those of the parts
    a, b, both = (MonotonicityStats(["attention"], 0.0) for _ in range(3))
    for matrix, alone in ((REVERSED, a), (DIAGONAL, b)):
        alone.add(*one(matrix))
        both.add(*one(matrix))
        assert both.tokens == alone.tokens + (3 if alone is b else 0)  # read between batches
    assert both.pairs == a.pairs + b.pairs == 4 and both.tokens == 6 and both.sentences == 2
    for name in ("cost", "monotone", "rising", "cost_authors"):
        assert getattr(both, name)[0] == pytest.approx(getattr(a, name)[0] + getattr(b, name)[0])
    assert both.percent(0) == pytest.approx(50.0)  # the diagonal's 2 pairs of 4
    assert both.monotone == [2] and both.percent_authors(0) == pytest.approx(100 * (0 + 2 / 3) / 2)
    # a batch of the reversed sentence and one of tags only ([8, <sep>]: no counted
    # position): the second adds its tokens but no sentence, and nothing of its attention
    # (here not a number), to the authors' measures
    attention = torch.zeros(2, 1, 3, 3, dtype=torch.float64)
    attention[0, 0] = REVERSED
    attention[1, 0] = float("nan")  # whatever it holds: nothing of it is counted
    source = torch.tensor([[7, 7, 7], [8, SEP_ID, 0]])
    target_mask = torch.ones(2, 3, dtype=torch.bool)
    mixed = MonotonicityStats(["attention"], 0.0)
    mixed.add(attention, source, source != 0, target_mask)
    assert mixed.sentences == 1 and mixed.tokens == 6
    assert mixed.percent_authors(0) == pytest.approx(a.percent_authors(0))
    assert mixed.loss_authors(0) == pytest.approx(a.loss_authors(0))
    empty = MonotonicityStats(["x", "y"], 0.0).summary()
    assert empty["overall"] == {"mono": 0.0, "loss": 0.0, "mono_authors": 0.0, "loss_authors": 0.0}


def test_positions_left_of_the_separator_are_left_out():
    # tags t1 t2 <sep> l1 l2 l3: |X| = 3. Step 1 puts half its mass on a tag: renormalized
    # over the lemma it is at l1 (a = 1); step 2 at l3 (a = 3); step 3 at l2 (a = 2).
    matrix = torch.zeros(3, 6)
    matrix[0, 0], matrix[0, 3] = 0.5, 0.5
    matrix[1, 5] = 1.0
    matrix[2, 4] = 1.0
    source = [8, 9, SEP_ID, 10, 11, 12]
    loss, mono = stats_of(matrix, 0.0, source)
    assert loss == pytest.approx(((3 - 2) / 3) / 3) and mono == pytest.approx(50.0)
    terms, _ = pairwise_costs(*one(matrix, source), delta=0.0)
    assert terms[0, 0].tolist() == pytest.approx([(1 - 3) / 3, (3 - 2) / 3])


def test_reverse_swaps_the_direction():
    attention, source, source_mask, target_mask = one(REVERSED)
    forward = monotonicity_loss(attention, source, source_mask, target_mask, 0.0, [0])
    backward = monotonicity_loss(attention, source, source_mask, target_mask, 0.0, [0], True)
    assert float(forward) > 0 and float(backward) == 0


def test_gradient_of_the_loss():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, 6, dtype=torch.float64, requires_grad=True)
    source = torch.tensor([[7] * 6, [7, 7, 7, 7, 0, 0]])
    target_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])

    def loss(logits):
        attention = torch.softmax(logits.masked_fill(source[:, None, None] == 0, -1e9), -1)
        return monotonicity_loss(attention, source, source != 0, target_mask, 0.5, [0, 2])

    assert float(loss(logits).detach()) > 0
    assert torch.autograd.gradcheck(loss, (logits,))


def test_mechanism_selection():
    names = [f"decoder.{layer}.head.{head}" for layer in (1, 2) for head in (1, 2, 3)]
    assert select_mechanisms(names, "all", "all") == list(range(6))
    assert select_mechanisms(names, "all", [1]) == [0, 3]  # one head per layer
    assert select_mechanisms(names, [2], [2, 3]) == [4, 5]
    assert select_mechanisms(["attention"], [1], [1]) == [0]
    with pytest.raises(ConfigError, match="no head 4"):
        select_mechanisms(names, "all", [4])


def test_weight_schedules():
    def weight(**options):
        data = {"data": {"prepared": "x"}, "model": {"name": "lstm"}}
        data["loss"] = {"monotonicity": {"weight": 0.2, **options}}
        m = configuration.parse(data).loss.monotonicity
        return [MonotonicityWeight(m).at(u) for u in (1, 50, 100, 150)]

    assert weight() == [0.2] * 4
    assert weight(schedule="linear_decay", until=100) == pytest.approx([0.198, 0.1, 0, 0])
    assert weight(schedule="step", until=100, factor=0.5) == [0.2, 0.2, 0.2, 0.1]
    with pytest.raises(ConfigError, match="until: the step schedule needs"):
        weight(schedule="step")


def test_training_with_the_loss_raises_percent_mono(tmp_path: Path):
    task = write_task(tmp_path, "reverse", n=300)  # reversal: the baseline is not monotone
    runs = {}
    for weight in (0.0, 10.0):  # a short run: a large weight, for the loss to matter yet
        data = recipe(task, TINY_LSTM, max_epochs=4)
        data["loss"] = {"monotonicity": {"weight": weight}}
        report = Trainer(configuration.parse(data), tmp_path / f"w{weight}").run()
        runs[weight] = report["history"][-1]["dev_monotonicity"]["overall"]
    assert runs[10.0]["mono"] > runs[0.0]["mono"] + 30, runs
    assert runs[10.0]["loss"] < runs[0.0]["loss"] / 2, runs


def test_the_recipe_normalization_reaches_the_training_loss(tmp_path: Path, monkeypatch):
    import transduce.tasks.seq2seq as seq2seq

    seen = []

    def spy(*args, **kwargs):
        seen.append(args[7:] + tuple(kwargs.values()))
        return monotonicity_loss(*args, **kwargs)

    monkeypatch.setattr(seq2seq, "monotonicity_loss", spy)
    task = write_task(tmp_path, "copy", n=60)
    data = recipe(task, TINY_LSTM, max_updates=2, validate_every=2)
    data["loss"] = {
        "monotonicity": {
            "weight": 0.1,
            "normalize": "sentences_summed",
            "sep_positions": "absolute",
        }
    }
    Trainer(configuration.parse(data), tmp_path / "run").run()
    assert seen and all(call[-2:] == ("sentences_summed", "absolute") for call in seen), seen


def test_the_loss_after_dropout_reads_dropped_heads_as_zero_and_they_cost_nothing(
    tmp_path: Path, monkeypatch
):
    """`reads: attention_after_dropout` (the authors' runs): a head DropHead dropped mixes
    nothing and its attention is all 0, so it costs nothing; `reads: attention` reads the
    softmax weights, never all 0."""
    import transduce.tasks.seq2seq as seq2seq
    from transduce.models import build_model
    from transduce.models.transformer import TransformerConfig

    config = TransformerConfig(
        encoder_layers=1, decoder_layers=1, d_model=16, heads=4, feedforward=32,
        dropout=0.0, drophead=0.5,
    )  # fmt: skip
    model = build_model("transformer", config, 12, 12).train()
    from transduce.data.batching import collate

    batch = collate([[5, 6, 7, 8], [9, 10, 11]], [[6, 5, 8], [9, 9]])
    torch.manual_seed(3)
    output = model(batch)
    used, weights = output.attention_after_dropout, output.attention
    dropped = used.sum(dim=-1).eq(0).all(dim=-1)  # B x K: every step of the head is 0
    assert dropped.any() and (~dropped).any()
    for b in range(2):  # one decoder layer of 4 heads: the kept ones scaled by 4 / kept
        kept = ~dropped[b]
        if kept.any():
            assert torch.allclose(used[b, kept], weights[b, kept] * 4 / int(kept.sum()))
    for b, k in dropped.nonzero().tolist():
        cost = monotonicity_loss(
            used[b : b + 1], batch.source[b : b + 1], batch.source_mask[b : b + 1],
            batch.target_mask[b : b + 1], 0.0, [k],
        )  # fmt: skip
        assert float(cost.detach()) == 0.0
    assert model.eval()(batch).attention_after_dropout is None
    # through training: which tensor reaches the loss
    seen = []

    def spy(attention, *args, **kwargs):
        seen.append(attention.detach())
        return monotonicity_loss(attention, *args, **kwargs)

    monkeypatch.setattr(seq2seq, "monotonicity_loss", spy)
    task = write_task(tmp_path, "copy", n=60)
    tiny = {"name": "transformer", "encoder_layers": 1, "decoder_layers": 1, "d_model": 16,
            "heads": 4, "feedforward": 32, "dropout": 0.0, "drophead": 0.5}  # fmt: skip
    zero_rows = {}
    for reads in ("attention", "attention_after_dropout"):
        seen.clear()
        data = recipe(task, tiny, max_updates=3, validate_every=3)
        data["loss"] = {"monotonicity": {"weight": 0.1, "reads": reads}}
        Trainer(configuration.parse(data), tmp_path / reads).run()
        zero_rows[reads] = sum(int(a.sum(dim=-1).eq(0).all(dim=-1).sum()) for a in seen)
    assert zero_rows["attention"] == 0 and zero_rows["attention_after_dropout"] > 0, zero_rows


def test_separator_centred_positions():
    from transduce.models.transformer import separator_positions

    source = torch.tensor([[8, 9, SEP_ID, 10, 11, 0], [10, 11, 12, 0, 0, 0]])
    assert separator_positions(source).tolist() == [[-2, -1, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    with pytest.raises(ConfigError, match="separator needs sinusoidal positions"):
        configuration.parse(
            {
                "data": {"prepared": "x"},
                "model": {
                    "name": "transformer",
                    "positions": "learned",
                    "position_scheme": "separator",
                },
            }
        )


def test_drophead_drops_whole_heads_and_rescales():
    from transduce.models.transformer import DropHead

    torch.manual_seed(0)
    layer = DropHead(0.5).train()
    x = torch.ones(4000, 4, 3, 2)
    y = layer(x)
    per_head = y[:, :, 0, 0]  # each head is 0 or scaled as a whole
    assert (y == per_head[:, :, None, None]).all()
    kept = (per_head > 0).sum(dim=1)
    scale = per_head.max(dim=1).values
    assert torch.equal(scale[kept > 0], (4 / kept[kept > 0]).float())
    assert per_head.sum(dim=1)[kept > 0].eq(4).all()  # heads / kept: the sum is kept
    assert abs(float((per_head > 0).float().mean()) - 0.5) < 0.02
    assert torch.equal(layer.eval()(x), x)


def test_drophead_inverse_keep_scales_by_one_over_keep_probability():
    """The authors' Sockeye fork: kept heads x 1 / (1 - p) (p = 0.2: 1.25), whatever the
    number kept; ours: x H / kept (4 heads, 3 kept: 4/3)."""
    from transduce.models.transformer import DropHead

    x = torch.ones(4000, 4, 3, 2)
    torch.manual_seed(0)
    theirs = DropHead(0.2, "inverse_keep").train()(x)[:, :, 0, 0]
    torch.manual_seed(0)
    ours = DropHead(0.2).train()(x)[:, :, 0, 0]
    assert torch.equal(theirs > 0, ours > 0)  # the same heads dropped
    assert torch.allclose(theirs[theirs > 0], torch.tensor(1.25))
    three = (ours > 0).sum(dim=1) == 3
    assert three.any() and torch.allclose(ours[three][ours[three] > 0], torch.tensor(4 / 3))
    with pytest.raises(ValueError, match="drophead_scale"):
        DropHead(0.2, "kept")


def test_the_drophead_scale_reaches_every_attention_of_the_transformer():
    from transduce.models import build_model
    from transduce.models.transformer import DropHead, TransformerConfig

    for scale in ("heads", "inverse_keep"):
        config = TransformerConfig(
            encoder_layers=1, decoder_layers=1, d_model=16, heads=2, feedforward=32,
            drophead=0.2, drophead_scale=scale,
        )  # fmt: skip
        model = build_model("transformer", config, 10, 10)
        layers = [m for m in model.modules() if isinstance(m, DropHead)]
        assert len(layers) == 3 and {m.scale for m in layers} == {scale}


def test_warning_for_the_loss_with_attention_dropout(tmp_path: Path):
    from transduce.progress import Reporter

    class Recorder(Reporter):
        def __init__(self):
            self.messages = []

        def message(self, text):
            self.messages.append(text)

    task = write_task(tmp_path, "copy", n=100)
    model = {
        "name": "transformer",
        "encoder_layers": 1,
        "decoder_layers": 1,
        "d_model": 16,
        "heads": 2,
        "feedforward": 16,
        "attention_dropout": 0.1,
    }
    data = recipe(task, model, max_updates=1)
    data["loss"] = {"monotonicity": {"weight": 0.1}}
    reporter = Recorder()
    Trainer(configuration.parse(data), tmp_path / "run", reporter=reporter).run()
    assert any("degenerate optimum" in m for m in reporter.messages)


@pytest.mark.parametrize(
    "model",
    [
        {**TINY_LSTM, "attention": {"type": "local_monotonic", "scorer": "mlp"}},
        {**TINY_LSTM, "name": "hard", "monotonic": True},
        {
            "name": "transformer",
            "encoder_layers": 1,
            "decoder_layers": 2,
            "d_model": 16,
            "heads": 2,
            "feedforward": 16,
            "drophead": 0.2,
            "position_scheme": "separator",
        },
    ],
    ids=["lstm-local", "hard-monotonic", "transformer"],
)
def test_every_model_trains_with_the_loss_and_is_analyzed_through_the_cli(run, tmp_path, model):
    import json

    import yaml

    task = write_task(tmp_path, "copy", n=100)
    data = recipe(task, model, max_updates=4, validate_every=2)
    data["loss"] = {"monotonicity": {"weight": 0.1, "margin": 0.5, "heads": [1]}}
    config = tmp_path / "mono.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run("train", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    history = json.loads((tmp_path / "run" / "train.json").read_text(encoding="utf-8"))["history"]
    recorded = history[-1]["dev_monotonicity"]
    layers = model.get("decoder_layers", 1)
    assert len(recorded["mechanisms"]) == layers and recorded["delta"] == 0.5  # head 1 of each
    analyzed = run("analyze-monotonicity", tmp_path / "run", task / "dev.tsv", "--json")
    assert analyzed.exit_code == 0, analyzed.output
    heads = model.get("heads", 1)
    assert len(json.loads(analyzed.stdout)["mechanisms"]) == layers * heads
    # the test split's monotonicity in train.json: the best model's, as analyze measures it
    tested = json.loads((tmp_path / "run" / "train.json").read_text(encoding="utf-8"))
    tested = tested["test_monotonicity"]
    analyzed = run("analyze-monotonicity", tmp_path / "run", task / "test.tsv", "--json")
    expected = json.loads(analyzed.stdout)["monotonicity"]["0.5"]["mechanisms"]
    assert tested["delta"] == 0.5 and len(tested["mechanisms"]) == layers
    for name, measures in tested["mechanisms"].items():
        assert measures == pytest.approx(expected[name], rel=1e-5, abs=1e-7), name


def test_negative_positions_are_sinusoids_too():
    import math

    from transduce.models.transformer import Positions

    positions = torch.tensor([[-3, -2, -1, 0, 1, 2, 300]])  # 300: beyond the cached table
    rate = torch.exp(torch.arange(0, 16, 2).float() * (-math.log(10000.0) / 16))
    angle = positions.float().unsqueeze(-1) * rate  # 1 x 7 x 8
    expected = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)
    assert torch.allclose(Positions("sinusoidal", 16, 0)(positions), expected, atol=1e-6)


def test_a_source_end_symbol_is_counted_in_x_as_sockeye_counts_it():
    """Issue 31's worked example: "use" to 3 phones and the end step, the attention on u, s,
    e, e, delta 1. Sockeye appends </s> to the source (`data.source_eos`), so |X| = 4:
    the authors' %mono 0.0 and L_MONO 0.250; without it |X| = 3: 50.0 and 0.188."""
    from transduce.data.vocab import Vocab
    from transduce.special import EOS_ID, SPECIALS

    vocab = Vocab([*SPECIALS, "u", "s", "e"])
    for end, mono, loss in ((True, 0.0, 0.25), (False, 50.0, 0.1875)):
        vocab.end = end
        ids = vocab.encode(["u", "s", "e"])
        assert (ids[-1] == EOS_ID) == end and len(ids) == 3 + end
        source = torch.tensor([ids])
        attention = torch.zeros(1, 1, 4, len(ids))
        for step, position in enumerate([0, 1, 2, 2]):
            attention[0, 0, step, position] = 1.0
        stats = MonotonicityStats(["attention"], delta=1.0)
        stats.add(
            attention,
            source,
            torch.ones_like(source, dtype=torch.bool),
            torch.ones(1, 4, dtype=torch.bool),
        )
        assert stats.percent_authors(0) == pytest.approx(mono)
        assert stats.loss_authors(0) == pytest.approx(loss)


def test_source_eos_reaches_training_and_decoding(tmp_path: Path):
    """`data.source_eos: true`: every source ends in </s> in training, in the checkpoint's
    decoding (the test predictions are decoded again the same), and a tagger refuses it."""
    from transduce.inference import Transducer
    from transduce.special import EOS_ID
    from transduce.tasks import check_task, make_task

    prepared = write_task(tmp_path, "copy", n=150)
    data = recipe(prepared, TINY_LSTM, max_updates=30, validate_every=15)
    data["data"]["source_eos"] = True
    run = tmp_path / "run"
    Trainer(configuration.parse(data), run).run()
    loaded = make_task(configuration.parse(data), torch.device("cpu")).load_data(prepared)
    assert all(source[-1] == EOS_ID for source, _ in loaded.train)  # what training read
    model = Transducer.from_checkpoint(run)
    assert model.source_vocab.encode(["a", "b"])[-1] == EOS_ID
    lines = (prepared / "test.tsv").read_text(encoding="utf-8").splitlines()
    again = [p.texts[0] for p in model.transduce(lines, input_format="tsv")]
    assert again == (run / "test.predictions").read_text(encoding="utf-8").splitlines()
    tagger = configuration.parse(
        {
            "data": {"prepared": str(prepared), "source_eos": True},
            "model": {"name": "san_tagger"},
            "train": {"select_on": "tagacc"},
        }
    )
    with pytest.raises(ConfigError, match="data.source_eos: a tagger tags each word"):
        check_task(tagger)
