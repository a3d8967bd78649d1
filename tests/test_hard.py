"""Hard attention: exact marginalization against brute force, REINFORCE against the exact
gradient of its bound, parameter-controlled input feeding, and toy tasks learned."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import yaml

from transduce import config as configuration
from transduce import defaults
from transduce.data.batching import collate
from transduce.errors import ConfigError
from transduce.models import build_model
from transduce.models.hard import HardAttentionConfig
from transduce.models.lstm import LSTMConfig
from transduce.training import Trainer

from .toy import DEV_BAR, TEST_BAR, TINY_LSTM, recipe, write_task

V = 9
SOURCES = [[4, 5, 6, 7], [8, 4], [5, 5, 6]]
TARGETS = [[4, 6, 8], [7], [6, 5]]  # with EOS: 4, 2 and 3 steps


def tiny(**options) -> torch.nn.Module:
    torch.manual_seed(3)
    config = HardAttentionConfig(
        embedding_dim=6, encoder_size=5, decoder_size=4, dropout=0.0, **options
    )
    return build_model("hard", config, V, V).double().eval()


def pieces(model, batch):
    """Alignment scores and emissions from the parameters, one (i, j) at a time: eq. (7)
    e_ij = h_i^T T h_j and eqs. (8)-(9) p(. | a_i = j) = softmax(W tanh(S (h_i ⊕ h_j)))."""
    memory, _ = model.encode(batch)  # B x S x 2H
    inputs = model.target_embedding(batch.target_in)  # B x T x E
    if model.config.tag_input:  # [e(y_{i-1}); ReLU(W sum_j e(x_j) + b)], j over the tags
        rows = []
        for n in range(len(batch)):
            row = batch.source[n].tolist()
            tags = row[: row.index(4)] if 4 in row else []  # before <sep> (id 4)
            zero = torch.zeros(model.config.embedding_dim).double()
            bag = sum((model.source_embedding.weight[j] for j in tags), zero)
            vector = torch.relu(model.tag_projection(bag))
            rows.append(torch.cat([inputs[n], vector.expand(inputs.shape[1], -1)], dim=-1))
        inputs = torch.stack(rows)  # B x T x 2E
    states, _ = model.decoder(inputs)  # B x T x H
    T_matrix = model.attention.transform.weight  # H x 2H
    result = []
    for n in range(len(batch)):
        S = int(batch.source_mask[n].sum())
        steps = int(batch.target_mask[n].sum())
        scores = torch.zeros(steps, S, dtype=torch.float64)
        emission = torch.zeros(steps, S, V, dtype=torch.float64)
        for i in range(steps):
            for j in range(S):
                h, m = states[n, i], memory[n, j]
                scores[i, j] = h @ T_matrix @ m
                f = torch.tanh(model.combine(torch.cat([h, m])))
                emission[i, j] = torch.softmax(model.output(f), dim=-1)
        gold = batch.target_out[n, :steps]
        result.append((scores, emission[torch.arange(steps), :, gold]))  # steps x S
    return result


def brute_force(scores, gold, monotonic):
    """p(y | x) and the posterior marginals p(a_i = j | y, x), summing every alignment."""
    steps, S = scores.shape
    total = torch.zeros((), dtype=torch.float64)
    marginals = torch.zeros(steps, S, dtype=torch.float64)
    for path in itertools.product(range(S), repeat=steps):
        if monotonic and any(b < a for a, b in zip((0, *path), path)):
            continue
        p = torch.ones((), dtype=torch.float64)
        previous = 0  # a_0 = the first position
        for i, j in enumerate(path):
            allowed = range(previous if monotonic else 0, S)
            p = p * torch.exp(scores[i, j]) / sum(torch.exp(scores[i, k]) for k in allowed)
            p = p * gold[i, j]
            previous = j
        total = total + p
        for i, j in enumerate(path):
            marginals[i, j] += p
    return total, marginals / total


def check_against_brute_force(model, batch, monotonic, firsts):
    """The model's log p(y | x) and alignment posterior against `brute_force` over the
    positions from firsts[n] on (item n's first position that alignments read); none of
    the prior or posterior mass before it. Returns the model's output."""
    with torch.no_grad():
        output = model(batch)
        posterior = model.alignment_posterior(batch)[:, 0]  # B x T x S
        references = pieces(model, batch)
    picked = output.log_probs.gather(-1, batch.target_out.unsqueeze(-1)).squeeze(-1)  # B x T
    for n, (scores, gold) in enumerate(references):
        steps, S = scores.shape
        f = firsts[n]
        total, marginals = brute_force(scores[:, f:], gold[:, f:], monotonic)
        assert picked[n, :steps].sum().item() == pytest.approx(math.log(total.item()), abs=1e-5)
        assert torch.allclose(posterior[n, :steps, f:S], marginals, atol=1e-5)
        # an empty slice where f = 0
        assert posterior[n, :steps, :f].abs().sum().item() < 1e-9
        assert output.attention[n, 0, :steps, :f].abs().sum().item() < 1e-9
    return output


@pytest.mark.parametrize("monotonic", [False, True], ids=["0th-order", "monotonic"])
def test_likelihood_equals_the_sum_over_all_alignments(monotonic):
    model = tiny(monotonic=monotonic)
    batch = collate(SOURCES, TARGETS)
    output = check_against_brute_force(model, batch, monotonic, [0, 0, 0])
    # each step is a distribution over the vocabulary
    sums = output.log_probs.exp().sum(-1)[batch.target_mask]
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-6)


