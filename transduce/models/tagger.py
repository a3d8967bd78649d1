"""The self-attention tagger of Dufter et al. (2020), §2.1, Table 1a and 1b.

For each word: a word embedding (optionally initialised from a word-vector file) with a
position embedding added (SAN+PE[add]) or concatenated (SAN+PE[con]) or no position
embedding at all (direct position interactions, or the order-blind SAN), then a character
representation concatenated: a convolution of width 3 with 64 filters over the word's
character embeddings, ReLU, max-pooled over the characters (Yu et al. 2017; the paper's
Table 1b). The authors' code (`models/seqlabel.py` of pdufter/convatt) stacks three
convolutions of width 5 instead (`char_layers: 3`, `char_width: 5`); between stacked
layers the positions after a word's last character are zeros here, so that a word's
vector does not depend on how long the other words of its batch are (the code pads every
word to 20 characters with a trained padding embedding). Then `layers`
self-attention layers of `heads` heads, each with a residual connection (h <- d + SA(d)
with d = dropout(h), as in the authors' code), the heads concatenated without an output
projection (§2.2); and a residual connection from the input to the output, which (as in
the authors' code) concatenates the input representation with the last layer's before
the softmax layer that gives each token's tag distribution. The objective is the
cross-entropy (§2.1).

The self-attention takes the options of `transduce.models.selfattention` (direct position
interactions in the first layer, learnable temperature, convolved attention). Learned
position embeddings, direct interactions and conv1d exist for positions 1..t
(`max_length`); a longer sentence is cut into pieces of at most t words, in training and
when tagging, as the authors' code does (`transduce.tasks.tagging.windows`).

What the paper does not give, and this model does: no layer normalisation and no
feed-forward block (the authors' code has neither); padding is masked in the attention;
words longer than `max_word_length` characters keep their first characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch
from transduce.errors import DataError
from transduce.models.base import Tagger, TaggerConfig, register
from transduce.models.selfattention import AttentionOptions, SelfAttention, head_names
from transduce.special import PAD_ID, SPECIALS


@dataclass
class SanTaggerConfig(AttentionOptions, TaggerConfig):
    """Defaults: the UD column of Table 1b (PTB: embedding 300, pretrained, not finetuned)."""

    embedding_dim: int = 128
    position_dim: int = 128  # position_mode concat; add uses embedding_dim
    char_embedding_dim: int = 64
    char_filters: int = 64
    char_width: int = 3
    char_layers: int = 1  # stacked convolutions (the authors' code: 3, of width 5)
    max_word_length: int = 20  # characters read per word
    layers: int = 4
    heads: int = 4
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_length: int = 60  # t: the longest sentence
    word_vectors: str | None = None  # a text file: "word v1 ... vD" per line (word2vec/fastText)
    finetune_embeddings: bool = True

    length_option = "max_length"

    def check(self) -> list[str]:
        problems = [
            f"{name}: must be at least 1"
            for name in (
                "embedding_dim", "position_dim", "char_embedding_dim", "char_filters",
                "max_word_length", "layers", "heads", "max_length", "char_layers",
            )
            if getattr(self, name) < 1
        ]  # fmt: skip
        if self.char_width < 1 or self.char_width % 2 == 0:
            problems.append(f"char_width: must be odd, not {self.char_width}")
        if self.heads >= 1 and self.hidden_size % self.heads:
            problems.append(
                f"heads: must divide the hidden size {self.hidden_size} (embedding_dim + "
                f"char_filters, + position_dim with concat), not {self.heads}"
            )
        for name in ("dropout", "attention_dropout"):
            if not 0 <= getattr(self, name) < 1:
                problems.append(f"{name}: must be in [0, 1)")
        if not self.finetune_embeddings and self.word_vectors is None:
            problems.append("finetune_embeddings: false keeps random embeddings: give word_vectors")
        return problems + self.option_problems(self.layers)

    def length_limit(self) -> int | None:
        """t when positions are embedded or the options need it, else None (any length)."""
        return (
            self.max_length
            if self.position_mode in ("add", "concat") or self.needs_length()
            else None
        )

    @property
    def hidden_size(self) -> int:
        concat = self.position_mode == "concat"
        return self.embedding_dim + self.position_dim * concat + self.char_filters


class CharCNN(nn.Module):
    """Characters -> one vector per word: embed, `layers` convolutions (width w, 'same',
    each followed by a ReLU), max-pool. Padded characters are zeros after each layer."""

    def __init__(self, chars: int, dim: int, filters: int, width: int, layers: int = 1) -> None:
        super().__init__()
        self.embedding = nn.Embedding(chars, dim, padding_idx=PAD_ID)
        self.conv = nn.Conv1d(dim, filters, width, padding=width // 2)
        self.more = nn.ModuleList(
            nn.Conv1d(filters, filters, width, padding=width // 2) for _ in range(layers - 1)
        )

    def forward(self, chars: Tensor) -> Tensor:
        b, s, c = chars.shape
        real = chars.view(b * s, 1, c) != PAD_ID  # BS x 1 x C
        x = self.embedding(chars.view(b * s, c)).transpose(1, 2)  # BS x Dc x C
        # ReLU outputs are >= 0, so zeroing padded characters leaves each max unchanged
        h = torch.relu(self.conv(x)) * real  # BS x F x C
        for conv in self.more:
            h = torch.relu(conv(h)) * real
        return h.amax(dim=-1).view(b, s, -1)  # B x S x F


@dataclass
class TaggingOutput:
    """What `Model.loss` reads: the tags are `batch.target_out`, aligned to the words."""

    log_probs: Tensor  # B x S x V (tags)
    target_mask: Tensor  # B x S, True on real words


@register
class SanTagger(Tagger):
    name = "san_tagger"
    Config = SanTaggerConfig

    def __init__(
        self,
        config: SanTaggerConfig,
        source_vocab: int,
        target_vocab: int,
        chars: int | None = None,
    ) -> None:
        super().__init__(config, source_vocab, target_vocab)
        if chars is None:
            raise ValueError("a san_tagger needs the size of its character vocabulary (chars)")
        c = config
        self.chars = chars
        self.embedding = nn.Embedding(source_vocab, c.embedding_dim, padding_idx=PAD_ID)
        self.embedding.weight.requires_grad_(c.finetune_embeddings)
        width = c.position_dim if c.position_mode == "concat" else c.embedding_dim
        self.positions = (
            nn.Embedding(c.max_length, width) if c.position_mode in ("add", "concat") else None
        )
        self.char_cnn = CharCNN(
            chars, c.char_embedding_dim, c.char_filters, c.char_width, c.char_layers
        )
        hidden = c.hidden_size
        self.layers = nn.ModuleList(
            SelfAttention(
                hidden,
                c.heads,
                c.attention_dropout,
                bias=False,
                project=False,
                length=c.max_length,
                **c.attention_kwargs(layer),
            )
            for layer in range(1, c.layers + 1)
        )
        self.drop = nn.Dropout(c.dropout)
        self.output = nn.Linear(2 * hidden, target_vocab)  # [input; last layer] -> tags
        self._initialize()

    def _initialize(self) -> None:
        """Keras' defaults, the authors' framework: embeddings U(-0.05, 0.05), dense and
        convolution kernels glorot uniform, zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.uniform_(module.weight, -0.05, 0.05)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])
            elif isinstance(module, nn.Linear | nn.Conv1d):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    @property
    def self_attention_names(self) -> list[str]:
        """Self-attention heads ("layer.{l}.head.{h}"); a tagger has no cross-attention."""
        return head_names("layer", self.config.layers, self.config.heads)

    @property
    def max_length(self) -> int | None:
        """t, or None; longer sentences are tagged in pieces (`transduce.tasks.tagging.windows`)."""
        return self.config.length_limit()

    def represent(self, batch: Batch) -> Tensor:
        """The input representation x_0 of each token: B x S x D."""
        if batch.chars is None:
            raise ValueError("a san_tagger batch needs the characters of its words")
        x = self.embedding(batch.source)  # B x S x E
        if self.positions is not None:
            size = batch.source.shape[1]
            if size > self.config.max_length:
                raise DataError(
                    f"a sentence of {size} words is longer than the tagger takes "
                    f"(max_length {self.config.max_length})"
                )
            p = self.positions.weight[:size].to(x.dtype)  # S x P
            p = p.unsqueeze(0).expand(x.shape[0], -1, -1)  # B x S x P
            x = x + p if self.config.position_mode == "add" else torch.cat([x, p], dim=-1)
        return torch.cat([x, self.char_cnn(batch.chars)], dim=-1)  # B x S x D

    def forward(self, batch: Batch) -> TaggingOutput:
        mask = batch.source_mask
        x0 = self.represent(batch)  # B x S x D
        h = x0
        for layer in self.layers:
            h = self.drop(h)
            h = h + layer(h, mask)  # B x S x D
        logits = self.output(torch.cat([x0, h], dim=-1))  # B x S x V
        return TaggingOutput(torch.log_softmax(logits.float(), dim=-1), mask)

    def tag(self, batch: Batch) -> Tensor:
        """The most probable tag of each token, never a reserved symbol: B x S (padding:
        PAD_ID)."""
        output = self(batch)
        log_probs = output.log_probs.clone()  # B x S x V
        log_probs[..., : len(SPECIALS)] = float("-inf")
        return log_probs.argmax(dim=-1).masked_fill(~output.target_mask, PAD_ID)

    def self_attention(self, batch: Batch) -> Tensor:
        """Every layer's attention weights (after any convolution): B x (L*H) x S x S."""
        mask = batch.source_mask
        h = self.represent(batch)
        weights = []
        for layer in self.layers:
            w, _ = layer.weights(h, mask)
            weights.append(w)
            h = h + layer(h, mask)
        return torch.cat(weights, dim=1)

    def load_word_vectors(self, path: str | Path, symbols: list[str]) -> int:
        """Initialise the embeddings of the vocabulary `symbols` from a text file of word
        vectors (an optional "count dim" header line, then "word v1 ... vD"; fastText's
        .vec and word2vec's text format). Returns how many vocabulary words were found."""
        index = {s: i for i, s in enumerate(symbols)}
        dim = self.config.embedding_dim
        found = 0
        weight = self.embedding.weight
        try:
            handle = open(path, "rb")  # noqa: SIM115  (read line by line: files of GBs)
        except OSError as error:
            raise DataError(f"cannot read: {error.strerror}", path) from None
        with handle, torch.no_grad():
            for number, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError("not UTF-8", path, number) from None
                fields = line.rstrip().split(" ")
                if number == 1 and len(fields) == 2 and all(f.isdigit() for f in fields):
                    continue  # the header
                if len(fields) != dim + 1:
                    raise DataError(
                        f"expected a word and {dim} numbers (model.embedding_dim), "
                        f"found {len(fields) - 1} numbers",
                        path,
                        number,
                        line[:80],
                    )
                row = index.get(fields[0])
                if row is None or row == PAD_ID:
                    continue
                try:
                    weight[row] = torch.tensor([float(v) for v in fields[1:]])
                except ValueError:
                    raise DataError("not a number in the vector", path, number, line[:80]) from None
                found += 1
        return found
