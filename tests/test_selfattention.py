"""The self-attention modifications of Dufter et al. (2020): direct position interactions,
learnable temperature, convolved attention; checked against formulas computed by hand."""

from __future__ import annotations

import pytest
import torch

from transduce.data.batching import collate
from transduce.errors import DataError
from transduce.models import build_model
from transduce.models.selfattention import (
    ConvolvedAttention,
    PositionInteractions,
    SelfAttention,
)
from transduce.models.tagger import SanTaggerConfig
from transduce.models.transformer import TransformerConfig


def test_relative_interactions_are_toeplitz_and_indexed_as_the_paper():
    torch.manual_seed(0)
    t = 5
    module = PositionInteractions(heads=2, length=t, absolute=False, relative=True)
    bias = module(4)  # H x 4 x 4
    assert bias.shape == (2, 4, 4)
    a = module.relative.detach()
    for h in range(2):
        for i in range(4):
            for j in range(4):
                # A^r_ij = a^r_{i-j+t}, 1-based i, j and a^r: 0-based index i - j + t - 1
                assert bias[h, i, j] == a[h, (i + 1) - (j + 1) + t - 1]
                if i + 1 < 4 and j + 1 < 4:  # constant along every diagonal
                    assert bias[h, i, j] == bias[h, i + 1, j + 1]
    assert bias[0, 0, 3] == a[0, 1] and bias[0, 3, 0] == a[0, 7]  # i - j = -3 and +3


def test_absolute_and_both_interactions():
    torch.manual_seed(0)
    module = PositionInteractions(heads=3, length=6, absolute=True, relative=True)
    bias = module(6)
    index = torch.arange(6)
    expected = module.absolute + module.relative[:, index[:, None] - index[None, :] + 5]
    assert torch.equal(bias, expected)
    assert torch.equal(module(2), expected[:, :2, :2])  # shorter inputs: the top-left corner


def test_longer_inputs_are_an_error():
    module = PositionInteractions(heads=1, length=4, absolute=True, relative=False)
    with pytest.raises(DataError, match="5 positions is longer .* t = 4"):
        module(5)
    conv = ConvolvedAttention("conv1d", heads=1, length=4)
    with pytest.raises(DataError, match="conv1d"):
        conv(torch.rand(1, 1, 5, 5), torch.ones(1, 5, dtype=torch.bool))