TAGGED = [[7, 8, 4, 5, 6], [8, 4, 5], [5, 6, 7]]  # tags, <sep> (id 4), lemma; no tags
TAGGED_TARGETS = [[5, 6], [5], [6, 5]]


@pytest.mark.parametrize("attend_tags", [True, False], ids=["attend-tags", "lemma-only"])
@pytest.mark.parametrize("monotonic", [False, True], ids=["0th-order", "monotonic"])
def test_with_the_tag_vector_the_likelihood_is_still_exact(monotonic, attend_tags):
    """`tag_input`: the brute-force sum over every alignment, with the tag vector in the
    decoder inputs (built by hand in `pieces`); `attend_tags: false`: the alignments over
    <sep> and the lemma only, a_0 the <sep>."""
    model = tiny(monotonic=monotonic, tag_input=True, attend_tags=attend_tags)
    batch = collate(TAGGED, TAGGED_TARGETS)
    firsts = [2, 1, 0] if not attend_tags else [0, 0, 0]  # the first position read
    output = check_against_brute_force(model, batch, monotonic, firsts)
    # the vector enters every step: with it zeroed every step's distribution moves
    with torch.no_grad():
        model.tag_projection.weight.zero_(), model.tag_projection.bias.zero_()
        moved = (model(batch).log_probs - output.log_probs).abs().amax(-1)
    assert bool((moved[:2][batch.target_mask[:2]] > 1e-9).all()), moved


@pytest.mark.parametrize(
    "options",
    [
        {"tag_input": True},
        {"tag_input": True, "monotonic": True, "attend_tags": False},
        {"tag_input": True, "monotonic": True, "attend_tags": False, "copy": True},
        {"tag_input": True, "attend_tags": False, "copy": True},
    ],
    ids=["0th-order", "monotonic-lemma-only", "monotonic-lemma-only-copy", "0th-order-lemma-only"],
)
def test_with_tags_the_decoding_steps_give_the_forward_pass(options):
    model = tiny(**options)
    batch = collate(TAGGED, TAGGED_TARGETS)
    with torch.no_grad():
        output = model(batch)
        state = model.init_state(batch)
        stepped = []
        for t in range(batch.target_in.shape[1]):
            step = model.step(state, batch.target_in[:, t])
            state = step.state
            stepped.append(step.log_probs)
    mask = batch.target_mask
    steps = torch.stack(stepped, 1)[..., : output.log_probs.shape[-1]]
    assert torch.allclose(output.log_probs[mask], steps[mask], atol=1e-5)


