"""Sockeye 1.18's RNN as options of the `lstm` family (Rios et al. 2021, Tables 6 and 7):
a bidirectional first encoder layer only, the decoder started from the last encoder state,
Xavier initialization; the `paper/rios2021/rnn-*` recipes at the authors' sizes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from transduce import config as configuration
from transduce.data.batching import collate
from transduce.models import build_model
from transduce.models.hard import HardAttentionConfig
from transduce.models.layers import BiLSTM
from transduce.models.lstm import LSTMConfig
from transduce.special import PAD_ID
from transduce.training import Trainer

TINY = LSTMConfig(
    embedding_dim=3,
    encoder_layers=2,
    encoder_bidirectional_layers=1,
    encoder_size=2,  # per direction: the second layer has 4 units
    decoder_layers=1,
    decoder_size=4,
    attention="mlp",
    input_feeding=True,
    output_size=4,
    decoder_init="last",
    init="xavier",
    dropout=0.0,
)


def lstm(inputs: int, hidden: int) -> int:
    """Parameters of one LSTM layer: input and recurrent weights of the four gates, and
    PyTorch's (and MXNet's) two biases."""
    return 4 * hidden * (inputs + hidden) + 2 * 4 * hidden


def sockeye_rnn(embed: int, hidden: int, encoder_layers: int, source: int, target: int) -> int:
    """The parameters of Sockeye 1.18's RNN with a 1-layer decoder, counted from its code
    (`sockeye/encoder.py` `get_recurrent_encoder`, `sockeye/decoder.py` `RecurrentDecoder`,
    `sockeye/rnn_attention.py` `MlpAttention`), plus our mlp attention's key bias."""
    return (
        embed * source  # source embeddings
        + embed * target  # target embeddings
        + 2 * lstm(embed, hidden // 2)  # the bidirectional layer, hidden // 2 per direction
        + (encoder_layers - 1) * lstm(hidden, hidden)  # forward layers above it
        + lstm(embed + hidden, hidden)  # decoder: [embedding; previous attentional state]
        + 2 * (hidden * hidden + hidden)  # enc2decinit_0 and _1: h_0 and c_0 of the layer
        + 2 * hidden * hidden
        + hidden
        + hidden  # attention: e2h (+ bias here), q2h, h2s
        + 2 * hidden * hidden
        + hidden  # the attentional state tanh(W [h; c] + b)
        + hidden * target
        + target  # output layer
    )


def test_parameter_count_of_a_tiny_model_by_hand():
    model = build_model("lstm", TINY, 7, 9)
    by_hand = (
        7 * 3  # source embeddings
        + 9 * 3  # target embeddings
        + 2 * (4 * 2 * (3 + 2) + 2 * 4 * 2)  # layer 1: two directions of 2 units on 3 inputs
        + (4 * 4 * (4 + 4) + 2 * 4 * 4)  # layer 2: one direction of 4 units on 4 inputs
        + (4 * 4 * (3 + 4 + 4) + 2 * 4 * 4)  # decoder: 4 units on 3 + 4 inputs
        + 2 * (4 * 4 + 4)  # h_0 and c_0 maps from the 4-wide last encoder state
        + (4 * 4 + 4 + 4 * 4 + 4)  # mlp attention: key (with bias), query, vector
        + (4 * 8 + 4)  # S of eq. (9): [h; c] (4 + 4) -> 4
        + (4 * 9 + 9)  # W of eq. (8)
    )
    assert by_hand == 689 == sockeye_rnn(3, 4, 2, 7, 9)
    assert model.parameter_count() == by_hand
    assert len(model.encoder.backward_layers) == 1
    assert [layer.hidden_size for layer in model.encoder.forward_layers] == [2, 4]
    assert not any(layer.bidirectional for layer in model.encoder.forward_layers)


@pytest.mark.parametrize(
    ("layers", "source", "target", "published"),
    [
        (2, 31, 43, 4_523_643),  # CMUdict (issue 31; Table 7: 4.5M)
        (2, 77, 70, 4_549_070),  # English inflection, high
        (1, 2000, 2000, 25_091_024),  # dialect normalization (Table 7: 25.1M)
    ],
)
def test_the_sockeye_formula_gives_the_audits_counts(layers, source, target, published):
    embed, hidden = (200, 400) if layers == 2 else (512, 1024)
    assert sockeye_rnn(embed, hidden, layers, source, target) == published
    config = LSTMConfig(
        embedding_dim=embed,
        encoder_layers=layers,
        encoder_bidirectional_layers=1,
        encoder_size=hidden // 2,
        decoder_size=hidden,
        attention="mlp",
        input_feeding=True,
        output_size=hidden,
        decoder_init="last",
    )
    with torch.device("meta"):  # sizes only
        model = build_model("lstm", config, source, target)
    assert model.parameter_count() == published


def test_the_second_encoder_layer_is_a_forward_lstm():
    """The encoder equals a packed bidirectional layer of 2 + 2 units followed by a packed
    forward layer of 4, built by hand from the same weights."""
    torch.manual_seed(0)
    encoder = BiLSTM(3, 2, layers=2, dropout=0.0, bidirectional=1)
    first = nn.LSTM(3, 2, bidirectional=True, batch_first=True)
    second = nn.LSTM(4, 4, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(first, f"{name}_l0").copy_(getattr(encoder.forward_layers[0], f"{name}_l0"))
            getattr(first, f"{name}_l0_reverse").copy_(
                getattr(encoder.backward_layers[0], f"{name}_l0")
            )
            getattr(second, f"{name}_l0").copy_(getattr(encoder.forward_layers[1], f"{name}_l0"))
    x = torch.randn(3, 6, 3)
    lengths = torch.tensor([6, 2, 4])
    mine = encoder(x, lengths)  # B x S x 4

    def packed(module: nn.LSTM, inputs: torch.Tensor) -> torch.Tensor:
        sequences = nn.utils.rnn.pack_padded_sequence(
            inputs, lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = nn.utils.rnn.pad_packed_sequence(
            module(sequences)[0], batch_first=True, total_length=6
        )
        return out

    theirs = packed(second, packed(first, x))  # B x S x 4
    mask = torch.arange(6)[None, :] < lengths[:, None]
    assert mine.shape == (3, 6, 4)
    assert torch.allclose(mine[mask], theirs[mask], atol=1e-6)
    # layer 2 reads left to right: a change of the layer-1 state at the last position
    # changes the last output only
    layer1 = packed(first, x)
    changed = layer1.clone()
    changed[0, 5] += 1.0
    before, after = encoder.forward_layers[1](layer1)[0], encoder.forward_layers[1](changed)[0]
    assert torch.equal(before[0, :5], after[0, :5])
    assert not torch.equal(before[0, 5], after[0, 5])


def test_the_decoder_starts_from_tanh_of_a_map_of_the_last_encoder_state():
    torch.manual_seed(0)
    config = replace(TINY, decoder_layers=2)
    model = build_model("lstm", config, 12, 12).eval()
    batch = collate([[5, 6, 7, 8], [9, 5], [6, 7, 8]], [[5], [6, 7], [8]])
    state = model.init_state(batch)
    memory, _ = model.encode(batch)  # B x S x 4
    for item, length in enumerate([4, 2, 3]):
        last = memory[item, length - 1]  # the top (forward) layer at the last real symbol
        for layer in range(2):
            maps = model.bridge[2 * layer], model.bridge[2 * layer + 1]
            h = torch.tanh(maps[0].weight @ last + maps[0].bias)
            c = torch.tanh(maps[1].weight @ last + maps[1].bias)
            assert torch.allclose(state["h"][item, layer], h, atol=1e-6)
            assert torch.allclose(state["c"][item, layer], c, atol=1e-6)
    assert torch.equal(state["feed"], torch.zeros(3, 4))  # the attentional state starts at 0
    zero = build_model("lstm", replace(config, decoder_init="zero"), 12, 12)
    assert not hasattr(zero, "bridge")
    start = zero.init_state(batch)
    assert not start["h"].any() and not start["c"].any()


def test_xavier_initialization_is_sockeyes():
    torch.manual_seed(0)
    config = replace(
        TINY, embedding_dim=40, encoder_size=30, decoder_size=60, output_size=60, decoder_layers=2
    )
    model = build_model("lstm", config, 50, 70)
    for name, parameter in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("bias"):
            assert not parameter.any(), name
        elif leaf.startswith("weight_hh"):  # 4H x H with orthonormal columns, times 1.414
            gram = parameter.t() @ parameter  # H x H
            assert torch.allclose(gram, 1.414**2 * torch.eye(gram.shape[0]), atol=1e-4), name
        else:  # Glorot uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
            fan_out, fan_in = parameter.shape
            bound = (6 / (fan_in + fan_out)) ** 0.5
            values = parameter.detach().flatten()
            if "embedding" in name:
                values = parameter.detach()[PAD_ID + 1 :].flatten()
            assert values.abs().max() <= bound, name
            assert values.abs().max() > 0.9 * bound, name  # the whole range, not a smaller one
    assert not model.source_embedding.weight[PAD_ID].any()
    assert not model.target_embedding.weight[PAD_ID].any()


def test_the_default_options_keep_the_model_as_it_was():
    config = LSTMConfig(embedding_dim=8, encoder_size=6, decoder_size=7)
    assert config.encoder_bidirectional_layers is None
    assert (config.decoder_init, config.init) == ("zero", "default")
    torch.manual_seed(0)
    default = build_model("lstm", config, 14, 14)
    torch.manual_seed(0)
    explicit = build_model("lstm", replace(config, encoder_bidirectional_layers=2), 14, 14)
    names = [name for name, _ in default.named_parameters()]
    assert [name for name, _ in explicit.named_parameters()] == names
    assert all(torch.equal(a, b) for a, b in zip(default.parameters(), explicit.parameters()))
    encoder = [name.split(".")[1:3] for name in names if name.startswith("encoder.")]
    assert sorted({tuple(e) for e in encoder}) == [
        ("backward_layers", "0"),
        ("backward_layers", "1"),
        ("forward_layers", "0"),
        ("forward_layers", "1"),
    ]


def test_the_options_are_checked():
    bad = LSTMConfig(encoder_layers=2, encoder_bidirectional_layers=3)
    assert any("encoder_bidirectional_layers" in p for p in bad.check())
    assert not LSTMConfig(encoder_layers=2, encoder_bidirectional_layers=0).check()
    hard = HardAttentionConfig(decoder_init="last")  # its parallel decoder starts at zero
    assert any(p.startswith("decoder_init") for p in hard.check())
    fed = HardAttentionConfig(decoder_init="last", input_feeding=True, estimator="reinforce")
    assert not fed.check()


def test_the_cmudict_recipe_builds_the_authors_size(shared: Path, tmp_path: Path):
    if not (shared / "g2p-wu2018-cmudict-nettalk" / "CMUDict.train").is_file():
        pytest.skip("the CMUdict data of Wu et al. (2018) is not among the shared data")
    config, _ = configuration.load("paper/rios2021/rnn-g2p-cmudict", data_root=shared)
    assert (config.data.max_source_length, config.data.max_target_length) == (20, 20)
    trainer = Trainer(config, tmp_path)
    data = trainer.task.load_data(trainer.task.prepared_dir(tmp_path), None)
    model = trainer.task.build_model({k: v.symbols for k, v in data.vocabs.items()})
    assert model.parameter_count() == pytest.approx(4_523_643, rel=0.005)  # Table 7: 4.5M
    assert len(model.encoder.backward_layers) == 1  # a bidirectional first layer only
    assert model.d_s == 400 and model.config.input_feeding and len(model.bridge) == 2
