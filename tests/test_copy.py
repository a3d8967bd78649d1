"""The copy mechanism (`transduce.models.copy`): See et al.'s (2017) eq. (9) by hand, the
models' distributions against it, the vocabulary it needs, and a toy task that only a
copying model can solve."""

from __future__ import annotations

import math

import pytest
import torch

from transduce.data.batching import collate, mark_unknown
from transduce.data.dataset import Pair, build_vocabs
from transduce.data.vocab import Vocab
from transduce.models import build_model
from transduce.models.copy import copy_map, copy_targets, mix, mix_emission
from transduce.models.hard import HardAttentionConfig
from transduce.models.lstm import LSTMConfig
from transduce.models.transformer import TransformerConfig
from transduce.special import SPECIALS, UNK_ID


def test_mix_by_hand():
    # V = 7: ids 5 and 6 are "a" and "b"; the source is "a b a" (target ids 5, 6, 5)
    p_vocab = torch.tensor([[0.0, 0.0, 0.1, 0.0, 0.0, 0.6, 0.3]])
    attention = torch.tensor([[0.5, 0.3, 0.2]])
    index = torch.tensor([[5, 6, 5]])
    gate = torch.tensor([math.log(0.25 / 0.75)])  # p_gen = 0.25
    got = mix(p_vocab.clamp_min(1e-30).log(), gate, attention, index).exp()
    expected = 0.25 * p_vocab + 0.75 * torch.tensor([[0, 0, 0, 0, 0, 0.7, 0.3]])
    assert torch.allclose(got, expected, atol=1e-6)
    assert got.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_mix_emission_by_hand():
    # two alignments j = 0 ("a", id 5) and j = 1 ("b", id 6); p_gen 0.5 and 0.1
    p_vocab = torch.tensor(
        [[[0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.8], [0.0, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0]]]
    )
    gate = torch.tensor([[0.0, math.log(0.1 / 0.9)]])
    index = torch.tensor([[5, 6]])
    got = mix_emission(p_vocab.clamp_min(1e-30).log(), gate, index).exp()
    expected = torch.tensor(
        [[[0, 0, 0.1, 0, 0, 0.5, 0.4], [0, 0, 0.05, 0, 0, 0.05, 0.9]]], dtype=torch.float32
    )
    assert torch.allclose(got, expected, atol=1e-6)


def test_unknown_source_symbols_get_their_own_ids_by_hand():
    """See et al.'s extended vocabulary: V = 7, the source "a Z b Z Q" with Z and Q unknown
    (ids 7 and 8 = V + k - 1); P_vocab gives them nothing, and <unk> (3) keeps only its
    generation."""
    p_vocab = torch.tensor([[0.0, 0.0, 0.1, 0.2, 0.0, 0.4, 0.3]])
    attention = torch.tensor([[0.1, 0.2, 0.3, 0.15, 0.25]])
    index = torch.tensor([[5, 7, 6, 7, 8]])
    gate = torch.tensor([math.log(0.25 / 0.75)])  # p_gen = 0.25
    used = torch.zeros(1, 2, dtype=torch.bool)  # the row uses both extended ids
    got = mix(p_vocab.clamp_min(1e-30).log(), gate, attention, index, used).exp()
    copy = torch.tensor([[0, 0, 0, 0, 0, 0.1, 0.3, 0.35, 0.25]])
    expected = 0.25 * torch.cat([p_vocab, torch.zeros(1, 2)], dim=-1) + 0.75 * copy
    assert got.shape == (1, 9)
    assert torch.allclose(got, expected, atol=1e-6)
    assert got[0, UNK_ID].item() == pytest.approx(0.25 * 0.2, abs=1e-6)
    # hard attention: an alignment to Z (j = 1) copies Z with 1 - p_gen_1
    emission = torch.tensor([[[0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.8], [0.0, 0.0, 0.5, 0.5, 0, 0, 0]]])
    gates = torch.tensor([[0.0, math.log(0.1 / 0.9)]])
    index = torch.tensor([[5, 7]])
    got = mix_emission(emission.clamp_min(1e-30).log(), gates, index, used).exp()
    expected = torch.tensor(
        [[[0, 0, 0.1, 0, 0, 0.5, 0.4, 0, 0], [0, 0, 0.05, 0.05, 0, 0, 0, 0.9, 0]]],
        dtype=torch.float32,
    )
    assert torch.allclose(got, expected, atol=1e-6)


