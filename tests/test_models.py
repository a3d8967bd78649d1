"""The model contract for every model of the zoo, and the shared layers."""

from __future__ import annotations

import pytest
import torch

from transduce.data.batching import collate
from transduce.models import MODELS, Seq2SeqModel, build_model
from transduce.models.attention import AttentionConfig
from transduce.models.hard import HardAttentionConfig
from transduce.models.layers import BiLSTM, Dropout
from transduce.models.lstm import LSTMConfig
from transduce.models.transformer import TransformerConfig

VOCAB = 14

# Every model of the registry, in the variants its options allow.
VARIANTS = {
    "lstm-general": (
        "lstm",
        LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7, encoder_layers=2),
    ),
    "lstm-dot": (
        "lstm",
        LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=12, attention="dot"),
    ),
    "lstm-mlp-feeding": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            attention="mlp",
            input_feeding=True,
            decoder_layers=2,
        ),
    ),
    "lstm-tied": (
        "lstm",
        LSTMConfig(
            embedding_dim=9, encoder_size=6, decoder_size=7, output_size=9, tie_embeddings=True
        ),
    ),
    "lstm-feeding-linear-matched": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            input_feeding=True,
            feed_merge="linear",
            match_parameters=True,
        ),
    ),
    "lstm-local-monotonic-mlp": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            attention=AttentionConfig(type="local_monotonic", scorer="mlp", window=1),
            attention_size=5,
        ),
    ),
    "lstm-local-monotonic-constrained-feeding": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            attention=AttentionConfig(
                type="local_monotonic", position="constrained", max_step=2.0, scale=False
            ),
            input_feeding=True,
        ),
    ),
    "lstm-local-monotonic-softplus-none": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=12,
            attention=AttentionConfig(type="local_monotonic", scorer="none", position="softplus"),
        ),
    ),
    "lstm-local-m-dot": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=12,
            attention=AttentionConfig(type="local_m_gaussian", scorer="dot", window=1, sigma=2.0),
        ),
    ),
    "lstm-local-m-plain-mlp": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            attention=AttentionConfig(type="local_m", scorer="mlp", window=1),
        ),
    ),
    "lstm-copy": (
        "lstm",
        LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7, copy=True),
    ),
    "lstm-copy-feeding-local-m": (
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            input_feeding=True,
            attention=AttentionConfig(type="local_m", window=1),
            copy=True,
        ),
    ),
    "lstm-sockeye": (  # Sockeye 1.18's RNN (Rios et al. 2021): tests/test_sockeye_rnn.py
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_layers=2,
            encoder_bidirectional_layers=1,
            encoder_size=3,
            decoder_layers=2,
            decoder_size=6,
            attention="mlp",
            input_feeding=True,
            output_size=6,
            decoder_init="last",
            init="xavier",
        ),
    ),
    "lstm-decoder-init-last-unidirectional-copy": (  # the parallel decoder path
        "lstm",
        LSTMConfig(
            embedding_dim=8,
            encoder_layers=2,
            encoder_bidirectional_layers=0,
            encoder_size=6,
            decoder_layers=2,
            decoder_size=7,
            decoder_init="last",
            copy=True,
        ),
    ),
    "hard-exact-copy": (
        "hard",
        HardAttentionConfig(embedding_dim=8, encoder_size=6, decoder_size=7, copy=True),
    ),
    "hard-monotonic-copy": (
        "hard",
        HardAttentionConfig(
            embedding_dim=8, encoder_size=6, decoder_size=7, monotonic=True, copy=True
        ),
    ),
    "hard-exact": (
        "hard",
        HardAttentionConfig(embedding_dim=8, encoder_size=6, decoder_size=7, encoder_layers=2),
    ),
    "hard-monotonic-mlp": (
        "hard",
        HardAttentionConfig(
            embedding_dim=8, encoder_size=6, decoder_size=7, attention="mlp", monotonic=True
        ),
    ),
    "hard-reinforce": (
        "hard",
        HardAttentionConfig(embedding_dim=8, encoder_size=6, decoder_size=7, estimator="reinforce"),
    ),
    "hard-reinforce-feeding": (
        "hard",
        HardAttentionConfig(
            embedding_dim=8,
            encoder_size=6,
            decoder_size=7,
            estimator="reinforce",
            input_feeding=True,
            decoder_layers=2,
            samples=3,
        ),
    ),
    "hard-reinforce-feeding-sockeye": (
        "hard",
        HardAttentionConfig(
            embedding_dim=8,
            encoder_size=3,
            encoder_bidirectional_layers=1,
            decoder_size=7,
            estimator="reinforce",
            input_feeding=True,
            decoder_init="last",
            init="xavier",
        ),
    ),
    "transformer-pre": (
        "transformer",
        TransformerConfig(encoder_layers=2, decoder_layers=2, d_model=16, heads=4, feedforward=24),
    ),
    "transformer-copy": (
        "transformer",
        TransformerConfig(
            encoder_layers=1, decoder_layers=2, d_model=16, heads=4, feedforward=24, copy=True
        ),
    ),
    "transformer-post-learned": (
        "transformer",
        TransformerConfig(
            decoder_layers=3,
            d_model=16,
            heads=2,
            feedforward=24,
            norm="post",
            positions="learned",
            tie_embeddings="none",
        ),
    ),
    "transformer-drophead-separator": (
        "transformer",
        TransformerConfig(
            encoder_layers=1,
            decoder_layers=2,
            d_model=16,
            heads=4,
            feedforward=24,
            drophead=0.3,
            position_scheme="separator",
        ),
    ),
    "transformer-dufter-encoder": (
        "transformer",
        TransformerConfig(
            encoder_layers=2,
            decoder_layers=1,
            d_model=16,
            heads=2,
            feedforward=24,
            max_positions=12,
            position_mode="direct_both",
            learnable_temperature=True,
            conv_attention="conv1d",
            conv_layers=[2],
        ),
    ),
    "transformer-concat-conv2d": (
        "transformer",
        TransformerConfig(
            encoder_layers=1,
            decoder_layers=1,
            d_model=16,
            heads=2,
            feedforward=24,
            position_mode="concat",
            position_dim=6,
            conv_attention="conv2d",
        ),
    ),
    "transformer-tie-all": (
        "transformer",
        TransformerConfig(
            encoder_layers=1,
            decoder_layers=1,
            d_model=16,
            heads=2,
            feedforward=24,
            tie_embeddings="all",
        ),
    ),
}


