"""Greedy and beam search over the step API."""

from __future__ import annotations

import random

import pytest
import torch

from transduce import decoding
from transduce.config import DecodeConfig
from transduce.data.batching import collate
from transduce.decoding import beam_search, copy_index_of, decode_all, greedy, never_written
from transduce.ensemble import Ensemble
from transduce.models import build_model
from transduce.models.lstm import LSTMConfig
from transduce.models.transformer import TransformerConfig
from transduce.special import EOS_ID, SEP_ID

MODELS = {
    "lstm": LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7),
    "transformer": TransformerConfig(
        encoder_layers=1, decoder_layers=2, d_model=16, heads=2, feedforward=24
    ),
}


def sources(n: int = 30) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randint(5, 11) for _ in range(rng.randint(1, 6))] for _ in range(n)]


@pytest.fixture(params=list(MODELS))
def model(request):
    torch.manual_seed(1)
    return build_model(request.param, MODELS[request.param], 12, 12).eval()


def test_greedy_equals_beam_of_one(model):
    batch = collate(sources())
    for g, b in zip(greedy(model, batch), beam_search(model, batch, beam=1)):
        assert g.tokens == b[0].tokens
        assert g.score == pytest.approx(b[0].score, abs=1e-4)


def test_nbest_is_ordered_and_scores_are_log_probabilities(model):
    batch = collate(sources(10))
    for hyps in beam_search(model, batch, beam=4, nbest=4, length_penalty=0.6):
        assert len(hyps) == 4
        normalized = [h.normalized for h in hyps]
        assert normalized == sorted(normalized, reverse=True)
        for h in hyps:
            assert h.score <= 0
            assert h.normalized == pytest.approx(h.score / (len(h.tokens) + 1) ** 0.6)


def test_scores_are_the_model_probabilities(model):
    batch = collate(sources(5))
    for row, hyp in enumerate(greedy(model, batch)):
        one = collate([batch.source[row][batch.source_mask[row]].tolist()], [hyp.tokens])
        with torch.no_grad():
            output = model(one)
        picked = output.log_probs.gather(-1, one.target_out.unsqueeze(-1)).squeeze(-1)
        assert hyp.score == pytest.approx(picked.sum().item(), abs=1e-4)


def test_output_limits(model):
    batch = collate(sources(8))
    for hyp in greedy(model, batch, max_output_length=3):
        assert len(hyp.tokens) <= 3
    for hyps in beam_search(model, batch, beam=3, max_output_length=2):
        assert all(len(h.tokens) <= 2 for h in hyps)
    lengths = batch.source_mask.sum(1).tolist()
    for hyp, length in zip(greedy(model, batch), lengths):
        assert len(hyp.tokens) <= 2 * length + 10


def test_decode_all_keeps_the_input_order(model):
    data = sources(40)
    together = decode_all(model, data, DecodeConfig(batch_size=7))
    alone = [decode_all(model, [s], DecodeConfig(batch_size=1))[0] for s in data[:10]]
    assert [h[0].tokens for h in together[:10]] == [h[0].tokens for h in alone]


def test_outputs_stop_within_learned_positions():
    """A transformer with learned positions never decodes past max_positions."""
    torch.manual_seed(1)
    config = TransformerConfig(
        encoder_layers=1,
        decoder_layers=1,
        d_model=16,
        heads=2,
        feedforward=24,
        positions="learned",
        max_positions=6,
        tie_embeddings="none",
    )
    model = build_model("transformer", config, 12, 12).eval()
    with torch.no_grad():
        model.output.bias[EOS_ID] = -1e4  # never ends by itself: runs to the limit
    batch = collate([[5, 6, 7, 8, 9, 10]])  # default limit 2 x 6 + 10 = 22 > 6 positions
    hyps = [greedy(model, batch)[0], *beam_search(model, batch, beam=3, nbest=3)[0]]
    assert [len(h.tokens) for h in hyps] == [5, 5, 5, 5]
    assert [len(h.tokens) for h in greedy(model, batch, max_output_length=50)] == [5]