def test_copy_vocabulary_holds_every_source_symbol():
    pairs = [Pair(("x", "a", "b"), ("a", "b", "c")), Pair(("y", "a"), ("a",))]
    source, target = build_vocabs(pairs, copy=True)
    plain_source, plain_target = build_vocabs(pairs)
    assert plain_target.symbols == [*SPECIALS, "a", "b", "c"]
    assert target.symbols == [*plain_target.symbols, "x", "y"]  # appended, source order
    assert source.symbols == plain_source.symbols
    index = copy_map(source.symbols, target.symbols)
    assert [target.symbols[i] for i in index.tolist()] == source.symbols
    assert copy_map(["<pad>", "q"], ["<pad>"]).tolist() == [0, UNK_ID]


def _models():
    small = {"embedding_dim": 8, "encoder_size": 6, "decoder_size": 7, "copy": True}
    return {
        "lstm": build_model("lstm", LSTMConfig(**small), 9, 11),
        "hard": build_model("hard", HardAttentionConfig(**small), 9, 11),
        "transformer": build_model(
            "transformer",
            TransformerConfig(
                encoder_layers=1, decoder_layers=2, d_model=8, heads=2, feedforward=8, copy=True
            ),
            9,
            11,
        ),
    }


# source symbols 5..8 are target ids 9, 5, 10, 6: one that the target vocabulary had and
# one appended for copying, each twice
SOURCE = [*SPECIALS, "s5", "s6", "s7", "s8"]
TARGET = [*SPECIALS, "s6", "s8", "t7", "t8", "s5", "s7"]


@pytest.mark.parametrize("family", ["lstm", "hard", "transformer"])
def test_the_models_distribution_is_the_mixture(family):
    torch.manual_seed(0)
    model = _models()[family].eval()
    model.read_vocabularies(SOURCE, TARGET)
    assert model.copy_map.tolist()[5:] == [9, 5, 10, 6]
    b = collate([[5, 6, 7, 8, 5]], [[9, 5]])
    state = model.init_state(b)
    with torch.no_grad():
        model.gate.state.bias.fill_(-60.0)  # p_gen = 0: copy only
        copied = model.step(state, b.target_in[:, 0])
        model.gate.state.bias.fill_(60.0)  # p_gen = 1: no copy
        generated = model.step(state, b.target_in[:, 0])
    p = copied.log_probs.exp()[0]
    assert p.sum().item() == pytest.approx(1.0, abs=1e-5)
    if family != "hard":  # the attention mass of each source symbol, at its target id
        alpha = copied.attention[0, -2:].mean(0)  # lstm: its one; transformer: the last layer
        assert p[9].item() == pytest.approx((alpha[0] + alpha[4]).item(), abs=1e-5)
        assert p[5].item() == pytest.approx(alpha[1].item(), abs=1e-5)
        assert p[10].item() == pytest.approx(alpha[2].item(), abs=1e-5)
        assert p[6].item() == pytest.approx(alpha[3].item(), abs=1e-5)
    assert p[[9, 5, 10, 6]].sum().item() == pytest.approx(1.0, abs=1e-5)  # only copies
    assert p[7].item() < 1e-6 and p[8].item() < 1e-6  # t7, t8: in no source
    assert generated.log_probs.exp()[0, 7].item() > 1e-4  # generation reaches them
    # in between, exactly p_gen * P_vocab + (1 - p_gen) * copy (See et al. eq. 9): t7 can
    # only be generated, so its probability gives p_gen, and every symbol must then agree
    with torch.no_grad():
        model.gate.state.bias.zero_()
        mixed = model.step(state, b.target_in[:, 0]).log_probs.exp()[0]
    assert mixed.sum().item() == pytest.approx(1.0, abs=1e-5)
    if family != "hard":  # (hard: a p_gen per alignment, checked by hand above)
        p_gen = (mixed[7] / generated.log_probs.exp()[0, 7]).item()
        expected = p_gen * generated.log_probs.exp()[0] + (1 - p_gen) * p
        assert torch.allclose(mixed, expected, atol=1e-5)
        assert 0.01 < p_gen < 0.99