def test_every_registered_model_has_variants():
    seq2seq = {name for name, cls in MODELS.items() if issubclass(cls, Seq2SeqModel)}
    assert {family for family, _ in VARIANTS.values()} == seq2seq
    assert set(MODELS) - seq2seq == {"san_tagger"}  # tests/test_tagger.py


def batch():
    sources = [[5, 6, 7, 8, 9], [9, 5], [6, 6, 6, 7, 8, 9, 10], [11]]
    targets = [[5, 6], [7, 8, 9, 5, 12], [6], [13, 12, 11]]
    return collate(sources, targets)


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_equals_a_loop_of_steps(variant):
    family, config = VARIANTS[variant]
    torch.manual_seed(0)
    model = build_model(family, config, VOCAB, VOCAB).eval()
    b = batch()
    output = model(b)
    B, T = b.target_in.shape
    K = len(model.attention_names)
    assert output.log_probs.shape == (B, T, VOCAB)
    assert output.attention.shape == (B, K, T, b.source.shape[1])
    state = model.init_state(b)
    log_probs, attention = [], []
    for t in range(T):
        step = model.step(state, b.target_in[:, t])
        state = step.state
        log_probs.append(step.log_probs)
        attention.append(step.attention)
    stepped_lp = torch.stack(log_probs, dim=1)  # B x T x V
    stepped_att = torch.stack(attention, dim=2)  # B x K x T x S
    mask = b.target_mask
    assert torch.allclose(output.log_probs[mask], stepped_lp[mask], atol=1e-5)
    assert torch.allclose(
        output.attention.permute(0, 2, 1, 3)[mask], stepped_att.permute(0, 2, 1, 3)[mask], atol=1e-5
    )
    # attention is a distribution over the real source positions only
    sums = output.attention.sum(-1)[:, :, mask[0]]
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)
    assert output.attention.masked_select(~b.source_mask[:, None, None, :]).abs().max() == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_loss_and_gradients(variant):
    family, config = VARIANTS[variant]
    torch.manual_seed(0)
    model = build_model(family, config, VOCAB, VOCAB).train()
    b = batch()
    output = model(b)
    losses = model.loss(b, output, label_smoothing=0.1)
    losses["loss"].backward()
    assert torch.isfinite(losses["loss"]) and losses["nll"] > 0
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # the nll is the mean negative log-probability of the reference tokens
    picked = output.log_probs.gather(-1, b.target_out.unsqueeze(-1)).squeeze(-1)[b.target_mask]
    assert losses["nll"].item() == pytest.approx(-picked.mean().item(), rel=1e-5)