@pytest.mark.parametrize("monotonic", [False, True], ids=["0th-order", "monotonic"])
def test_a_tag_transducer_copies_no_tag_and_decodes_none(monotonic):
    """`attend_tags: false` with copy, the copy map giving every source symbol its own
    output id (as `read_vocabularies` does): with the gate shut (p_gen = 0: copy only) the
    tags' ids get no probability at any step, the lemma's all of it but what `<sep>`'s
    copy takes; greedy and beam search write neither a tag nor `<sep>`."""
    from transduce.decoding import beam_search, greedy

    model = tiny(tag_input=True, attend_tags=False, copy=True, monotonic=monotonic)
    model.copy_map.copy_(torch.arange(V))  # source id j -> output id j
    batch = collate(TAGGED, TAGGED_TARGETS)
    with torch.no_grad():
        model.gate.state.bias.fill_(-60.0)
        output = model(batch)
        probs = output.log_probs.exp()  # B x T x V
        lemma = [[5, 6], [5], [5, 6, 7]]  # each row's symbols after its <sep> (all: none)
        for row, (symbols, tags) in enumerate(zip(lemma, [[7, 8], [8], []])):
            steps = batch.target_mask[row]
            if tags:
                assert probs[row][steps][:, tags].max().item() < 1e-12
            held = probs[row][steps][:, [*symbols, 4]].sum(-1)
            assert torch.allclose(held, torch.ones_like(held), atol=1e-6)
        found = [h.tokens for h in greedy(model, batch)]
        beamed = [h[0].tokens for h in beam_search(model, batch, beam=3)]
    for tokens, symbols in zip([*found, *beamed], [*lemma, *lemma]):
        assert tokens and set(tokens) <= set(symbols), (tokens, symbols)


@pytest.mark.parametrize("fed", [False, True], ids=["system-5", "system-2-input-feeding"])
def test_reinforce_samples_no_tag_position_when_the_tags_are_not_read(fed):
    model = tiny(estimator="reinforce", input_feeding=fed, tag_input=True, attend_tags=False)
    model.train()
    batch = collate(TAGGED, TAGGED_TARGETS)
    torch.manual_seed(0)
    model.config.samples = 50
    output = model(batch)
    tags = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]).bool()  # B x S
    alpha = output.attention[:, 0]  # B x T x S
    assert alpha[tags.unsqueeze(1).expand_as(alpha)].abs().max() == 0
    # every sampled position is read: a tag's log alpha would be -inf
    steps = batch.target_mask.unsqueeze(0).expand_as(output.log_prior)
    assert bool(torch.isfinite(output.log_prior[steps]).all())


def test_monotonic_alignments_never_move_back():
    model = tiny(monotonic=True)
    batch = collate([[4, 5, 6, 7, 8]], [[4, 5, 6, 7]])
    with torch.no_grad():
        posterior = model.alignment_posterior(batch)[0, 0]  # T x S
    # the mass the posterior puts on a_i >= a_{i-1} is all of it: E[a_i] never decreases
    positions = torch.arange(5, dtype=torch.float64)
    means = posterior @ positions  # T
    assert (means[1:] >= means[:-1] - 1e-9).all()
    # and each step's posterior is a distribution over the source positions
    assert torch.allclose(posterior.sum(-1), torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize("monotonic", [False, True], ids=["0th-order", "monotonic"])
def test_blocks_of_target_steps_give_the_same_values_and_gradients(monkeypatch, monotonic):
    model = tiny(monotonic=monotonic).train()
    batch = collate(SOURCES, TARGETS)

    def run():
        model.zero_grad()
        output = model(batch)
        model.loss(batch, output)["loss"].backward()
        return output.log_probs.detach(), [p.grad.clone() for p in model.parameters()]

    whole, whole_grads = run()
    monkeypatch.setattr(defaults, "HARD_EMISSION_ELEMENTS", 1)  # one step a block
    blocks, block_grads = run()
    assert torch.allclose(whole, blocks, atol=1e-10)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(whole_grads, block_grads))


