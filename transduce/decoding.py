"""Greedy and beam search over the step API of any `Seq2SeqModel` of the zoo.

Both encode once (`init_state`), then call `step` for the sentences still being decoded:
a sentence leaves the batch as soon as it is finished, so the work shrinks with it.

Scores are sums of log-probabilities, the end-of-sequence step included. With a length
penalty alpha, hypotheses are ranked by score / |Y|^alpha, where |Y| counts the output
symbols plus the end-of-sequence step (so an empty output has |Y| = 1). A sentence stops at
its output limit: `max_output_length`, or by default 2 |x| + 10 symbols.

Beam search keeps `beam` hypotheses per sentence; at each step it looks at the 2 x beam best
extensions, moves those that end (EOS among the best `beam`) to the finished list, and keeps
the best `beam` that do not. A sentence is done when `beam` hypotheses have finished and
no live one can still rank among them (`_settled`): with a length penalty alpha > 0 a
longer output may still overtake, so such a search can run on towards the output limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.config import DecodeConfig
from transduce.data.batching import Batch, collate, mark_unknown
from transduce.models.base import Seq2SeqModel, select_state
from transduce.special import BOS_ID, EOS_ID, PAD_ID, SEP_ID


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without EOS
    score: float  # sum of log-probabilities, EOS included
    normalized: float  # score / (len(tokens) + 1) ** length_penalty


def _limits(model: Seq2SeqModel, batch: Batch, max_output_length: int | None) -> Tensor:
    """Output length limits (symbols before EOS): given, or 2|x| + 10, within the model's."""
    if max_output_length is not None:
        limits = torch.full((len(batch),), max_output_length, dtype=torch.long)
    else:
        limits = batch.source_mask.sum(dim=1).cpu() * 2 + 10  # B
    return limits if model.max_length is None else limits.clamp(max=model.max_length - 1)


def never_written(
    source: Tensor, copy_index: Tensor | None, width: int, sep: int = SEP_ID, pad: int = PAD_ID
) -> Tensor:
    """B x `width` (V, or V + K with extended ids): True at the output ids that a
    sentence's output never holds, beside PAD and BOS: `<sep>`, and for a model that
    copies, the ids that its source has only among its tags (the positions before its
    first `<sep>`, as `tag_input` reads them), not also after it.

    Why: with `copy` the target vocabulary holds every source symbol (so a letter that the
    training forms never showed can be copied), the tags and `<sep>` too, and an emission
    that copies a position gives that position's symbol (`transduce.models.copy`); the
    2017 grids' copy models wrote some (`Trio[N]en`; RESULTS.md counts them). A form never
    holds a tag. Ruling them out at decoding changes no greedy output that held none, and
    leaves training as it was. (A task whose outputs hold a symbol that its sources have
    only among their tags would need this rule off; no task here has one. A tag that only
    other sources hold is not ruled out: the generator can give it, as any target symbol.)
    TorchScript-compatible (`transduce.export` calls it; `sep` and `pad` are the ids, as
    arguments since a compiled function reads no module constant)."""
    size = source.shape[0]
    never = torch.zeros(size, width, dtype=torch.bool, device=source.device)
    never[:, sep] = True
    if copy_index is not None:
        separators = source == sep
        before = torch.cumsum(separators.long(), dim=1) == 0  # B x S
        real = source != pad
        tags = before & separators.any(dim=1, keepdim=True) & real
        rest = ~before & ~separators & real
        zeros = torch.zeros(size, width, device=source.device)
        at_tags = zeros.scatter_add(1, copy_index, tags.float()) > 0
        elsewhere = zeros.scatter_add(1, copy_index, rest.float()) > 0
        only_tags = at_tags & ~elsewhere
        only_tags[:, :sep] = False  # PAD, BOS, EOS, <unk>: not by this rule
        never = never | only_tags
    return never


def copy_index_of(state: dict[str, Tensor]) -> Tensor | None:
    """The copy map of a decoder state as `init_state` gives it (`copy_index`, B x S), an
    ensemble's from its first member that copies; None for a model that does not copy.
    TorchScript-compatible."""
    for key, value in state.items():
        if key == "copy_index" or key.endswith("/copy_index"):
            return value
    return None


def _step_log_probs(model: Seq2SeqModel, state: dict, previous: Tensor) -> tuple[Tensor, dict]:
    step = model.step(state, previous)
    log_probs = step.log_probs.float()  # B x V
    log_probs[:, PAD_ID] = float("-inf")  # never predicted
    log_probs[:, BOS_ID] = float("-inf")
    return log_probs, step.state