class Markov:
    """A decoder without a model: its next-symbol probabilities (`probabilities`) depend
    only on the last symbol and the step."""

    A, B, C = 5, 6, 7
    max_length = None
    width = 12  # V, or V + K with K extended ids

    def init_state(self, batch):
        return {"t": torch.zeros(len(batch), dtype=torch.long)}

    def probabilities(self, previous: int, t: int) -> dict[int, float]:
        raise NotImplementedError

    def step(self, state, previous):
        from transduce.models.base import Step

        rows = []
        for token, t in zip(previous.tolist(), state["t"].tolist()):
            row = torch.full((self.width,), 1e-30, dtype=torch.float64)
            for symbol, p in self.probabilities(token, t).items():
                row[symbol] = p
            rows.append((row / row.sum()).log().float())
        attention = torch.zeros(len(rows), 1, 1)
        return Step(torch.stack(rows), attention, {"t": state["t"] + 1})

    def exact(self, limit: int, alpha: float) -> list[tuple[float, list[int]]]:
        """Every output of at most `limit` symbols, by normalized log-probability."""
        found = []
        paths = [([], 0.0)]
        for t in range(limit + 1):
            longer = []
            for tokens, score in paths:
                previous = tokens[-1] if tokens else 1  # BOS
                for symbol, p in self.probabilities(previous, t).items():
                    total = score + torch.tensor(p).log().item()
                    if symbol == EOS_ID:
                        found.append((total / (len(tokens) + 1) ** alpha, tokens))
                    elif t < limit:
                        longer.append(([*tokens, symbol], total))
            paths = longer
        return sorted(found, key=lambda f: -f[0])


class Peaked(Markov):
    """Written so that beam search goes wrong if it stops at the first `width` ended
    hypotheses: the best output, a a a a (probability 0.96^5 with its end), is still being
    written when the unlikely alternatives b, c, a b, a c, ... have ended (each near 0.02;
    no two outputs are equally likely), because after b or c the end is almost certain."""

    def probabilities(self, previous: int, t: int) -> dict[int, float]:
        if previous in (self.B, self.C):
            return {EOS_ID: 0.99, self.B: 0.006, self.C: 0.004}
        good = EOS_ID if t == 4 else self.A
        return {good: 0.96, self.B: 0.025, self.C: 0.015}


class Random(Markov):
    """Peaked random distributions over a, b, c and the end, one for each last symbol and
    step (seeded)."""

    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        symbols = (EOS_ID, self.A, self.B, self.C)
        self.table = {}
        for previous in (1, self.A, self.B, self.C):  # BOS and the three symbols
            for t in range(13):
                draw = torch.rand(4, generator=generator) ** 4  # mostly one large
                self.table[previous, t] = dict(zip(symbols, (draw / draw.sum()).tolist()))

    def probabilities(self, previous: int, t: int) -> dict[int, float]:
        return self.table[previous, t]


@pytest.mark.parametrize("width", [2, 3, 5])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_keeps_the_best_hypothesis_while_poor_ones_end(width, alpha):
    """The beam's best output is the best of all outputs (enumerated), a a a a, and its
    n-best are the exact n best: the search does not end when `width` poor hypotheses
    have ended while the best one is still live (it ended with "b" before)."""
    model = Peaked()
    batch = collate([[5, 6], [7]])  # limits 2 x 2 + 10 and 2 x 1 + 10 symbols
    found = beam_search(model, batch, beam=width, nbest=width, length_penalty=alpha)
    for hyps, length in zip(found, [2, 1]):
        exact = model.exact(2 * length + 10, alpha)
        assert hyps[0].tokens == [Peaked.A] * 4
        assert hyps[0].score == pytest.approx(5 * torch.tensor(0.96).log().item(), abs=1e-4)
        assert [h.tokens for h in hyps] == [tokens for _, tokens in exact[:width]]
        best = [score for score, _ in exact[:width]]
        assert [h.normalized for h in hyps] == pytest.approx(best, abs=1e-4)


