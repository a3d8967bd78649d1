"""The transformer encoder-decoder (Vaswani et al. 2017), as Rios et al. (2021, Table 5) use it.

Layers of self-attention and a feed-forward block, pre- or post-norm; the decoder adds
cross-attention over the encoder states. Positions are sinusoidal (any length) or learned
(up to `max_positions`). Embeddings are scaled by sqrt(d_model) and can be tied: `target`
shares the target embeddings with the output layer, `all` also with the source embeddings
(one vocabulary for both sides).

Cross-attention is computed on the explicit path, softmax(QK^T / sqrt(d)) then V, so its
weights are returned for every layer and head (K = decoder layers x heads, named
"decoder.{layer}.head.{head}", 1-based). Self-attention, whose weights nothing reads, uses
PyTorch's fused scaled_dot_product_attention, unless the encoder has the modifications of
Dufter et al. (2020) (`transduce.models.selfattention`): direct position interactions
instead of source position embeddings, learnable temperature, convolved attention.
Decoding keeps a cache of each layer's past
self-attention keys and values and the cross-attention keys and values of the source, so
a step costs one position, not the whole prefix.

With `copy: true` the output is See et al.'s (2017) pointer-generator mixture
(`transduce.models.copy`), whose attention a^t is the mean over the heads of the last
decoder layer's cross-attention (before any dropout on it), whose decoder state is the
last layer's (normalized) output and whose input is the embedded previous symbol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch
from transduce.errors import DataError
from transduce.models.base import ModelConfig, Seq2SeqModel, Seq2SeqOutput, State, Step, register
from transduce.models.copy import Copying, mix
from transduce.models.layers import Dropout
from transduce.models.selfattention import (
    AttentionOptions,
    DropHead,
    SelfAttention,
    head_names,
    merge_heads,
    split_heads,
)
from transduce.special import PAD_ID, SEP_ID


@dataclass
class TransformerConfig(AttentionOptions, ModelConfig):
    """The options of `AttentionOptions` (Dufter et al. 2020) act on the encoder: how source
    positions enter (`position_mode`; the target's are always added) and its self-attention.
    `max_positions` is their t."""

    encoder_layers: int = 4
    decoder_layers: int = 4
    d_model: int = 256
    heads: int = 4
    feedforward: int = 1024
    dropout: float = 0.3  # residual branches (and embeddings, unless embedding_dropout)
    embedding_dropout: float | None = None  # None: as dropout
    attention_dropout: float = 0.0  # on attention weights
    # DropHead (Zhou et al. 2020): in training, each head of every attention is dropped with
    # this probability for each example, the kept heads rescaled by heads / kept
    drophead: float = 0.0
    # how DropHead rescales the kept heads: `heads` (H / kept, Zhou et al.) or
    # `inverse_keep` (1 / (1 - drophead), as the Sockeye fork of Rios et al. ran it)
    drophead_scale: Literal["heads", "inverse_keep"] = "heads"
    activation_dropout: float = 0.0  # inside the feed-forward block
    norm: Literal["pre", "post"] = "pre"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 512  # t: learned positions, direct interactions, conv1d
    position_dim: int = 64  # position_mode concat: source embeddings get d_model - this
    # source positions: vanilla 0, 1, 2, ...; separator (Rios et al. 2021, Figure 2): <sep>
    # at 0, the tags left of it at -1, -2, ..., the lemma at 1, 2, ... (sources without
    # <sep> keep vanilla positions); sinusoidal positions only
    position_scheme: Literal["vanilla", "separator"] = "vanilla"
    tie_embeddings: Literal["none", "target", "all"] = "target"
    # a pointer-generator copy distribution over the source symbols (`transduce.models.copy`)
    copy: bool = False

    length_option = "max_positions"

    @property
    def shared_vocabulary(self) -> bool:
        return self.tie_embeddings == "all"

    @property
    def cross_attention_dropout(self) -> float:
        return self.attention_dropout

    def check(self) -> list[str]:
        problems = []
        for name in (
            "encoder_layers",
            "decoder_layers",
            "d_model",
            "heads",
            "feedforward",
            "max_positions",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be at least 1")
        if self.heads >= 1 and self.d_model % self.heads:
            problems.append(f"heads: must divide d_model ({self.d_model}), not {self.heads}")
        if self.position_scheme == "separator" and self.positions != "sinusoidal":
            problems.append("position_scheme: separator needs sinusoidal positions")
        if self.position_scheme == "separator" and self.position_mode not in ("add", "concat"):
            problems.append("position_scheme: separator needs position_mode add or concat")
        if self.position_mode == "concat":
            if not 1 <= self.position_dim < self.d_model:
                problems.append(f"position_dim: must be in [1, d_model), not {self.position_dim}")
            if self.tie_embeddings == "all":
                problems.append(
                    "position_mode: concat gives the source embeddings another size "
                    "than the target's: tie_embeddings all is not possible"
                )
        problems += self.option_problems(self.encoder_layers)
        for name in (
            "dropout",
            "embedding_dropout",
            "attention_dropout",
            "activation_dropout",
            "drophead",
        ):
            if not 0 <= (getattr(self, name) or 0) < 1:
                problems.append(f"{name}: must be in [0, 1)")
        return problems


def sinusoids(length: int, dim: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): length x dim."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # L x 1
    rate = torch.exp(
        torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim)
    )  # D/2
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: dim // 2])
    return table  # L x D


def separator_positions(source: Tensor) -> Tensor:
    """Positions of Rios et al. (2021), Figure 2: the first <sep> at 0, left of it -1, -2,
    ..., right of it 1, 2, ...; rows without <sep> count 0, 1, 2, ...: B x S."""
    width = source.shape[1]
    index = torch.arange(width, device=source.device).expand_as(source)  # B x S
    sep = source == SEP_ID
    first = torch.where(sep.any(dim=1), sep.int().argmax(dim=1), 0)  # B
    return index - first.unsqueeze(1)


class Positions(nn.Module):
    def __init__(self, kind: str, dim: int, maximum: int) -> None:
        super().__init__()
        self.kind, self.dim, self.maximum = kind, dim, maximum
        if kind == "learned":
            self.table = nn.Embedding(maximum, dim)
            nn.init.normal_(self.table.weight, std=dim**-0.5)
        else:
            self.register_buffer("cache", sinusoids(256, dim), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """Encodings of integer positions (any shape; sinusoidal ones may be negative, as
        separator positions are) -> shape x D."""
        if torch.jit.is_tracing():  # `transduce export`: no Python branch on the values
            return self._traced(positions)
        if self.kind == "learned":
            top = int(positions.max()) + 1 if positions.numel() else 0
            if top > self.maximum:
                raise DataError(
                    f"a sequence of length {top} is longer than max_positions ({self.maximum})"
                )
            return self.table(positions)
        size = positions.abs()
        top = int(size.max()) + 1 if positions.numel() else 0
        if top > self.cache.shape[0]:
            self.cache = sinusoids(max(top, 2 * self.cache.shape[0]), self.dim).to(
                self.cache.device
            )
        table = self.cache[size]
        if positions.numel() and int(positions.min()) < 0:  # sin is odd, cos even
            table[..., 0::2] *= torch.where(positions < 0, -1.0, 1.0).unsqueeze(-1)
        return table

    def grow(self, length: int) -> None:
        """Cache the sinusoids of at least `length` positions."""
        if self.kind != "learned" and self.cache.shape[0] < length:
            self.cache = sinusoids(length, self.dim).to(self.cache.device)

    def _traced(self, positions: Tensor) -> Tensor:
        """`forward` as one graph for every input: the learned table (a position beyond it
        is an index error), or the sinusoids of the cached table (`grow` it before tracing)
        with the sign of sin flipped where a position is negative (a no-op elsewhere)."""
        if self.kind == "learned":
            return self.table(positions)
        table = self.cache[positions.abs()]  # ... x D
        even = torch.arange(self.dim, device=positions.device) % 2 == 0  # D: the sin columns
        flip = (positions < 0).unsqueeze(-1) & even  # ... x D
        return table * torch.where(flip, -1.0, 1.0)  # exact: a product by 1 or -1


class CrossAttention(nn.Module):
    """Multi-head attention over the encoder states, on the explicit path (weights kept)."""

    def __init__(
        self,
        dim: int,
        heads: int,
        dropout: float,
        drophead: float = 0.0,
        drophead_scale: str = "heads",
    ) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.drop = Dropout(dropout)
        self.drophead = DropHead(drophead, drophead_scale)

    def memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder states, B x H x S x Dh each (computed once)."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.heads), split_heads(v, self.heads)

    def forward(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Output B x T x D, the weights B x H x T x S, and the weights as they mixed the
        values: after dropout and DropHead (both linear in the weights, so dropping a
        head's weights drops its context)."""
        q = split_heads(self.query(x), self.heads)  # B x H x T x Dh
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # B x H x T x S
        weights = torch.softmax(scores.masked_fill(~mask[:, None, None, :], float("-inf")), dim=-1)
        used = self.drophead(self.drop(weights))  # B x H x T x S
        context = torch.matmul(used, v)  # B x H x T x Dh
        return self.out(merge_heads(context)), weights, used


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.inner, self.outer, self.drop = (
            nn.Linear(dim, hidden),
            nn.Linear(hidden, dim),
            Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.drop(torch.relu(self.inner(x))))


class Sublayer(nn.Module):
    """x + dropout(f(norm(x))) (pre-norm) or norm(x + dropout(f(x))) (post-norm)."""

    def __init__(self, dim: int, dropout: float, pre: bool) -> None:
        super().__init__()
        self.norm, self.drop, self.pre = nn.LayerNorm(dim), Dropout(dropout), pre

    def inputs(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def residual(self, x: Tensor, y: Tensor) -> Tensor:
        return x + self.drop(y) if self.pre else self.norm(x + self.drop(y))


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig, layer: int = 1) -> None:
        super().__init__()
        pre = c.norm == "pre"
        self.attention = SelfAttention(
            c.d_model,
            c.heads,
            c.attention_dropout,
            c.drophead,
            drophead_scale=c.drophead_scale,
            length=c.max_positions,
            **c.attention_kwargs(layer),
        )
        self.feedforward = FeedForward(c.d_model, c.feedforward, c.activation_dropout)
        self.first, self.second = (
            Sublayer(c.d_model, c.dropout, pre),
            Sublayer(c.d_model, c.dropout, pre),
        )

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.first.residual(x, self.attention(self.first.inputs(x), mask))
        return self.second.residual(x, self.feedforward(self.second.inputs(x)))


class DecoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        pre = c.norm == "pre"
        self.self_attention = SelfAttention(
            c.d_model, c.heads, c.attention_dropout, c.drophead, drophead_scale=c.drophead_scale
        )
        self.cross_attention = CrossAttention(
            c.d_model, c.heads, c.attention_dropout, c.drophead, c.drophead_scale
        )
        self.feedforward = FeedForward(c.d_model, c.feedforward, c.activation_dropout)
        self.subs = nn.ModuleList(Sublayer(c.d_model, c.dropout, pre) for _ in range(3))

    def forward(
        self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        first, second, third = self.subs
        x = first.residual(x, self.self_attention(first.inputs(x), causal=True))
        attended, weights, used = self.cross_attention(second.inputs(x), k, v, mask)
        x = second.residual(x, attended)
        return third.residual(x, self.feedforward(third.inputs(x))), weights, used

    def step(self, x: Tensor, state: State, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        first, second, third = self.subs
        attended, k, v = self.self_attention.step(
            first.inputs(x), state[f"k{layer}"], state[f"v{layer}"]
        )
        x = first.residual(x, attended)
        attended, weights, _ = self.cross_attention(
            second.inputs(x), state[f"mk{layer}"], state[f"mv{layer}"], state["mask"]
        )
        x = second.residual(x, attended)
        return third.residual(x, self.feedforward(third.inputs(x))), weights, k, v


@register
class TransformerModel(Copying, Seq2SeqModel):
    name = "transformer"
    Config = TransformerConfig

    def __init__(self, config: TransformerConfig, source_vocab: int, target_vocab: int) -> None:
        super().__init__(config, source_vocab, target_vocab)
        c = config
        if c.tie_embeddings == "all" and source_vocab != target_vocab:
            raise ValueError("tie_embeddings: all needs one vocabulary for both sides")
        concat = c.position_mode == "concat"
        self.target_embedding = nn.Embedding(target_vocab, c.d_model, padding_idx=PAD_ID)
        self.source_embedding = (
            self.target_embedding
            if c.tie_embeddings == "all"
            else nn.Embedding(source_vocab, c.d_model - c.position_dim * concat, padding_idx=PAD_ID)
        )
        self.positions = Positions(c.positions, c.d_model, c.max_positions)
        # SAN+PE[con] (Dufter et al. 2020 §2.2): the source's own, narrower positions
        self.source_positions = (
            Positions(c.positions, c.position_dim, c.max_positions) if concat else None
        )
        self.encoder = nn.ModuleList(
            EncoderLayer(c, layer) for layer in range(1, c.encoder_layers + 1)
        )
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        pre = c.norm == "pre"
        self.encoder_norm = nn.LayerNorm(c.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if pre else nn.Identity()
        self.output = nn.Linear(c.d_model, target_vocab)
        self.drop = Dropout(c.dropout if c.embedding_dropout is None else c.embedding_dropout)
        self.scale = math.sqrt(c.d_model)
        self._initialize()
        if c.tie_embeddings != "none":
            self.output.weight = self.target_embedding.weight
        if c.copy:  # See et al. (2017), eq. (8); the copy map: `read_vocabularies`
            self._init_copy(c.d_model, c.d_model, c.d_model, source_vocab)

    def _copy(
        self,
        log_probs: Tensor,
        last: Tensor,
        output: Tensor,
        inputs: Tensor,
        gate_memory: Tensor,
        index: Tensor,
        slots: Tensor | None = None,
    ) -> Tensor:
        """The copy mixture of eq. (9) from the last layer's weights B x H x [T x] S, the
        normalized output B x [T x] D, the embedded inputs and w_h*^T h_j B x S (`slots`:
        B x K zeros for the K unknown source symbols, `transduce.models.copy`)."""
        alpha = last.float().mean(dim=1)  # B x [T x] S
        context = alpha * gate_memory.unsqueeze(-2) if alpha.dim() == 3 else alpha * gate_memory
        gate = context.sum(-1) + self.gate.query(output, inputs).float()  # B x [T]
        return mix(log_probs, gate, alpha, index, slots)

    def _initialize(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) and module not in self._position_tables():
                nn.init.normal_(module.weight, std=self.config.d_model**-0.5)
                nn.init.zeros_(module.weight[PAD_ID])

    def _position_tables(self) -> list[nn.Module]:
        modules = (self.positions, self.source_positions)
        return [m.table for m in modules if m is not None and hasattr(m, "table")]

    @property
    def max_length(self) -> int | None:
        c = self.config
        return c.max_positions if c.positions == "learned" or c.needs_length() else None

    @property
    def attention_names(self) -> list[str]:
        return head_names("decoder", self.config.decoder_layers, self.config.heads)

    def _embed(
        self, embedding: nn.Embedding, ids: Tensor, positions: Tensor | None = None
    ) -> Tensor:
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)  # 1 x T
        return self.drop(embedding(ids) * self.scale + self.positions(positions))  # B x T x D

    def encode(self, batch: Batch) -> Tensor:
        c = self.config
        positions = None
        if c.position_scheme == "separator":
            positions = separator_positions(batch.source)  # B x S
        if c.position_mode == "add":
            x = self._embed(self.source_embedding, batch.source, positions)  # B x S x D
        else:  # concat, or no position embeddings (direct interactions, or none)
            x = self.source_embedding(batch.source) * self.scale  # B x S x D'
            if self.source_positions is not None:
                if positions is None:
                    positions = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2])
                x = torch.cat([x, self.source_positions(positions)], dim=-1)  # B x S x D
            x = self.drop(x)
        for layer in self.encoder:
            x = layer(x, batch.source_mask)
        return self.encoder_norm(x)  # B x S x D

    def forward(self, batch: Batch) -> Seq2SeqOutput:
        memory = self.encode(batch)
        x = self._embed(self.target_embedding, self._inputs(batch.target_in))  # B x T x D
        inputs = x
        weights, used = [], []
        for layer in self.decoder:
            k, v = layer.cross_attention.memory(memory)
            x, w, u = layer(x, k, v, batch.source_mask)
            weights.append(w)  # B x H x T x S
            used.append(u)
        output = self.decoder_norm(x)  # B x T x D
        log_probs = torch.log_softmax(self.output(output), dim=-1)  # B x T x V
        if self.config.copy:
            gate_memory = self.gate.project(memory).float()  # B x S
            index, slots = self._copying(batch)  # B x S, B x K
            log_probs = self._copy(
                log_probs, weights[-1], output, inputs, gate_memory, index, slots
            )
        attention = torch.cat(weights, dim=1)  # B x (L*H) x T x S
        return Seq2SeqOutput(
            log_probs,
            attention,
            self.attention_names,
            batch.source_mask,
            batch.target_mask,
            # only where dropout or DropHead changed the weights (else they are `weights`)
            torch.cat(used, dim=1) if any(u is not w for u, w in zip(used, weights)) else None,
        )

    def init_state(self, batch: Batch) -> State:
        memory = self.encode(batch)
        size, heads = memory.shape[0], self.config.heads
        empty = memory.new_zeros(size, heads, 0, self.config.d_model // heads)  # B x H x 0 x Dh
        state: State = {
            "mask": batch.source_mask,
            "position": torch.zeros(size, dtype=torch.long, device=memory.device),
        }
        for i, layer in enumerate(self.decoder):
            state[f"mk{i}"], state[f"mv{i}"] = layer.cross_attention.memory(memory)
            state[f"k{i}"], state[f"v{i}"] = empty, empty
        if self.config.copy:  # B x S: output ids (and B x K copy_slots: unknown symbols)
            state.update(self.copy_state(batch))
            state["gate_memory"] = self.gate.project(memory).float()  # B x S: w_h*^T h_j
        return state

    def step(self, state: State, previous: Tensor) -> Step:
        position = state["position"]  # B
        previous = self._inputs(previous)  # with copy: a copied unknown symbol as <unk>
        x = self.drop(
            self.target_embedding(previous) * self.scale + self.positions(position)
        ).unsqueeze(1)  # B x 1 x D
        new = dict(state, position=position + 1)
        inputs = x[:, 0]  # B x D
        weights = []
        for i, layer in enumerate(self.decoder):
            x, w, new[f"k{i}"], new[f"v{i}"] = layer.step(x, state, i)
            weights.append(w[:, :, 0])  # B x H x S
        output = self.decoder_norm(x[:, 0])  # B x D
        log_probs = torch.log_softmax(self.output(output), dim=-1)  # B x V
        if self.config.copy:
            log_probs = self._copy(
                log_probs,
                weights[-1],
                output,
                inputs,
                state["gate_memory"],
                state["copy_index"],
                state["copy_slots"],
            )  # B x (V + K)
        return Step(log_probs, torch.cat(weights, dim=1), new)  # B x (L*H) x S
