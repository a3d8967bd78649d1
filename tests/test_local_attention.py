"""Local monotonic attention (Tjandra et al. 2017) and local-m (Luong et al. 2015)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from transduce import config as configuration
from transduce.models import build_model
from transduce.models.attention import AttentionConfig, LocalAttention
from transduce.models.lstm import LSTMConfig
from transduce.training import Trainer

from .toy import DEV_BAR, TEST_BAR, TINY_LSTM, recipe, write_task

H, MEMORY = 7, 6


def sources(B: int, S: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random float64 memory B x S x MEMORY and a mask with lengths S, 1 and in between."""
    g = torch.Generator().manual_seed(seed)
    memory = torch.randn(B, S, MEMORY, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, S + 1, (B,), generator=g)
    lengths[0], lengths[-1] = S, 1
    mask = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # B x S
    return memory, mask


def model_with(attention: AttentionConfig, seed: int = 0):
    torch.manual_seed(seed)
    config = LSTMConfig(
        embedding_dim=5,
        encoder_size=MEMORY // 2,
        decoder_size=H,
        attention=attention,
        attention_size=4,
        dropout=0.0,
    )
    return build_model("lstm", config, 9, 9).double().eval()


@torch.no_grad()
def reference(model, queries, memory, mask):
    """Eqs. (5)-(10) one (item, step, position) at a time over the whole source, from the
    raw parameters: centres, unnormalized context and normalized weights B x T x S."""
    a = model.config.attention
    local = model.local
    B, T, _ = queries.shape
    S = memory.shape[1]
    if a.scorer == "none":
        scores = torch.zeros(B, T, S, dtype=torch.float64)  # unused: a^S = 1
    else:
        scores = model.attention.scores(queries, model.attention.keys(memory))  # B x T x S
    sigma = a.sigma or a.window / 2
    context = torch.zeros(B, T, memory.shape[-1], dtype=torch.float64)
    weights = torch.zeros(B, T, S, dtype=torch.float64)
    centres = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        last = int(mask[b].sum()) - 1
        p = -1.0  # p_0 = 0, 1-based
        for t in range(T):
            log_scale = 0.0
            if a.type in ("local_m", "local_m_gaussian"):
                delta = 1.0
            else:
                z = torch.tanh(local.hidden.weight @ queries[b, t] + local.hidden.bias)
                u = float(local.project.weight[0] @ z + local.project.bias[0])
                delta = {
                    "exp": math.exp(u),
                    "softplus": math.log1p(math.exp(u)),
                    "constrained": a.max_step / (1 + math.exp(-u)),
                }[a.position]
                if a.scale:
                    log_scale = float(local.project.weight[1] @ z + local.project.bias[1])
            p = min(p + delta, last)
            centres[b, t] = p
            centre = min(max(math.floor(p), 0), last)
            window = [s for s in range(S) if s <= last and abs(s - centre) <= a.window]
            total = sum(math.exp(scores[b, t, s]) for s in window)
            for s in window:
                a_s = 1.0 if a.scorer == "none" else math.exp(scores[b, t, s]) / total
                gaussian = math.exp(-((s - p) ** 2) / (2 * sigma**2))
                a_n = math.exp(log_scale) * (1.0 if a.type == "local_m" else gaussian)
                weights[b, t, s] = a_n * a_s
                context[b, t] += a_n * a_s * memory[b, s]
    return centres, context, weights / weights.sum(-1, keepdim=True)


CASES = {
    "exp-mlp": AttentionConfig(type="local_monotonic", scorer="mlp"),
    "softplus-bilinear-wide": AttentionConfig(
        type="local_monotonic", scorer="bilinear", position="softplus", window=3, sigma=0.7
    ),
    "constrained-none": AttentionConfig(
        type="local_monotonic", scorer="none", position="constrained", max_step=3.0
    ),
    "exp-unscaled": AttentionConfig(type="local_monotonic", scorer="mlp", scale=False, window=1),
    "local-m-mlp": AttentionConfig(type="local_m", scorer="mlp", window=1),
    "local-m-gaussian-bilinear": AttentionConfig(type="local_m_gaussian", window=2, sigma=0.8),
}