def _monotonic():
    small = {"embedding_dim": 8, "encoder_size": 6, "decoder_size": 7, "copy": True}
    return build_model("hard", HardAttentionConfig(**small, monotonic=True), 9, 11)


# two rows: "s5 Z s6 Z Q t7" (Z, Q in neither vocabulary: extended ids 11, 12; t7 in the
# target vocabulary only: its id 7) and "s5 s6", which uses no extended id
UNKNOWN_SOURCES = [[5, UNK_ID, 6, UNK_ID, UNK_ID, UNK_ID], [5, 6]]
UNKNOWN_ROWS = [[0, 12, 0, 12, 13, 8], [0, 0]]


def test_copy_targets_number_the_symbols_neither_vocabulary_has():
    source, target = Vocab(SOURCE), Vocab(TARGET)
    names, row = copy_targets(["s5", "Z", "s6", "Z", "Q", "t7"], source, target.index, 11)
    assert names == ["Z", "Q"] and row == UNKNOWN_ROWS[0]
    b = mark_unknown(collate(UNKNOWN_SOURCES), UNKNOWN_ROWS, 11)
    assert b.copy_oov.tolist() == [UNKNOWN_ROWS[0], [0] * 6]
    assert b.copy_slots.tolist() == [[False, False], [True, True]]  # the second uses none
    plain = collate([[5, 6]])
    assert mark_unknown(plain, [[0, 0]], 11).copy_oov is None  # nothing to copy: as it was