def test_bilstm_equals_a_packed_bidirectional_lstm():
    torch.manual_seed(0)
    ours = BiLSTM(5, 4, layers=2, dropout=0.0)
    packed_lstm = torch.nn.LSTM(5, 4, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():  # copy our weights into PyTorch's layout
        for layer in range(2):
            for direction, source in (
                ("", ours.forward_layers[layer]),
                ("_reverse", ours.backward_layers[layer]),
            ):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(packed_lstm, f"{name}_l{layer}{direction}").copy_(
                        getattr(source, f"{name}_l0")
                    )
    x = torch.randn(3, 6, 5)
    lengths = torch.tensor([6, 2, 4])
    mine = ours(x, lengths)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, lengths, batch_first=True, enforce_sorted=False
    )
    theirs, _ = torch.nn.utils.rnn.pad_packed_sequence(
        packed_lstm(packed)[0], batch_first=True, total_length=6
    )
    mask = torch.arange(6)[None, :] < lengths[:, None]
    assert torch.allclose(mine[mask], theirs[mask], atol=1e-6)


def test_dropout_keeps_the_expected_share_and_scales():
    torch.manual_seed(0)
    layer = Dropout(0.3).train()
    x = torch.ones(200_000)
    y = layer(x)
    kept = (y != 0).float().mean().item()
    assert kept == pytest.approx(0.7, abs=0.005)
    assert y[y != 0].unique().tolist() == [pytest.approx(1 / 0.7)]
    assert torch.equal(layer.eval()(x), x)
    assert Dropout(0.0).train()(x) is x


# ------------------------------------------------ tag_input and attend_tags (lstm)

TAGGED = [[12, 13, 4, 5, 6, 7], [13, 4, 8, 9], [5, 6, 7]]  # tags, <sep> (id 4), lemma; none


def tag_model(**options) -> torch.nn.Module:
    config = LSTMConfig(
        embedding_dim=6, encoder_layers=1, encoder_size=5, decoder_size=7, dropout=0.0, **options
    )
    torch.manual_seed(0)
    return build_model("lstm", config, VOCAB, VOCAB).eval()


@pytest.mark.parametrize(
    "options",
    [
        {"tag_input": True},
        {"tag_input": True, "attend_tags": False, "copy": True},
        {"tag_input": True, "attend_tags": False, "input_feeding": True},
    ],
    ids=["tag-input", "lemma-only-copy", "lemma-only-feeding"],
)
def test_tag_input_forward_equals_steps_and_reads_the_tags(options):
    model = tag_model(**options)
    b = collate(TAGGED, [[5, 6, 9], [8, 9], [7, 5]])
    output = model(b)
    state = model.init_state(b)
    stepped = []
    for t in range(b.target_in.shape[1]):
        step = model.step(state, b.target_in[:, t])
        state, _ = step.state, stepped.append(step.log_probs)
    mask = b.target_mask
    assert torch.allclose(output.log_probs[mask], torch.stack(stepped, 1)[mask], atol=1e-5)
    tags = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]).bool()
    assert torch.equal(model._tag_positions(b.source), tags)
    # the vector by hand: ReLU(W (e(12) + e(13)) + b) for the first source, ReLU(b) for
    # the source without <sep>
    e, W = model.source_embedding.weight, model.tag_projection
    by_hand = torch.relu(W(e[12] + e[13]))
    assert torch.allclose(model._tags(b.source)[0], by_hand, atol=1e-6)
    assert torch.allclose(model._tags(b.source)[2], torch.relu(W.bias), atol=1e-6)
    attention = output.attention[:, 0]  # B x T x S
    if options.get("attend_tags", True):
        assert attention[0, 0, :2].sum() > 0
    else:  # nothing on the tags: they reach the decoder through the vector alone
        assert attention[tags.unsqueeze(1).expand_as(attention)].abs().max() == 0
    # the vector enters every step (the option is not ignored): with it zeroed, every
    # step's distribution moves
    with torch.no_grad():
        W.weight.zero_(), W.bias.zero_()
    moved = (model(b).log_probs - output.log_probs).abs().amax(-1)[mask]
    assert bool((moved > 1e-6).all()), moved


def test_tag_options_are_checked():
    assert any("attend_tags" in p for p in LSTMConfig(attend_tags=False).check())
    local = LSTMConfig(tag_input=True, attend_tags=False, attention=AttentionConfig(type="local_m"))
    assert any("global attention" in p for p in local.check())
    assert HardAttentionConfig(tag_input=True, attend_tags=False, monotonic=True).check() == []
    assert any("attend_tags" in p for p in HardAttentionConfig(attend_tags=False).check())