def test_settled_by_hand():
    """Two ended hypotheses of normalized scores -1 and -2; a live one of score -2.5 with 1
    symbol, an output limit of 4. alpha 0: it can reach -2.5 at best, under -2: settled
    with width 2 (not with width 3: only two have ended). alpha 1: a live -4.5 can reach
    -4.5 / 5 = -0.9 at the limit (its near end, -4.5 / 2 = -2.25, would wrongly settle
    it). alpha -1: -2.5 x 2 = -5 at best, at its near end (the far end, -0.9 x 5 = -4.5,
    would wrongly settle a live -0.9, which can reach -1.8)."""
    from transduce.decoding import Hypothesis, _settled

    ended = [Hypothesis([5], -1.0, -1.0), Hypothesis([5, 6], -2.0, -2.0)]
    assert _settled(ended, 2, -2.5, 1, 4, 0.0)
    assert not _settled(ended, 3, -2.5, 1, 4, 0.0)
    assert not _settled(ended, 2, -1.9, 1, 4, 0.0)
    assert not _settled(ended, 2, -4.5, 1, 4, 1.0)  # -0.9 > -2
    assert _settled(ended, 2, -12.0, 1, 4, 1.0)  # -12 / 5 = -2.4 < -2
    assert _settled(ended, 2, -2.5, 1, 4, -1.0)  # -5 < -2
    assert not _settled(ended, 2, -0.9, 1, 4, -1.0)  # -0.9 x 2 = -1.8 > -2


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.6, 1.0])
def test_beam_search_ends_a_sentence_only_when_nothing_live_can_change_its_nbest(
    alpha, monkeypatch
):
    """On random peaked tables, the n-best of the search equal those of the same search
    that never ends a sentence before its output limit: ending earlier lost nothing."""
    import transduce.decoding as decoding

    batch = collate([[5], [6]])  # output limits 2 x 1 + 10 = 12 symbols
    models = [Random(seed) for seed in range(40)]
    found = [
        beam_search(m, batch, width, alpha, nbest=width) for m in models for width in (1, 2, 3)
    ]
    monkeypatch.setattr(decoding, "_settled", lambda *args: False)
    full = [beam_search(m, batch, width, alpha, nbest=width) for m in models for width in (1, 2, 3)]
    for ours, expected in zip(found, full):
        for hyps, all_hyps in zip(ours, expected):
            assert [h.tokens for h in hyps] == [h.tokens for h in all_hyps]


class Tagged(Markov):
    """A copying model's next symbols over sources "[x] [y] <sep> a ...": ids 9 and 10 are
    the tags' output ids (`copy_index`), 11 a letter's; the model prefers 9, then `<sep>`,
    then 10, and 11 least, then ends."""

    def init_state(self, batch):
        index = batch.source + 4  # source id s -> output id s + 4, <sep> (4) -> 8 ...
        index = index.masked_fill(batch.source == SEP_ID, SEP_ID)
        return {**super().init_state(batch), "copy_index": index}

    def probabilities(self, previous: int, t: int) -> dict[int, float]:
        if t == 0:
            return {9: 0.4, SEP_ID: 0.3, 10: 0.2, 11: 0.1}
        return {EOS_ID: 1.0}


@pytest.mark.parametrize("beam", [1, 3])
def test_no_output_holds_a_tag_or_sep(beam):
    """By hand: a source's tags (before its first <sep>) copy to ids 9 and 10, its lemma
    to 11 (and, in the third, to 9 too). Neither search writes <sep>, nor a tag that is not
    also in the lemma; a source without <sep> has no tags, and only <sep> is ruled out."""
    sources = [[5, 6, SEP_ID, 7], [5, 6, SEP_ID, 7, 5], [5, 6, 7]]
    found = (
        [h.tokens for h in greedy(Tagged(), collate(sources))]
        if beam == 1
        else [h[0].tokens for h in beam_search(Tagged(), collate(sources), beam=beam)]
    )
    assert found == [[11], [9], [9]]


class Unknown(Markov):
    """A copying model with V = 12 and K = 2 extended ids (`transduce.models.copy`): a tag
    that neither vocabulary has (source id 5 here) copies to 12, such a lemma letter (7)
    to 13; the model prefers 12, then 13, then ends."""

    width = 14

    def init_state(self, batch):
        index = torch.full_like(batch.source, 11)
        index[batch.source == 5] = 12
        index[batch.source == 7] = 13
        index[batch.source == SEP_ID] = SEP_ID
        return {**super().init_state(batch), "copy_index": index}

    def probabilities(self, previous: int, t: int) -> dict[int, float]:
        if t == 0:
            return {12: 0.5, 13: 0.3, EOS_ID: 0.2}
        return {EOS_ID: 1.0}


