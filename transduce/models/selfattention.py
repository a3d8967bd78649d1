"""Multi-head self-attention with the modifications of Dufter et al. (2020).

Dufter, Schmitt and Schütze (2020), "Increasing Learning Efficiency of Self-Attention
Networks through Direct Position Interactions, Learnable Temperature, and Convoluted
Attention". For one head (§2.2), A = XW_q (XW_k)^T / sqrt(d_h) and Z = σ(A) X W_v. The
modifications, each optional:

- Direct position interactions (§2.3), in the first layer only: A + A^p (absolute, a
  learnable t x t matrix per head, SAN+P), A + A^r (relative, A^r_ij = a^r_{i-j+t} with
  a^r in R^{2t} per head, SAN+R), or both (SAN+P+R). t is a fixed maximum length: a longer
  input is an error. Not shared across heads (§2.3).
- Learnable temperature (§2.4): W_q, W_k, W_v are each multiplied by a learnable scalar
  γ (one per head and matrix, initialised to 1: Table 1c counts 3 x 4 heads x 4 layers =
  48 parameters). γ_q γ_k acts as an inverse softmax temperature.
- Convolved attention (§2.5): A' = conv(σ(A)), width 3, not renormalised. `conv1d` has t
  filters per head, each reading 3 consecutive rows (queries) of every column (key) and
  writing one column of the output: 3t² + t parameters per head, Table 1c's
  173,760 = 16 x (3 x 60² + 60). `conv2d` has one 3 x 3 filter per head (10 parameters
  with its bias, Table 1c's 160 = 16 x 10). As in the authors' code (Table 1b, activation
  ReLU), the convolution is followed by a ReLU, so A' stays non-negative.

Padding is never seen: padded keys get no weight, and the convolution reads zeros where
the queries and keys are padding, so a sentence gets the same output in any batch.
Without any modification (and without needing the weights) attention runs through
PyTorch's fused kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce.errors import DataError

CONV_KINDS = ("none", "conv1d", "conv2d")
DIRECT = {"direct_absolute": "absolute", "direct_relative": "relative", "direct_both": "both"}


@dataclass
class AttentionOptions:
    """The options of Dufter et al. (2020), shared by the models that have them.

    position_mode: how positions enter: `add` or `concat` position embeddings to the
        embeddings (SAN+PE[add], SAN+PE[con]); `direct_absolute`, `direct_relative` or
        `direct_both` interactions in the first layer's logits instead (SAN+P, +R, +P+R);
        `none` (the SAN baseline, blind to order).
    learnable_temperature: γ_q, γ_k, γ_v per head (SAN+Temp).
    conv_attention: `none`, `conv1d` or `conv2d` (SAN+Conv, +Conv2d), on the layers
        `conv_layers` (1-based; `all`, the authors' choice: Table 1c counts 16 convolved
        heads, 4 layers x 4 heads).
    """

    position_mode: Literal[
        "add", "concat", "direct_absolute", "direct_relative", "direct_both", "none"
    ] = "add"
    learnable_temperature: bool = False
    conv_attention: Literal["none", "conv1d", "conv2d"] = "none"
    conv_layers: Literal["all"] | list[int] = "all"

    def option_problems(self, layers: int) -> list[str]:
        if isinstance(self.conv_layers, list) and (
            not self.conv_layers or not all(1 <= n <= layers for n in self.conv_layers)
        ):
            return [
                f"conv_layers: `all` or a list of layers from 1 to {layers}, not {self.conv_layers}"
            ]
        return []

    def attention_kwargs(self, layer: int) -> dict[str, Any]:
        """The `SelfAttention` modification arguments of 1-based `layer`."""
        convolved = self.conv_layers == "all" or (
            not isinstance(self.conv_layers, str) and layer in self.conv_layers
        )
        return {
            "positions": DIRECT.get(self.position_mode) if layer == 1 else None,
            "temperature": self.learnable_temperature,
            "conv": self.conv_attention if convolved else "none",
        }

    def needs_length(self) -> bool:
        """Whether the options fix a maximum length t."""
        return self.position_mode in DIRECT or self.conv_attention == "conv1d"


def head_names(prefix: str, layers: int, heads: int) -> list[str]:
    """ "{prefix}.{layer}.head.{head}" for every layer and head, 1-based, layer by layer."""
    return [
        f"{prefix}.{layer}.head.{head}"
        for layer in range(1, layers + 1)
        for head in range(1, heads + 1)
    ]


def split_heads(x: Tensor, heads: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)  # B x H x T x D/H


def merge_heads(x: Tensor) -> Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)  # B x T x D


DROPHEAD_SCALES = ("heads", "inverse_keep")


class DropHead(nn.Module):
    """DropHead (Zhou et al. 2020): in training, zero each head's output B x H x T x Dh with
    probability p per example and rescale the kept heads.

    `scale`: `heads`, by H / kept (Zhou et al.; 0 if none is kept), so the heads' sum keeps
    its size in every example; `inverse_keep`, by 1 / (1 - p) as dropout does, as the
    Sockeye fork of Rios et al. (2021) ran it, so the sum keeps its size on average.
    """

    def __init__(self, p: float, scale: str = "heads") -> None:
        super().__init__()
        if scale not in DROPHEAD_SCALES:
            raise ValueError(f"drophead_scale: one of {', '.join(DROPHEAD_SCALES)}, not {scale!r}")
        self.p, self.scale = p, scale

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        keep = (torch.rand(x.shape[0], x.shape[1], 1, 1, device=x.device) >= self.p).to(x.dtype)
        if self.scale == "inverse_keep":
            return x * keep / (1 - self.p)
        kept = keep.sum(dim=1, keepdim=True)  # B x 1 x 1 x 1
        return x * keep * (x.shape[1] / kept.clamp(min=1))


def check_length(size: int, length: int, what: str) -> None:
    if size > length:
        raise DataError(
            f"a sequence of {size} positions is longer than the {what} allows "
            f"(max length t = {length})"
        )


class PositionInteractions(nn.Module):
    """The direct position interactions of §2.3: an H x S x S bias of the attention logits.

    Args:
        heads: H; each head has its own parameters.
        length: t, the longest sequence.
        absolute: Learn A^p (H x t x t).
        relative: Learn a^r (H x 2t); A^r_ij = a^r_{i-j+t} with 1-based i, j as in the
            paper, so a^r_1 .. a^r_{2t-1} are used (a^r_{2t} never is; Table 1c counts 2t).
    """

    def __init__(self, heads: int, length: int, absolute: bool, relative: bool) -> None:
        super().__init__()
        self.length = length
        # the authors' initialiser (glorot normal): std sqrt(2 / (fan_in + fan_out))
        self.absolute = (
            nn.Parameter(torch.randn(heads, length, length) * (1 / length) ** 0.5)
            if absolute
            else None
        )
        self.relative = (
            nn.Parameter(torch.randn(heads, 2 * length) * (1 / (2 * length)) ** 0.5)
            if relative
            else None
        )

    def forward(self, size: int) -> Tensor:
        """The bias for sequences of `size` positions: H x size x size."""
        check_length(size, self.length, "direct position interactions")
        parts = []
        if self.absolute is not None:
            parts.append(self.absolute[:, :size, :size])  # H x S x S
        if self.relative is not None:
            parts.append(self.relative[:, relative_index(size, self.length)])  # H x S x S
        if not parts:
            raise ValueError("direct position interactions with neither absolute nor relative")
        return parts[0] if len(parts) == 1 else parts[0] + parts[1]


def relative_index(size: int, length: int) -> Tensor:
    """0-based index of a^r for each (i, j): (i - j + t) - 1 with 1-based i, j, which is
    i - j + t - 1 with 0-based i, j too: size x size."""
    i = torch.arange(size).unsqueeze(1)  # S x 1
    j = torch.arange(size).unsqueeze(0)  # 1 x S
    return i - j + length - 1  # S x S


class ConvolvedAttention(nn.Module):
    """§2.5: A' = ReLU(conv(σ(A))), width 3, zero padding at the borders ('same').

    Args:
        kind: "conv1d" (t filters per head over the query axis, every key a channel) or
            "conv2d" (one 3 x 3 filter per head).
        heads: H.
        length: t (conv1d: the number of channels and filters).
    """

    def __init__(self, kind: str, heads: int, length: int) -> None:
        super().__init__()
        self.kind, self.heads, self.length = kind, heads, length
        if kind == "conv1d":
            # Keras' glorot uniform (the authors' framework): fan_in = fan_out = 3t
            bound = (6 / (6 * length)) ** 0.5
            self.weight = nn.Parameter(
                torch.empty(heads, length, length, 3).uniform_(-bound, bound)
            )  # H x t(out) x t(in) x 3
            self.bias = nn.Parameter(torch.zeros(heads, length))  # H x t
        elif kind == "conv2d":
            bound = (6 / 18) ** 0.5
            self.weight = nn.Parameter(torch.empty(heads, 1, 3, 3).uniform_(-bound, bound))
            self.bias = nn.Parameter(torch.zeros(heads))  # H
        else:
            raise ValueError(f"conv_attention must be conv1d or conv2d, not {kind!r}")

    def forward(self, weights: Tensor, mask: Tensor) -> Tensor:
        """B x H x S x S softmax weights (rows: queries), mask B x S -> B x H x S x S."""
        b, h, s, _ = weights.shape
        real = (mask[:, :, None] & mask[:, None, :]).unsqueeze(1)  # B x 1 x S x S
        weights = weights * real  # padded queries and keys read as zero
        if self.kind == "conv1d":
            check_length(s, self.length, "conv1d attention")
            # the keys are the channels and the queries the time axis; only the first S of
            # the t channels and filters ever see anything but zeros
            x = weights.transpose(2, 3).reshape(b, h * s, s)  # B x (H*S keys) x S queries
            kernel = self.weight[:, :s, :s].reshape(h * s, s, 3)  # (H*S out) x S in x 3
            out = F.conv1d(
                x, kernel.to(x.dtype), self.bias[:, :s].reshape(-1).to(x.dtype), padding=1, groups=h
            )
            out = out.view(b, h, s, s).transpose(2, 3)  # B x H x S queries x S keys
        else:
            out = F.conv2d(
                weights,
                self.weight.to(weights.dtype),
                self.bias.to(weights.dtype),
                padding=1,
                groups=h,
            )  # B x H x S x S
        return torch.relu(out) * real  # padded keys give nothing to the context


class SelfAttention(nn.Module):
    """Multi-head self-attention, optionally with the modifications of Dufter et al. (2020).

    Args:
        dim: D, the input and output size.
        heads: H (d_h = D / H).
        dropout: On the attention weights.
        drophead: DropHead probability on the heads' outputs.
        drophead_scale: How DropHead rescales the kept heads (`DropHead`).
        bias: Biases in the q/k/v projections (the SAN of the paper has none).
        project: An output projection W_o after the heads (the transformer's); without it
            the heads' outputs are concatenated (the paper's SAN, §2.2).
        positions: "absolute", "relative", "both" or None: direct position interactions.
        temperature: Learnable temperature γ_q, γ_k, γ_v per head.
        conv: "none", "conv1d" or "conv2d".
        length: t, needed by the position interactions and conv1d.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        dropout: float = 0.0,
        drophead: float = 0.0,
        *,
        drophead_scale: str = "heads",
        bias: bool = True,
        project: bool = True,
        positions: str | None = None,
        temperature: bool = False,
        conv: str = "none",
        length: int | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.out = nn.Linear(dim, dim) if project else None
        self.drophead = DropHead(drophead, drophead_scale)
        if (positions is not None or conv == "conv1d") and length is None:
            raise ValueError("direct positions and conv1d need a maximum length t")
        self.positions = (
            PositionInteractions(
                heads, length, positions in ("absolute", "both"), positions in ("relative", "both")
            )
            if positions is not None and length is not None
            else None
        )
        # γ_q, γ_k, γ_v (rows) of each head (columns), eq. of §2.4
        self.temperature = nn.Parameter(torch.ones(3, heads)) if temperature else None
        self.conv = ConvolvedAttention(conv, heads, length or 0) if conv != "none" else None

    @property
    def modified(self) -> bool:
        return self.positions is not None or self.temperature is not None or self.conv is not None

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = (split_heads(p, self.heads) for p in self.qkv(x).chunk(3, dim=-1))
        if self.temperature is not None:  # B x H x T x Dh, scaled per head
            gamma = self.temperature.to(q.dtype)[:, None, :, None, None]  # 3 x 1 x H x 1 x 1
            q, k, v = q * gamma[0], k * gamma[1], v * gamma[2]
        return q, k, v

    def weights(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The attention weights (after any convolution), B x H x T x T, and the values."""
        q, k, v = self._qkv(x)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # B x H x T x T
        if self.positions is not None:
            scores = scores + self.positions(x.shape[1]).to(scores.dtype)  # + H x T x T
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
        if self.conv is not None:
            full = mask if mask is not None else x.new_ones(x.shape[:2], dtype=torch.bool)
            weights = self.conv(weights, full)
        return weights, v

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        if self.modified:
            if causal:
                raise ValueError("the attention modifications are for the encoder only")
            weights, v = self.weights(x, mask)
            context = torch.matmul(weights, v)  # B x H x T x Dh
        else:
            q, k, v = self._qkv(x)  # B x H x T x Dh
            attn_mask = None if mask is None else mask[:, None, None, :]  # B x 1 x 1 x S
            p = self.dropout if self.training else 0.0
            context = F.scaled_dot_product_attention(q, k, v, attn_mask, p, is_causal=causal)
        merged = merge_heads(self.drophead(context))  # B x T x D
        return merged if self.out is None else self.out(merged)

    def step(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One new position x (B x 1 x D) over the cached keys and values (B x H x t x Dh)."""
        q, k, v = self._qkv(x)  # B x H x 1 x Dh
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # B x H x (t+1) x Dh
        merged = merge_heads(F.scaled_dot_product_attention(q, k, v))
        return (merged if self.out is None else self.out(merged)), k, v