def test_local_m_is_luongs_plain_window_and_the_gaussian_has_its_own_name():
    """Equal scores, D = 2, the centre on a middle position: Luong's local-m gives each of
    the 5 window positions 0.2; the Gaussian (sigma = D/2 = 1) gives exp(-d^2 / 2)
    normalized: [0.054, 0.244, 0.403, 0.244, 0.054] (the issue's case)."""
    weights = {}
    for kind in ("local_m", "local_m_gaussian"):
        model = model_with(AttentionConfig(type=kind, scorer="none", window=2))
        memory, mask = torch.randn(1, 9, MEMORY, dtype=torch.float64), torch.ones(1, 9).bool()
        queries = torch.randn(1, 5, H, dtype=torch.float64)
        last = model._last(mask).unsqueeze(1)
        p, _ = model.local.positions(queries, last)  # 0-based centres 0..4
        keys = model.attention.keys(memory)
        _, attention = model.local.attend(model.attention, queries, keys, memory, p, last, None)
        weights[kind] = attention[0, 4, 2:7]  # step 5: centre at position 4 (0-based)
    assert torch.allclose(weights["local_m"], torch.full((5,), 0.2, dtype=torch.float64))
    g = torch.tensor([math.exp(-(d**2) / 2) for d in (-2, -1, 0, 1, 2)], dtype=torch.float64)
    assert torch.allclose(weights["local_m_gaussian"], g / g.sum())
    assert torch.allclose(
        weights["local_m_gaussian"],
        torch.tensor([0.054, 0.244, 0.403, 0.244, 0.054], dtype=torch.float64),
        atol=5e-4,
    )
    plain = {"name": "lstm", "attention": {"type": "local_m", "sigma": 1.0}}
    with pytest.raises(configuration.ConfigError, match="local_m .*has no Gaussian"):
        configuration.parse({"data": {"prepared": "x"}, "model": plain})


@pytest.fixture(params=["gather", "dense"])
def path(request, monkeypatch) -> str:
    """Both ways of computing the window: gathered, or the whole (short) source masked."""
    monkeypatch.setattr(LocalAttention, "DENSE_WIDTHS", 0 if request.param == "gather" else 99)
    return request.param


@pytest.mark.parametrize("case", CASES)
def test_window_equals_a_full_length_masked_reference(case, path):
    model = model_with(CASES[case])
    memory, mask = sources(4, 9, seed=1)
    queries = 2 * torch.randn(4, 12, H, dtype=torch.float64)  # T > S: centres reach the end
    keys = model.attention.keys(memory)
    last = model._last(mask).unsqueeze(1)
    p, log_scale = model.local.positions(queries, last)
    context, attention = model.local.attend(
        model.attention, queries, keys, memory, p, last, log_scale
    )
    centres, expected_context, expected_attention = reference(model, queries, memory, mask)
    assert torch.allclose(p, centres, atol=1e-9)
    assert torch.allclose(context, expected_context, atol=1e-9)
    assert torch.allclose(attention, expected_attention, atol=1e-9)
    # zero outside the window and on padding; a distribution over the window
    distance = (torch.arange(9) - p.floor().clamp(min=0).unsqueeze(-1)).abs()  # B x T x S
    outside = (distance > CASES[case].window) | ~mask.unsqueeze(1)
    assert attention[outside].abs().max() == 0
    assert torch.allclose(attention.sum(-1), torch.ones(4, 12, dtype=torch.float64))


@pytest.mark.parametrize("position", ["exp", "softplus", "constrained"])
def test_centres_never_move_back_and_constrained_steps_stay_in_range(position):
    model = model_with(
        AttentionConfig(type="local_monotonic", position=position, max_step=2.5), seed=3
    )
    with torch.no_grad():  # large weights: steps near 0 and near C_max (or huge)
        model.local.project.weight.mul_(20)
    queries = 5 * torch.randn(6, 40, H, dtype=torch.float64)
    delta, _ = model.local.moves(queries)
    assert (delta >= 0).all()
    if position == "constrained":
        assert (delta <= 2.5).all()
        assert delta.min() < 0.01 and delta.max() > 2.49  # both ends are reached
    last = torch.full((6, 1), 25.0, dtype=torch.float64)
    p, _ = model.local.positions(queries, last)
    assert (p.diff(dim=1) >= 0).all()
    assert (p >= LocalAttention.START).all() and (p <= 25).all()


def test_local_m_centres_are_the_step_numbers():
    model = model_with(AttentionConfig(type="local_m", scorer="mlp"))
    queries = torch.randn(2, 6, H, dtype=torch.float64)
    last = torch.tensor([[9.0], [3.0]], dtype=torch.float64)
    p, log_scale = model.local.positions(queries, last)
    assert log_scale is None
    assert p.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 3, 3]]  # 0-based: p_t = t - 1
    assert not any(n.startswith("local.") for n, _ in model.named_parameters())