def flat_gradient(model) -> torch.Tensor:
    return torch.cat(
        [(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for p in model.parameters()]
    )


def exact_bound_gradient(model, batch, fed):
    """The gradient of eq. (17)'s bound sum_a p(a | x) log p(y | x, a), per target token."""
    model.zero_grad()
    mask = batch.target_mask.double()
    tokens = mask.sum()
    if not fed:  # without feeding the bound is sum_i sum_j alpha_j(i) log p(y_i | a_i = j)
        _, scores, queries, projected, _ = model._decoder_states(batch)
        log_alpha = torch.log_softmax(
            scores.masked_fill(~batch.source_mask[:, None, :], -math.inf), dim=-1
        )  # B x T x S
        emission = model._emission(queries, projected)  # B x T x S x V
        index = batch.target_out[:, :, None, None].expand(*emission.shape[:3], 1)
        gold = emission.gather(-1, index).squeeze(-1)  # B x T x S
        terms = (log_alpha.exp() * gold).sum(-1)  # B x T
        bound = (terms * mask).sum()
    else:  # enumerate every path; padded steps are free choices that weigh 1
        B, T = batch.target_in.shape
        S = batch.source.shape[1]
        paths = torch.tensor(list(itertools.product(range(S), repeat=T)))  # P x T
        forced = paths.unsqueeze(1).expand(-1, B, -1)  # P x B x T
        log_probs, log_prior, _ = model._sampled_fed(batch, len(paths), forced=forced)
        gold = log_probs.gather(
            -1, batch.target_out[None, :, :, None].expand(len(paths), -1, -1, 1)
        )
        steps = batch.target_mask.unsqueeze(0)  # 1 x B x T
        weight = log_prior.masked_fill(~steps, 0.0).sum(-1).exp()  # P x B: p(a | x)
        likelihood = (gold.squeeze(-1) * mask).sum(-1)  # P x B: log p(y | x, a)
        bound = ((weight * likelihood).sum(0) / weight.sum(0)).sum()
    (bound / tokens).backward()
    return flat_gradient(model)


def estimated_gradient(model, batch, samples, score_function=True):
    model.zero_grad()
    model.config.samples = samples
    model.baseline.fill_(math.nan)
    output = model(batch)
    losses = model.loss(batch, output)
    loss = losses["loss"] if score_function else losses["nll"]
    (-loss).backward()
    return flat_gradient(model)


@pytest.mark.parametrize("fed", [False, True], ids=["system-5", "system-2-input-feeding"])
def test_reinforce_estimates_the_gradient_of_the_bound(fed):
    model = tiny(estimator="reinforce", input_feeding=fed).train()
    sources, targets = [[4, 5, 6], [7, 8]], [[4, 6], [5]]  # 3 and 2 steps, S <= 3
    batch = collate(sources, targets)
    exact = exact_bound_gradient(model, batch, fed)
    exact_scores = model.attention.transform.weight.grad.flatten().clone()
    torch.manual_seed(0)
    estimate = estimated_gradient(model, batch, 20_000)
    scores = model.attention.transform.weight.grad.flatten()
    cosine = torch.nn.functional.cosine_similarity
    assert cosine(exact, estimate, dim=0) > 0.999
    # T of eq. (7) gets its gradient only through log alpha: from the score-function term
    # alone, whose rewards must sit with their own paths, items and steps to point right
    assert cosine(exact_scores, scores, dim=0) > 0.9
    estimated_gradient(model, batch, 20_000, score_function=False)
    assert model.attention.transform.weight.grad is None


def test_reinforce_rewards_belong_to_their_own_item_and_step():
    model = tiny(estimator="reinforce", input_feeding=True, samples=3).train()
    batch = collate([[4, 5, 6], [7, 8]], [[4, 6, 5], [5]])
    output = model(batch)
    gold = output.log_probs  # the mean over paths; the rewards are each path's own
    assert output.reward.shape == output.log_prior.shape == (3, 2, 4)
    # each path's reward is its log-probability of the reference symbol at that step
    mean_reward = output.reward.mean(0)  # B x T
    assert torch.allclose(
        mean_reward,
        gold.gather(-1, batch.target_out.unsqueeze(-1)).squeeze(-1),
        atol=1e-9,
    )
    assert not output.reward.requires_grad
    # the baseline moves towards the mean per-token reward, with decay 0.9
    model.loss(batch, output)
    first = model.baseline.item()
    mask = batch.target_mask.double()
    assert first == pytest.approx(((output.reward * mask).sum() / (3 * mask.sum())).item())
    model.loss(batch, output)
    assert model.baseline.item() == pytest.approx(first)  # 0.9 b + 0.1 b


def test_config_refuses_what_cannot_be_computed():
    with pytest.raises(ConfigError, match="input_feeding: .*estimator: reinforce"):
        configuration.parse(
            {"data": {"prepared": "x"}, "model": {"name": "hard", "input_feeding": True}}
        )
    with pytest.raises(ConfigError, match="monotonic: needs estimator: exact"):
        configuration.parse(
            {
                "data": {"prepared": "x"},
                "model": {"name": "hard", "monotonic": True, "estimator": "reinforce"},
            }
        )
    with pytest.raises(ConfigError, match="match_parameters: only applies"):
        configuration.parse(
            {"data": {"prepared": "x"}, "model": {"name": "lstm", "match_parameters": True}}
        )


@pytest.mark.parametrize("merge", ["linear", "concat"])
@pytest.mark.parametrize("size", ["small", "large"])
def test_input_feeding_can_match_the_parameter_count(merge, size):
    sizes = {
        "small": dict(embedding_dim=100, encoder_size=200, decoder_size=200, encoder_layers=1),
        "large": dict(embedding_dim=200, encoder_size=400, decoder_size=400, encoder_layers=2),
    }[size]
    vocab = (30, 45)
    plain = build_model("lstm", LSTMConfig(**sizes), *vocab).parameter_count()
    hard = build_model("hard", HardAttentionConfig(**sizes), *vocab).parameter_count()
    assert hard == plain  # the two models of §4 and §5 have identical parameter sets
    fed = LSTMConfig(**sizes, input_feeding=True, feed_merge=merge)
    matched = LSTMConfig(**sizes, input_feeding=True, feed_merge=merge, match_parameters=True)
    uncontrolled = build_model("lstm", fed, *vocab).parameter_count()
    model = build_model("lstm", matched, *vocab)
    assert uncontrolled > plain
    per_unit = sizes["decoder_size"] + 2 * sizes["encoder_size"] + 1 + vocab[1]
    per_unit += sizes["embedding_dim"] if merge == "linear" else 4 * sizes["decoder_size"]
    assert abs(model.parameter_count() - plain) <= per_unit / 2  # nearest d_s
    assert model.d_s < 3 * sizes["decoder_size"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("toy")
    return {task: write_task(root, task) for task in ("copy", "reverse")}


HARD = {**TINY_LSTM, "name": "hard"}


@pytest.mark.parametrize(
    ("model", "task", "epochs"),
    [
        (HARD, "reverse", 30),
        ({**HARD, "monotonic": True}, "copy", 20),
        ({**HARD, "estimator": "reinforce"}, "copy", 25),
        ({**HARD, "estimator": "reinforce", "input_feeding": True}, "copy", 40),
    ],
    ids=["exact-reverse", "monotonic-copy", "reinforce-copy", "reinforce-feeding-copy"],
)
def test_hard_attention_learns_toy_tasks(tasks, tmp_path: Path, model, task, epochs):
    data = recipe(tasks[task], model, max_epochs=epochs)
    report = Trainer(configuration.parse(data), tmp_path / "run").run()
    assert report["best"]["score"] >= DEV_BAR, [h["dev_scores"]["acc"] for h in report["history"]]
    assert report["test"]["acc"] >= TEST_BAR


@pytest.mark.parametrize(
    "options",
    [{}, {"monotonic": True}, {"estimator": "reinforce", "input_feeding": True, "samples": 2}],
    ids=["exact", "monotonic", "reinforce-feeding"],
)
def test_every_variant_trains_and_decodes_through_the_cli(run, tasks, tmp_path: Path, options):
    config = tmp_path / "hard.yaml"
    data = recipe(tasks["copy"], {**HARD, **options}, max_updates=12, validate_every=6)
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run("train", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    parameters = build_model(
        "hard",
        HardAttentionConfig(**{k: v for k, v in {**HARD, **options}.items() if k != "name"}),
        *_vocab_sizes(tmp_path / "run"),
    ).parameter_count()
    assert f"model hard: {parameters:,} parameters" in result.stderr
    for beam in ("1", "3"):
        decoded = run("decode", tmp_path / "run", "--beam", beam, input="abc\n\ngfe\n")
        assert decoded.exit_code == 0, decoded.output
        assert len(decoded.stdout.split("\n")) == 4  # one line per input line


def _vocab_sizes(run_dir: Path) -> tuple[int, int]:
    from transduce import checkpoint

    vocab = checkpoint.load(run_dir / checkpoint.BEST)["vocab"]
    return len(vocab["source"]), len(vocab["target"])