def _normalize(score: float, length: int, alpha: float) -> float:
    return score / (length + 1) ** alpha if alpha else score


@torch.inference_mode()
def greedy(
    model: Seq2SeqModel, batch: Batch, max_output_length: int | None = None
) -> list[Hypothesis]:
    """The most probable symbol at each step, for every sentence of the batch."""
    size = len(batch)
    limits = _limits(model, batch, max_output_length)
    state = model.init_state(batch)
    copy_index = copy_index_of(state)  # for `never_written`
    device = batch.source.device
    active = torch.arange(size)  # original rows still decoding
    row_limits = limits.to(device)  # the active rows' limits, on the device
    previous = torch.full((size,), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(size, dtype=torch.float64)
    outputs: list[list[int]] = [[] for _ in range(size)]
    results: list[Hypothesis | None] = [None] * size
    never: Tensor | None = None  # the active rows' `never_written`
    for t in range(int(limits.max()) + 1):
        log_probs, state = _step_log_probs(model, state, previous)
        if never is None:
            never = never_written(batch.source, copy_index, log_probs.shape[-1])
        log_probs.masked_fill_(never, float("-inf"))
        at_limit = row_limits <= t  # rows that must end now
        best_score, best = log_probs.max(dim=-1)  # B
        best = torch.where(at_limit, torch.full_like(best, EOS_ID), best)
        best_score = torch.where(at_limit, log_probs[:, EOS_ID], best_score)
        # one copy to the host a step (a GPU waits once, not twice): ids < 2^53 are exact
        # in float64
        host = torch.stack([best.double(), best_score.double()]).cpu()  # 2 x B
        scores[active] += host[1]
        tokens = host[0].long().tolist()
        keep = []
        for row, (original, token) in enumerate(zip(active.tolist(), tokens)):
            if token == EOS_ID:
                results[original] = Hypothesis(
                    outputs[original], float(scores[original]), float(scores[original])
                )
            else:
                outputs[original].append(token)
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(tokens):
            rows = torch.tensor(keep, device=device)
            state = select_state(state, rows)
            never = never.index_select(0, rows)
            best = best.index_select(0, rows)
            row_limits = row_limits.index_select(0, rows)
            active = active[torch.tensor(keep)]
        previous = best
    done = [r for r in results if r is not None]  # every row ends: at EOS or at its limit
    if len(done) != size:
        raise RuntimeError("greedy: a sentence left the batch without an output")
    return done


def _settled(
    finished: list[Hypothesis], width: int, best_live: float, length: int, limit: int, alpha: float
) -> bool:
    """Whether a sentence's search is over: `width` hypotheses have ended, and no live one
    can still rank among them. A live hypothesis of score `best_live` (log-probability, at
    most 0; the best of its sentence) and `length` symbols can only lose probability, so
    its final normalized score is at most `best_live` / (l + 1)^alpha for some length l
    from `length` to `limit` (the best of the two ends). Stopping at the first `width`
    ended hypotheses instead (as "early stopping" does) loses the best one whenever
    `width` poor hypotheses end while it is still being written, which a peaked model
    makes common: the other beams hold its unlikely alternatives, whose end comes soon."""
    if len(finished) < width:
        return False
    kept = sorted((h.normalized for h in finished), reverse=True)[width - 1]
    bound = max(
        _normalize(best_live, length, alpha), _normalize(best_live, max(limit, length), alpha)
    )
    return bound <= kept


@torch.inference_mode()
def beam_search(
    model: Seq2SeqModel,
    batch: Batch,
    beam: int,
    length_penalty: float = 0.0,
    nbest: int = 1,
    max_output_length: int | None = None,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, best first."""
    size, width = len(batch), beam
    limits = _limits(model, batch, max_output_length)
    device = batch.source.device
    state = model.init_state(batch)
    copy_index = copy_index_of(state)  # for `never_written`
    state = select_state(state, torch.arange(size, device=device).repeat_interleave(width))
    never: Tensor | None = None  # `never_written` of the live sentences, b x 1 x (V + K)
    sentences = list(range(size))  # original index of each active sentence
    history: list[list[list[int]]] = [[[] for _ in range(width)] for _ in range(size)]
    scores = torch.full((size, width), float("-inf"), device=device)  # b x K
    scores[:, 0] = 0.0  # the first step extends one hypothesis per sentence
    previous = torch.full((size * width,), BOS_ID, dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(size)]
    for t in range(int(limits.max()) + 1):
        log_probs, state = _step_log_probs(model, state, previous)
        vocab = log_probs.shape[-1]
        log_probs = log_probs.view(len(sentences), width, vocab)  # b x K x V
        if never is None:
            never = never_written(batch.source, copy_index, vocab).unsqueeze(1)
        log_probs.masked_fill_(never, float("-inf"))
        at_limit = (limits[sentences] <= t).to(device)  # b
        if bool(at_limit.any()):
            eos = log_probs[:, :, EOS_ID].clone()
            log_probs[at_limit] = float("-inf")
            log_probs[:, :, EOS_ID] = eos
        candidates = (scores.unsqueeze(-1) + log_probs).view(len(sentences), -1)  # b x (K*V)
        top_scores, top_index = candidates.topk(2 * width, dim=-1)  # b x 2K
        top_scores, top_index = top_scores.tolist(), top_index.tolist()
        rows, tokens, new_scores, new_history, still, kept = [], [], [], [], [], []
        for i, original in enumerate(sentences):
            beams: list[tuple[int, int, float]] = []
            for rank, (score, flat) in enumerate(zip(top_scores[i], top_index[i])):
                if score == float("-inf"):
                    break
                source_beam, token = divmod(flat, vocab)
                if token == EOS_ID:
                    if rank < width:
                        past = history[i][source_beam]
                        finished[original].append(
                            Hypothesis(past, score, _normalize(score, len(past), length_penalty))
                        )
                elif len(beams) < width:
                    beams.append((source_beam, token, score))
            if not beams or _settled(
                finished[original], width, beams[0][2], t + 1, int(limits[original]), length_penalty
            ):
                continue
            while len(beams) < width:  # too few live extensions: pad with dead beams
                beams.append((beams[0][0], PAD_ID, float("-inf")))
            still.append(original)
            kept.append(i)
            for source_beam, token, score in beams:
                rows.append(i * width + source_beam)
                tokens.append(token)
                new_scores.append(score)
            new_history.append([history[i][b] + [tok] for b, tok, _ in beams])
        if not still:
            break
        index = torch.tensor(rows, device=device)
        state = select_state(state, index)
        never = never.index_select(0, torch.tensor(kept, device=device))
        previous = torch.tensor(tokens, dtype=torch.long, device=device)
        scores = torch.tensor(new_scores, device=device).view(len(still), width)
        sentences, history = still, new_history
    return [sorted(hyps, key=lambda h: -h.normalized)[:nbest] for hyps in finished]


def decode_batch(
    model: Seq2SeqModel, batch: Batch, options: DecodeConfig
) -> list[list[Hypothesis]]:
    """Greedy search for beam 1 (and one hypothesis), beam search otherwise; with
    `prob_mass`, each sentence's hypotheses only as far as `up_to_mass` keeps them."""
    o = options
    if o.beam == 1 and o.nbest == 1:
        return [[h] for h in greedy(model, batch, o.max_output_length)]
    found = beam_search(model, batch, o.beam, o.length_penalty, o.nbest, o.max_output_length)
    if o.prob_mass is None:
        return found
    return [up_to_mass(hyps, o.prob_mass) for hyps in found]


def up_to_mass(hypotheses: list[Hypothesis], mass: float) -> list[Hypothesis]:
    """The best hypotheses (in their order) until their probabilities, exp(score), add up
    to at least `mass`; all of them if they never do."""
    kept, total = [], 0.0
    for hypothesis in hypotheses:
        kept.append(hypothesis)
        total += math.exp(hypothesis.score)
        if total >= mass:
            break
    return kept


def decode_all(
    model: Seq2SeqModel,
    sources: list[list[int]],
    options: DecodeConfig,
    device: torch.device | str = "cpu",
    unknown: Sequence[Sequence[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Decode id sequences in batches of `options.batch_size` similar lengths; results in
    input order.

    `unknown`, for a model that copies: for each source position, 0, or where a symbol that
    the source vocabulary lacks copies to, its output id + 1
    (`transduce.models.copy.copy_targets`). A hypothesis may then hold an id past the
    target vocabulary, a symbol that neither vocabulary has, copied; the caller spells it."""
    batch_size = options.batch_size
    was_training = model.training
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = collate([sources[i] for i in chunk])
            if unknown is not None:
                mark_unknown(batch, [unknown[i] for i in chunk], model.target_vocab)
            batch = batch.to(device)
            for i, hyps in zip(chunk, decode_batch(model, batch, options)):
                results[i] = hyps
    finally:
        model.train(was_training)
    return results