@pytest.mark.parametrize("family", ["lstm", "hard", "hard-monotonic", "transformer"])
def test_the_models_copy_unknown_source_symbols(family):
    """A decoded batch with symbols the source vocabulary lacks (`copy_oov`): the step's
    distribution has V + K entries, the copy mass of a symbol neither vocabulary has at its
    own id (not at <unk>), of one the target vocabulary has at its target id (one id per
    symbol), none at an extended id the row does not use; a step that reads an extended id
    reads <unk>."""
    torch.manual_seed(0)
    model = _monotonic() if family == "hard-monotonic" else _models()[family]
    model.eval().read_vocabularies(SOURCE, TARGET)
    b = mark_unknown(collate(UNKNOWN_SOURCES), UNKNOWN_ROWS, 11)
    state = model.init_state(b)
    first = torch.tensor([1, 1])  # BOS
    with torch.no_grad():
        model.gate.state.bias.fill_(-60.0)  # p_gen = 0: copy only
        copied = model.step(state, first)
        model.gate.state.bias.zero_()
        mixed = model.step(state, first)
    p = copied.log_probs.exp()
    assert p.shape == (2, 13)  # V = 11, and Z, Q at 11 and 12
    assert p.sum(-1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    assert p[0, [9, 5, 11, 12, 7]].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert p[0, UNK_ID].item() < 1e-6  # the unknown symbols' mass is not at <unk>
    assert p[1, 11].item() == 0.0 and p[1, 12].item() == 0.0  # slots the row does not use
    assert mixed.log_probs[1, 11:].eq(float("-inf")).all()
    if family.startswith("hard"):  # the 0th-order model's marginal, by hand (eq. 3)
        alpha = copied.attention[0, 0]  # the prior over the alignments
    else:
        alpha = copied.attention[0, -2:].mean(0)
    assert p[0, 11].item() == pytest.approx((alpha[1] + alpha[3]).item(), abs=1e-5)
    assert p[0, 12].item() == pytest.approx(alpha[4].item(), abs=1e-5)
    assert p[0, 7].item() == pytest.approx(alpha[5].item(), abs=1e-5)  # t7: its target id
    assert mixed.log_probs.exp().sum(-1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    with torch.no_grad():  # the next step after writing Z (id 11)
        after = model.step(copied.state, torch.tensor([11, 5]))
        as_unk = model.step(copied.state, torch.tensor([UNK_ID, 5]))
    assert after.log_probs.exp().sum(-1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    if family != "hard-monotonic":  # (its alignment is conditioned on Z's own emission)
        assert torch.equal(after.log_probs, as_unk.log_probs)


@pytest.mark.parametrize("family", ["lstm", "hard", "hard-monotonic", "transformer"])
def test_teacher_forcing_scores_copied_unknown_symbols_as_decoding_does(family):
    """The teacher-forced pass (what `explain` reads) and the decoder steps give the same
    distributions when the output holds copied unknown symbols (extended ids 11, 12)."""
    torch.manual_seed(0)
    model = _monotonic() if family == "hard-monotonic" else _models()[family]
    model.eval().read_vocabularies(SOURCE, TARGET)
    b = collate(UNKNOWN_SOURCES, [[11, 9, 12, 7], [9]])
    b = mark_unknown(b, UNKNOWN_ROWS, 11)
    with torch.no_grad():
        forced = model(b).log_probs  # B x T x (V + K)
        state, steps = model.init_state(b), []
        for t in range(b.target_in.shape[1]):
            step = model.step(state, b.target_in[:, t])
            steps.append(step.log_probs)
            state = step.state
    assert forced.shape == (2, 5, 13)
    assert torch.allclose(forced[0], torch.stack(steps, dim=1)[0], atol=1e-5)
    assert torch.allclose(forced[1, :2], torch.stack(steps, dim=1)[1, :2], atol=1e-5)
    assert forced[0, torch.arange(5), b.target_out[0]].exp().min().item() > 1e-4


def test_an_ensemble_with_a_member_that_does_not_copy():
    """The members' distributions over V + K: one that does not copy gives the extended
    ids probability 0, and reads a copied unknown symbol as <unk>."""
    from transduce.ensemble import Ensemble, combine

    copying = torch.tensor([[0.0, 0, 0.2, 0, 0, 0.3, 0.1, 0.4]]).clamp_min(1e-30).log()  # V + 1
    plain = torch.tensor([[0.0, 0, 0.5, 0.1, 0, 0.2, 0.2]]).clamp_min(1e-30).log()  # V = 7
    mean = combine([copying, plain]).exp()
    assert mean.shape == (1, 8)
    assert mean[0, 7].item() == pytest.approx(0.2, abs=1e-6)  # (0.4 + 0) / 2
    assert mean[0, 2].item() == pytest.approx(0.35, abs=1e-6)
    assert mean.sum().item() == pytest.approx(1.0, abs=1e-6)
    torch.manual_seed(0)
    copier = _models()["lstm"].eval()
    copier.read_vocabularies(SOURCE, TARGET)
    plain_model = build_model(
        "lstm", LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7), 9, 11
    ).eval()
    ensemble = Ensemble([copier, plain_model]).eval()
    b = mark_unknown(collate([[5, UNK_ID, 6]]), [[0, 12, 0]], 11)
    with torch.no_grad():
        first = ensemble.step(ensemble.init_state(b), torch.tensor([1]))
        after = ensemble.step(first.state, torch.tensor([11]))  # Z, copied
        # by hand: the copier reads id 11 itself, the other member reads <unk>
        one = copier.step(
            copier.step(copier.init_state(b), torch.tensor([1])).state, torch.tensor([11])
        )
        two = plain_model.step(
            plain_model.step(plain_model.init_state(b), torch.tensor([1])).state,
            torch.tensor([UNK_ID]),
        )
    assert first.log_probs.shape == (1, 12)
    assert torch.allclose(after.log_probs, combine([one.log_probs, two.log_probs]), atol=1e-6)
    assert after.log_probs.exp().sum().item() == pytest.approx(1.0, abs=1e-5)


def test_forward_scores_the_copy():
    """Teacher-forced: the log-probability of target symbols that are source symbols
    rises when the copy gate opens (EOS, which no source holds, needs p_gen > 0)."""
    torch.manual_seed(0)
    model = _models()["lstm"].eval()
    model.read_vocabularies(SOURCE, TARGET)
    b = collate([[5, 7, 8]], [[9, 10]])  # "s5 s7": both appended target symbols

    def symbols(bias: float) -> float:  # log p of "s5 s7", EOS left out
        with torch.no_grad():
            model.gate.state.bias.fill_(bias)
            log_probs = model(b).log_probs[0]
        return (log_probs[0, 9] + log_probs[1, 10]).item()

    copying, generating = symbols(-60.0), symbols(60.0)
    assert math.isfinite(copying) and copying > generating + 1.0


def test_a_copy_recipe_learns_and_keeps_its_copy(tmp_path):
    """Through the trainer: the copy gate is in the checkpoint, a symbol seen only in
    sources is in the target vocabulary, and a toy copy task is learned."""
    from transduce import checkpoint
    from transduce import config as configuration
    from transduce.data.prepare import PrepareRequest, prepare
    from transduce.training import Trainer

    from .toy import DEV_BAR, TEST_BAR, TINY_LSTM, recipe, write_task

    write_task(tmp_path, "copy")
    raw = tmp_path / "copy.tsv"
    with raw.open("a", encoding="utf-8") as train:
        train.write("gz\tg\n")  # z: a source symbol that no target holds
    prepared = tmp_path / "with-z"
    inputs = {"train": [raw]}
    prepare(PrepareRequest("tsv", prepared, inputs=inputs, dev_ratio=0.1, test_ratio=0.1))
    data = recipe(prepared, {**TINY_LSTM, "copy": True}, max_epochs=20)
    run = tmp_path / "run"
    report = Trainer(configuration.parse(data), run).run()
    assert report["best"]["score"] >= DEV_BAR
    assert report["test"]["acc"] >= TEST_BAR
    payload = checkpoint.load(run / "best.pt")
    assert "z" in payload["vocab"]["target"] and "z" in payload["vocab"]["source"]
    assert any(key.startswith("gate.") for key in payload["model"])
    copies_unseen_letters(payload)


def copies_unseen_letters(
    payload: dict, device: str = "cpu", rel: float = 1e-4, abs_: float = 1e-12
) -> None:
    """Decoding letters that the toy copy task's training never showed (X, Q): copied as
    themselves, never written <unk>, by one model (greedy, beam n-best and `explain`'s
    probabilities, within `rel` and `abs_`) and by an ensemble. The gate of the checkpoint
    `payload` is shut first (p_gen = 0), so that only copies are possible and the output
    is known. Also run on a GPU (tests/test_cuda.py)."""
    from transduce.inference import Transducer

    payload["model"]["gate.state.bias"].fill_(-60.0)
    model = Transducer.from_checkpoint(payload, device)
    assert model.transduce(["XX"])[0].symbols[0] == ["X"] * 14  # to the limit 2|x| + 10
    predictions = model.transduce(["XQ", "aXb"], beam=3, nbest=2)
    for prediction, letters in zip(predictions, [{"X", "Q"}, {"a", "X", "b"}], strict=True):
        assert len(prediction.symbols) == 2
        assert all(set(s) <= letters and s for s in prediction.symbols)
    for prediction, explained in zip(predictions, model.explain(predictions), strict=True):
        for score, said in zip(prediction.scores, explained, strict=True):
            assert said.log_prob == pytest.approx(score, rel=rel, abs=abs_)
    ensemble = Transducer.ensemble([payload, payload], device)
    assert ensemble.transduce(["QQ"])[0].symbols[0] == ["Q"] * 14
