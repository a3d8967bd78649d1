"""The copy mechanism (`transduce.models.copy`): See et al.'s (2017) eq. (9) by hand, the
models' distributions against it, the vocabulary it needs, and a toy task that only a
copying model can solve."""

from __future__ import annotations

import math

import pytest
import torch

from transduce.data.batching import collate
from transduce.data.dataset import Pair, build_vocabs
from transduce.models import build_model
from transduce.models.copy import copy_map, mix, mix_emission
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