def _conv1d_by_hand(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """out[i, j] = ReLU(b_j + sum over d in -1..1 and keys c of W[j, c, d] a[i + d, c])."""
    s = a.shape[0]
    out = torch.zeros(s, s, dtype=torch.float64)
    for i in range(s):
        for j in range(s):
            total = float(bias[j])
            for d in (-1, 0, 1):
                if 0 <= i + d < s:
                    for c in range(s):
                        total += float(weight[j, c, d + 1]) * float(a[i + d, c])
            out[i, j] = max(total, 0.0)
    return out


def _conv2d_by_hand(a: torch.Tensor, weight: torch.Tensor, bias: float) -> torch.Tensor:
    s = a.shape[0]
    out = torch.zeros(s, s, dtype=torch.float64)
    for i in range(s):
        for j in range(s):
            total = bias
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    if 0 <= i + di < s and 0 <= j + dj < s:
                        total += float(weight[di + 1, dj + 1]) * float(a[i + di, j + dj])
            out[i, j] = max(total, 0.0)
    return out


@pytest.mark.parametrize("kind", ["conv1d", "conv2d"])
def test_convolution_keeps_the_shape_and_matches_the_formula(kind):
    torch.manual_seed(1)
    conv = ConvolvedAttention(kind, heads=2, length=6).double()
    with torch.no_grad():
        conv.bias.uniform_(-0.2, 0.2)
    weights = torch.softmax(torch.randn(2, 2, 4, 4, dtype=torch.float64), dim=-1)  # B x H x S x S
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    with torch.no_grad():
        out = conv(weights, mask)
    assert out.shape == weights.shape
    assert (out >= 0).all()  # the ReLU: not renormalised, but never negative
    for b, size in ((0, 4), (1, 3)):
        for h in range(2):
            a = weights[b, h, :size, :size]
            if kind == "conv1d":
                expected = _conv1d_by_hand(
                    a, conv.weight[h, :size, :size].detach(), conv.bias[h, :size].detach()
                )
            else:
                expected = _conv2d_by_hand(
                    a, conv.weight[h, 0].detach(), float(conv.bias[h].detach())
                )
            assert torch.allclose(out[b, h, :size, :size], expected.detach(), atol=1e-12)
        assert not out[b, :, :, size:].any()  # padded keys give nothing


def test_parameter_counts_of_table_1c():
    """Table 1c (PTB: t = 60, d = 300, 4 layers of 4 heads): what each option adds to SAN."""

    def count(**options) -> int:
        config = SanTaggerConfig(
            embedding_dim=300, position_dim=300, max_length=60, position_mode="none"
        )
        for key, value in options.items():
            setattr(config, key, value)
        assert not config.check()
        return build_model("san_tagger", config, 50, 20, chars=30).parameter_count()

    san = count()
    assert count(position_mode="add") - san == 18_000  # t x d
    assert count(position_mode="direct_absolute") - san == 14_400  # t^2 x heads
    assert count(position_mode="direct_relative") - san == 480  # 2t x heads
    assert count(learnable_temperature=True) - san == 48  # 3 x heads x layers
    assert count(conv_attention="conv1d") - san == 173_760  # 16 x (3 t^2 + t)
    assert count(conv_attention="conv2d") - san == 160  # 16 x (9 + 1)
    assert count(conv_attention="conv2d", conv_layers=[1, 3]) - san == 80


def test_temperature_scales_the_logits_and_gets_gradients():
    torch.manual_seed(2)
    x = torch.randn(2, 5, 8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    plain = SelfAttention(8, 2, bias=False, project=False)
    tempered = SelfAttention(8, 2, bias=False, project=False, temperature=True)
    tempered.qkv.load_state_dict(plain.qkv.state_dict())
    with torch.no_grad():
        tempered.temperature[:, 1] = torch.tensor([2.0, 1.5, 3.0])  # head 2: gq, gk, gv
    w0, v0 = plain.weights(x, mask)
    w1, v1 = tempered.weights(x, mask)
    assert torch.allclose(w1[:, 0], w0[:, 0]) and torch.allclose(v1[:, 0], v0[:, 0])
    q, k, _ = (p.view(2, 5, 2, 4).transpose(1, 2) for p in plain.qkv(x).chunk(3, dim=-1))
    logits = q[:, 1] @ k[:, 1].transpose(-1, -2) / 2.0  # sqrt(d_h) = 2
    assert torch.allclose(w1[:, 1], torch.softmax(3.0 * logits, dim=-1), atol=1e-6)  # gq gk = 3
    assert torch.allclose(v1[:, 1], 3.0 * v0[:, 1], atol=1e-6)
    tempered(x, mask).square().sum().backward()
    assert tempered.temperature.grad is not None and (tempered.temperature.grad != 0).all()


@pytest.mark.parametrize(
    "options",
    [
        {"positions": "both", "conv": "conv1d"},
        {"positions": "absolute", "conv": "conv2d", "temperature": True},
        {"positions": "relative"},
    ],
)
def test_padding_changes_nothing(options):
    """A sentence gets the same output alone and padded in a batch."""
    torch.manual_seed(3)
    layer = SelfAttention(8, 2, bias=False, project=False, length=7, **options).eval()
    x = torch.randn(1, 4, 8)
    alone = layer(x, torch.ones(1, 4, dtype=torch.bool))
    padded = torch.cat([x, torch.randn(1, 3, 8)], dim=1)
    mask = torch.tensor([[True] * 4 + [False] * 3])
    assert torch.allclose(layer(padded, mask)[:, :4], alone, atol=1e-6)


def test_transformer_encoder_options_count_and_run():
    base = dict(encoder_layers=2, decoder_layers=1, d_model=16, heads=2, feedforward=8)

    def model(**options):
        return build_model("transformer", TransformerConfig(**base, **options), 14, 14)

    plain = model(max_positions=10)
    full = model(
        max_positions=10,
        position_mode="direct_both",
        learnable_temperature=True,
        conv_attention="conv1d",
    )
    # P: 2 x 10^2, R: 2 x 20, temperature 3 x 2 heads x 2 layers, conv1d 4 heads x 310
    assert full.parameter_count() - plain.parameter_count() == 200 + 40 + 12 + 1240
    assert full.max_length == 10 and plain.max_length is None
    batch = collate([[5, 6, 7, 8], [9, 5]], [[5, 6], [7, 8, 9]])
    assert full(batch).log_probs.shape == (2, 4, 14)
    with pytest.raises(DataError, match="longer"):
        full(collate([[5] * 11], [[5]]))
    concat = model(position_mode="concat", position_dim=4, tie_embeddings="target")
    assert concat.source_embedding.embedding_dim == 12
    assert concat(batch).log_probs.shape == (2, 4, 14)


def test_option_errors():
    problems = TransformerConfig(
        position_mode="concat", position_dim=300, tie_embeddings="all", conv_layers=[5]
    ).check()
    assert any("position_dim" in p for p in problems)
    assert any("tie_embeddings all" in p for p in problems)
    assert any("conv_layers" in p for p in problems)
    assert any(
        "separator needs position_mode" in p
        for p in TransformerConfig(position_scheme="separator", position_mode="direct_both").check()
    )
    assert any("heads" in p for p in SanTaggerConfig(embedding_dim=127).check())


@pytest.mark.parametrize(
    "options",
    [
        {"position_mode": "direct_both", "learnable_temperature": True, "conv_attention": "conv1d"},
        {"position_mode": "concat", "position_dim": 8, "conv_attention": "conv2d"},
        {"position_mode": "direct_absolute", "conv_attention": "conv2d", "conv_layers": [2]},
        {"position_mode": "direct_relative"},
    ],
    ids=["p-r-temp-conv", "pe-con-conv2d", "p-conv2d-layer2", "r"],
)
def test_the_transformer_trains_with_the_options_through_the_cli(run, tmp_path, options):
    """Each option trains (the loss falls) and decodes through the CLI; the tagger tests
    show them learning a task (a tiny seq2seq transformer learns too slowly for a test)."""
    import json

    import yaml

    from .toy import TINY_TRANSFORMER, recipe, write_task

    prepared = write_task(tmp_path, "reverse", n=300)
    model = {**TINY_TRANSFORMER, "encoder_layers": 2, "max_positions": 8, **options}
    data = recipe(prepared, model, max_epochs=6, optimizer={"lr": 0.005})
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run("train", "--config", path, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "run" / "train.json").read_text())
    losses = [entry["train_loss"] for entry in report["history"]]
    assert losses[-1] < 0.7 * losses[0], losses
    result = run("decode", tmp_path / "run", "-", input="abcd\n")
    assert result.exit_code == 0 and result.stdout.strip()
    too_long = run("decode", tmp_path / "run", "-", input="abcdefgab\n")
    if options["position_mode"].startswith("direct"):  # t = max_positions = 8
        assert too_long.exit_code == 2 and "more than the model takes (8)" in too_long.output
    else:  # sinusoidal positions and conv2d take any length
        assert too_long.exit_code == 0