@pytest.mark.parametrize("beam", [1, 3])
def test_the_rule_covers_extended_ids(beam):
    """An unknown tag's extended id is never written; an unknown lemma letter's is, and so
    is the tag's where the lemma holds the same symbol."""
    sources = [[5, SEP_ID, 7], [5, SEP_ID, 7, 5]]
    found = (
        [h.tokens for h in greedy(Unknown(), collate(sources))]
        if beam == 1
        else [h[0].tokens for h in beam_search(Unknown(), collate(sources), beam=beam)]
    )
    assert found == [[13], [12]]


def test_never_written_by_hand():
    source = torch.tensor(
        [[5, 6, SEP_ID, 7, 5, 0], [9, SEP_ID, 9, 10, SEP_ID, 0], [7, 8, 0, 0, 0, 0]]
    )
    index = torch.tensor([[15, 16, 4, 17, 15, 0], [19, 4, 19, 20, 4, 0], [17, 18, 0, 0, 0, 0]])
    never = never_written(source, index, 22)
    assert never.nonzero().tolist() == [[0, SEP_ID], [0, 16], [1, SEP_ID], [2, SEP_ID]]
    assert never_written(source, None, 22).nonzero().tolist() == [[r, SEP_ID] for r in range(3)]
    scripted = torch.jit.script(never_written)  # as `transduce.export` compiles it
    assert torch.equal(scripted(source, index, 22), never)
    assert copy_index_of({"t": source, "1/copy_index": index}) is index
    assert copy_index_of({"t": source}) is None


def _copying_lstm():
    """An untrained copy LSTM whose copy map gives every source symbol its own output id."""
    config = LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7, copy=True)
    model = build_model("lstm", config, 12, 12).eval()
    model.copy_map.copy_(torch.arange(12))
    return model


def _banned(source: list[int]) -> set[int]:
    """What `never_written` rules out for this source under the identity copy map: <sep>,
    and the symbols before its first <sep> that the rest does not hold."""
    cut = source.index(SEP_ID) if SEP_ID in source else 0
    return {SEP_ID} | (set(source[:cut]) - set(source[cut + 1 :]))


@pytest.mark.parametrize("beam", [1, 3])
def test_the_rule_follows_its_rows_as_sentences_end(beam):
    """An untrained copy model whose copy map gives every source symbol its own output id,
    on sources with and without tags whose outputs end at different steps: decoded
    together, each sentence's output is the one it gets alone (the rule's rows stay with
    their sentences as others leave the batch), and none holds <sep> or a tag-only id."""
    torch.manual_seed(4)
    model = _copying_lstm()
    rng = random.Random(2)
    data = []
    for _ in range(24):
        tags = [rng.randint(9, 11) for _ in range(rng.randint(0, 2))]
        lemma = [rng.randint(5, 11) for _ in range(rng.randint(1, 6))]
        data.append([*tags, SEP_ID, *lemma] if tags else lemma)
    options = DecodeConfig(beam=beam, batch_size=24)
    together = [h[0].tokens for h in decode_all(model, data, options)]
    alone = [decode_all(model, [s], options)[0][0].tokens for s in data]
    assert together == alone
    assert len({len(t) for t in together}) > 2  # sentences end at different steps
    for source, tokens in zip(data, together):
        assert not _banned(source) & set(tokens), (source, tokens)


@pytest.mark.parametrize("beam", [1, 3])
def test_an_ensemble_with_a_copying_member_follows_the_rule(beam, monkeypatch):
    """An ensemble of a plain and a copying LSTM (untrained; the copy map gives every
    source symbol its own output id) writes no <sep> and no tag-only id; with the rule
    off, the same ensemble writes some, so the check can fail."""
    torch.manual_seed(5)
    plain = build_model("lstm", MODELS["lstm"], 12, 12).eval()
    ensemble = Ensemble([plain, _copying_lstm()]).eval()
    rng = random.Random(3)
    data = []
    for _ in range(40):
        tags = [rng.randint(9, 11) for _ in range(rng.randint(1, 3))]
        data.append([*tags, SEP_ID, *(rng.randint(5, 8) for _ in range(rng.randint(1, 4)))])

    def written() -> int:
        outputs = decode_all(ensemble, data, DecodeConfig(beam=beam, batch_size=16))
        return sum(len(_banned(s) & set(h[0].tokens)) for s, h in zip(data, outputs))

    assert written() == 0
    monkeypatch.setattr(
        decoding,
        "never_written",
        lambda source, index, width: torch.zeros(
            len(source), width, dtype=torch.bool, device=source.device
        ),
    )
    assert written() > 0
