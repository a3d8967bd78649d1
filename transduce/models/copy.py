"""The copy mechanism: a pointer-generator output distribution (See, Liu and Manning 2017,
"Get To The Point", §2.2), for the `lstm` and `hard` families (`model.copy: true`).

At decoder step t, with the attention a^t over the source positions, the context vector
h*_t, the decoder state s_t and the decoder input x_t (here the embedding of the previous
output symbol), the generation probability is (eq. 8)

    p_gen = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)

and the output distribution over the target vocabulary is (eq. 9)

    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: x_i = w} a^t_i.

The sum runs over the source positions whose symbol is w: the source symbol is mapped to
the target vocabulary by its spelling (`copy_index`). With `copy: true` the target
vocabulary is the training targets' symbols followed by every training source symbol that
is not among them (`transduce.data.dataset.build_vocabs`), so every source symbol has a
target id and the mixture is a distribution: a letter that the training forms never
showed can still be copied.

**Symbols the source vocabulary lacks** (read as `<unk>`): a batch decoded (or explained)
may say where each copies to, as See et al. extend the vocabulary with each source's
out-of-vocabulary words (`copy_targets`, `mark_unknown`): `copy_oov` (B x S) holds 0 where
the copy map applies, else the position's output id + 1, which is the symbol's target id
where the target vocabulary has it (a letter that only forms showed, or one left out of
the source vocabulary by `data.min_count`), else V + k - 1 for the row's k-th distinct
symbol that neither vocabulary has. `copy_slots` (B x K, K the most any row has) is True
at the extended ids that a row does not use. The output distribution then has V + K
entries: id V + k - 1 is reached by copy alone (P_vocab gives it nothing; a slot the row
does not use has probability 0), while `<unk>` keeps only p_gen P_vocab(<unk>). A decoder
input reads an extended id as `<unk>` (`in_vocabulary`), and the caller spells it from the
source (`transduce.tasks.seq2seq`, `Transducer.explain`, the exported file). So a letter
that training never showed (an uppercase letter, a rare diacritic) is copied as itself,
not written `<unk>`. Batches built for training and for the dev loss carry no `copy_oov`
(their unknown symbols, where `min_count` or `vocab_fraction` makes some, copy as `<unk>`);
the dev and test outputs are decoded with it. K travels as a tensor's width, not a number,
so a decoder step traced with K > 0 (`transduce export`) serves every K.

w_h*^T h*_t is sum_i a^t_i (w_h*^T h_i): the encoder states are projected to one number
each once per source (`gate_memory`), and a step mixes those with its attention. With
local attention this uses the normalized weights of the model contract (the context of
Tjandra et al. is not normalized); forward and step compute it the same way.

**Hard attention** (`model.name: hard`, exact estimator): the copy enters each alignment's
emission, p(y_i = w | a_i = j) = p_gen_ij P_vocab(w | j) + (1 - p_gen_ij) [x_j = w], with
p_gen_ij = sigmoid(w_c^T h_j + w_s^T h_i + w_x^T e(y_{i-1}) + b): the emission of an
alignment to x_j may copy x_j (a hard-attention copy as in CLUZH's transducer, whose COPY
action writes the attended symbol), and the mixture over alignments of eq. (3) is as before.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch
from transduce.special import UNK_ID


def in_vocabulary(previous: Tensor, size: int) -> Tensor:
    """Decoder input ids with the extended ones (a copied unknown symbol, >= `size`) read
    as `<unk>`: what a step embeds."""
    return previous.masked_fill(previous >= size, UNK_ID)


def copies(model: nn.Module) -> bool:
    """Whether a model has the copy mechanism (and reads extended ids itself); an
    ensemble (`members`), whether any member has it."""
    members = getattr(model, "members", None)
    if isinstance(members, nn.ModuleList):
        return any(copies(m) for m in members)
    return bool(getattr(model.config, "copy", False))


def copy_targets(
    symbols: Sequence[str],
    source: Container[str],
    target: Mapping[str, int],
    size: int,
    width: int = 0,
) -> tuple[list[str], list[int]]:
    """Where a source's symbols that the source vocabulary lacks copy to (module
    docstring): the distinct symbols that neither vocabulary has, in order of first
    appearance (the k-th is output id `size` + k - 1), and for each position what
    `Batch.copy_oov` holds: 0 for a symbol the source vocabulary has, else its output
    id + 1.

    Args:
        symbols: the source's symbols.
        source: the source vocabulary's symbols.
        target: the target vocabulary's symbol -> id.
        size: V, the target vocabulary's size.
        width: the length of the encoded source, where it is longer (an appended `</s>`):
            the row is padded with 0 to it.
    """
    names = list(dict.fromkeys(s for s in symbols if s not in source and s not in target))
    extended = {name: size + k for k, name in enumerate(names)}
    row = [0 if s in source else target.get(s, extended.get(s, 0)) + 1 for s in symbols]
    return names, row + [0] * (width - len(row))


def copy_map(source: list[str], target: list[str]) -> Tensor:
    """For each source id, the target id of the same symbol (`<unk>`'s when it has none)."""
    index = {symbol: i for i, symbol in enumerate(target)}
    return torch.tensor([index.get(symbol, UNK_ID) for symbol in source], dtype=torch.long)


class CopyGate(nn.Module):
    """p_gen of eq. (8) as three linear maps, to 1 unit each: of the encoder states (the
    context term), of the decoder state (with the bias) and of the decoder input."""

    def __init__(self, memory_size: int, state_size: int, input_size: int) -> None:
        super().__init__()
        self.memory = nn.Linear(memory_size, 1, bias=False)  # w_h*
        self.state = nn.Linear(state_size, 1)  # w_s, b_ptr
        self.input = nn.Linear(input_size, 1, bias=False)  # w_x

    def project(self, memory: Tensor) -> Tensor:
        """w_h*^T h_i for every encoder state: B x S x 2H -> B x S."""
        return self.memory(memory).squeeze(-1)

    def query(self, states: Tensor, inputs: Tensor) -> Tensor:
        """w_s^T s_t + w_x^T x_t + b_ptr: ... x H and ... x E -> ..."""
        return (self.state(states) + self.input(inputs)).squeeze(-1)


class Copying(nn.Module):
    """What a family with `copy: true` holds: the gate of eq. (8) and the target id of each
    source id (`copy_map`, set from the vocabularies by `read_vocabularies`, not saved:
    checkpoints carry the vocabularies)."""

    target_vocab: int  # V (the model's)
    config: Any  # the model's: `copy`

    def _init_copy(self, memory_size: int, state_size: int, input_size: int, sources: int) -> None:
        self.gate = CopyGate(memory_size, state_size, input_size)
        self.register_buffer("copy_map", torch.full((sources,), UNK_ID), persistent=False)

    def read_vocabularies(self, source: list[str], target: list[str]) -> None:
        """With `copy`: the target id of each source id, by spelling."""
        if getattr(self, "copy_map", None) is not None:
            self.copy_map.copy_(copy_map(source, target))

    def copy_state(self, batch: Batch) -> dict[str, Tensor]:
        """What a decoder state needs to copy: `copy_index`, the output id of each source
        position (B x S: the copy map's, or where the batch has `copy_oov` the one it
        gives), and `copy_slots`, B x K (K = 0 without extended ids; module docstring)."""
        index = self.copy_map[batch.source]  # B x S
        if batch.copy_oov is not None:
            index = torch.where(batch.copy_oov > 0, batch.copy_oov - 1, index)
        slots = batch.copy_slots
        if slots is None:
            slots = batch.source.new_zeros(len(batch), 0, dtype=torch.bool)  # B x 0
        return {"copy_index": index, "copy_slots": slots}

    def _copying(self, batch: Batch) -> tuple[Tensor, Tensor | None]:
        """For a teacher-forced pass: the output id of each source position, B x S, and
        the slots of the unknown symbols, B x K (None where K = 0: nothing to add)."""
        state = self.copy_state(batch)
        slots = state["copy_slots"]
        return state["copy_index"], slots if slots.shape[-1] else None

    def _inputs(self, previous: Tensor) -> Tensor:
        """Decoder input ids as the embedding reads them: with copy, an extended id as
        `<unk>` (`in_vocabulary`)."""
        return in_vocabulary(previous, self.target_vocab) if self.config.copy else previous


def mix(
    log_vocab: Tensor, gate: Tensor, attention: Tensor, index: Tensor, slots: Tensor | None = None
) -> Tensor:
    """log P(w) of eq. (9).

    Args:
        log_vocab: log P_vocab, B x [T x] V.
        gate: the logit of p_gen, B x [T].
        attention: a^t over the source positions, B x [T x] S (0 on padding).
        index: the output id of each source symbol, B x S (< V + K).
        slots: B x K, the extended ids (module docstring), True where a row does not use
            one; None: K = 0.

    Returns:
        B x [T x] (V + K) log-probabilities (float32 or wider).
    """
    log_vocab, gate, attention = log_vocab.float(), gate.float(), attention.float()
    p_gen = torch.sigmoid(gate).unsqueeze(-1)  # B x [T x] 1
    if attention.dim() == 3:
        index = index.unsqueeze(1).expand(-1, attention.shape[1], -1)  # B x T x S
    vocab = extend(log_vocab.exp(), slots)  # P_vocab is 0 on the extended ids
    copied = torch.zeros_like(vocab).scatter_add_(-1, index, attention)  # B x [T x] (V + K)
    probs = p_gen * vocab + (1 - p_gen) * copied
    return rule_out(probs.clamp_min(torch.finfo(probs.dtype).tiny).log(), slots)


def mix_emission(
    log_emission: Tensor, gate: Tensor, index: Tensor, slots: Tensor | None = None
) -> Tensor:
    """The hard-attention emission with copy, log p(w | a_i = j) (module docstring).

    Args:
        log_emission: log P_vocab(w | j), B x [T x] S x V.
        gate: the logit of p_gen_ij, B x [T x] S.
        index: the output id of each source symbol, B x S (< V + K).
        slots: B x K, the extended ids (module docstring), True where a row does not use
            one; None: K = 0.

    Returns:
        B x [T x] S x (V + K) log-probabilities.
    """
    log_emission, gate = log_emission.float(), gate.float()
    p_gen = torch.sigmoid(gate).unsqueeze(-1)  # B x [T x] S x 1
    if log_emission.dim() == 4:
        index = index.unsqueeze(1).expand(-1, log_emission.shape[1], -1)  # B x T x S
    vocab = extend(log_emission.exp(), slots)  # P_vocab is 0 on the extended ids
    probs = (p_gen * vocab).scatter_add(-1, index.unsqueeze(-1), 1 - p_gen)
    return rule_out(probs.clamp_min(torch.finfo(probs.dtype).tiny).log(), slots)


def extend(probs: Tensor, slots: Tensor | None) -> Tensor:
    """B x ... x V probabilities (or anything to widen) with K zeros appended (`slots`,
    B x K; None or K = 0: as they are). The zeros take their shape from the tensors, so a
    step traced with K > 0 serves every K (`transduce.export` traces it so)."""
    if slots is None or slots.shape[-1] == 0:
        return probs
    zeros = torch.zeros_like(_across(slots, probs), dtype=probs.dtype)  # B x ... x K
    return torch.cat([probs, zeros], dim=-1)


def rule_out(log_probs: Tensor, slots: Tensor | None) -> Tensor:
    """B x ... x (V + K) log-probabilities with -inf at the extended ids that a row does
    not use (`slots` True; None or K = 0: as they are)."""
    if slots is None or slots.shape[-1] == 0:
        return log_probs
    unused = _across(slots, log_probs)  # B x ... x K
    vocab = torch.zeros_like(
        log_probs[..., : log_probs.shape[-1] - slots.shape[-1]], dtype=torch.bool
    )
    return log_probs.masked_fill(torch.cat([vocab, unused], dim=-1), float("-inf"))


def _across(slots: Tensor, like: Tensor) -> Tensor:
    """B x K `slots` repeated over the middle axes of `like` (B x ... x V): B x ... x K."""
    for _ in range(like.dim() - 2):
        slots = slots.unsqueeze(1)  # B x 1 ... x K
    return slots.expand(*like.shape[:-1], -1)