def test_gathered_and_dense_windows_give_the_same_model(monkeypatch):
    from transduce.data.batching import collate

    model = model_with(CASES["exp-mlp"]).float().train()
    batch = collate([[5, 6, 7, 8, 5, 6, 7, 8], [6, 7], [8]], [[5, 6, 7], [8, 8, 8, 8, 8], [6]])
    results = []
    for widths in (0, 99):
        monkeypatch.setattr(LocalAttention, "DENSE_WIDTHS", widths)
        torch.manual_seed(0)
        model.zero_grad()
        output = model(batch)
        model.loss(batch, output)["loss"].backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((output.log_probs, output.attention, grads))
    (lp_a, att_a, grads_a), (lp_b, att_b, grads_b) = results
    assert torch.allclose(lp_a, lp_b, atol=1e-5) and torch.allclose(att_a, att_b, atol=1e-6)
    assert len(grads_a) == len(grads_b)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads_a, grads_b))


def test_gradients_reach_the_centre_through_the_gaussian(path):
    # scorer none and no lambda: the context depends on delta_p only through eq. (8)
    model = model_with(AttentionConfig(type="local_monotonic", scorer="none", scale=False))
    memory, mask = sources(3, 8, seed=2)
    queries = torch.randn(3, 5, H, dtype=torch.float64)
    last = model._last(mask).unsqueeze(1)
    keys = model.attention.keys(memory)
    p, _ = model.local.positions(queries, last)
    context, _ = model.local.attend(model.attention, queries, keys, memory, p, last, None)
    context.sum().backward()
    grad = model.local.hidden.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 1e-6

    def centred(p):  # d context / d p_t, numerically (centres away from integers)
        return model.local.attend(model.attention, queries, keys, memory, p, last, None)[0]

    p = torch.tensor([[0.3, 1.4, 2.6, 3.2, 3.7]] * 3, dtype=torch.float64)
    p = torch.minimum(p, last - 0.1).requires_grad_()
    assert torch.autograd.gradcheck(centred, (p,))


def test_bare_scorer_names_stay_global_and_hard_refuses_local():
    base = {"data": {"prepared": "x"}}
    config = configuration.parse({**base, "model": {"name": "lstm", "attention": "mlp"}})
    assert config.model.attention == AttentionConfig(type="global", scorer="mlp")
    with pytest.raises(configuration.ConfigError, match="scorer: none needs a local type"):
        configuration.parse({**base, "model": {"name": "lstm", "attention": {"scorer": "none"}}})
    with pytest.raises(configuration.ConfigError, match="hard attention is over the whole"):
        configuration.parse(
            {**base, "model": {"name": "hard", "attention": {"type": "local_monotonic"}}}
        )
    with pytest.raises(configuration.ConfigError, match=r"model\.attention\.window: must be"):
        configuration.parse(
            {**base, "model": {"name": "lstm", "attention": {"type": "local_m", "window": 0}}}
        )


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("toy")
    return {task: write_task(root, task) for task in ("copy", "double")}


def local(**attention) -> dict:
    return {**TINY_LSTM, "attention": {"type": "local_monotonic", **attention}}


@pytest.mark.parametrize(
    ("model", "task"),
    [
        (local(scorer="mlp"), "double"),
        (local(scorer="general", position="constrained", max_step=2.0), "double"),
        (local(scorer="none", window=1, position="softplus"), "double"),
        ({**TINY_LSTM, "attention": {"type": "local_m", "scorer": "mlp"}}, "copy"),
    ],
    ids=["exp-mlp-double", "constrained-general-double", "softplus-none-double", "local-m-copy"],
)
def test_each_variant_learns_a_toy_monotone_task(tasks, tmp_path: Path, model, task):
    data = recipe(tasks[task], model, max_epochs=20)
    report = Trainer(configuration.parse(data), tmp_path / "run").run()
    assert report["best"]["score"] >= DEV_BAR, [h["dev_scores"]["acc"] for h in report["history"]]
    assert report["test"]["acc"] >= TEST_BAR


@pytest.mark.parametrize(
    "model",
    [local(scorer="mlp"), {**local(scorer="dot"), "decoder_size": 64, "input_feeding": True}],
    ids=["mlp", "dot-feeding"],
)
def test_local_attention_trains_and_decodes_through_the_cli(run, tasks, tmp_path: Path, model):
    config = tmp_path / "local.yaml"
    data = recipe(tasks["double"], model, max_updates=12, validate_every=6)
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run("train", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text(encoding="utf-8"))
    assert resolved["model"]["attention"]["type"] == "local_monotonic"
    for beam in ("1", "3"):
        decoded = run("decode", tmp_path / "run", "--beam", beam, input="abc\n\ngfe\n")
        assert decoded.exit_code == 0, decoded.output
        assert len(decoded.stdout.split("\n")) == 4  # one line per input line
