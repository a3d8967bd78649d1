"""Attention of the LSTM family: the scorers, global attention, and the local attention of
Tjandra, Sakti and Nakamura (2017) and of Luong, Pham and Manning (2015, local-m).

**Scorers** (Tjandra eq. 3; Wu et al. 2018 eqs. 6-7), between a decoder state h_t and an
encoder state h_s:

    dot:                h_t^T h_s                      (needs decoder_size = 2 * encoder_size)
    general (bilinear): h_t^T T h_s                    (Luong's name; Tjandra's "bilinear")
    mlp:                v^T tanh(W_q h_t + W_k h_s)    (Bahdanau et al. 2015)
    none:               no score: a^S = 1 (local attention only; Tjandra §5.2's ablation)

**global** (eqs. 1-2): a_t(s) = softmax over every real source position of the score.

**local_monotonic** (Tjandra §3). Positions are 1-based, as in the paper (0-based in the
code, one less). From the decoder state of step t, one hidden layer of K = `position_size`
units, z_t = tanh(W_p h_t), gives

    delta_p_t = exp(V_p^T z_t)                   eq. (6), `position: exp` (the default)
              = softplus(V_p^T z_t)              `position: softplus` (§3's alternative)
              = C_max * sigmoid(V_p^T z_t)       eq. (5), `position: constrained`
    lambda_t  = exp(V_lambda^T z_t)              eq. (7), with `scale: true`; else 1

and the centre moves forward only: p_t = min(p_{t-1} + delta_p_t, |x|), from p_0 = 0, so a
first step of 1 lands on the first symbol (as local-m's p_1 = 1), and the centre stops at
the last real symbol instead of running past the source (where no state is left to read).

**local_m** (Luong et al. 2015, §3.2's local-m, Tjandra's baseline): p_t = t (the same
recursion with delta_p_t = 1, stopping at |x|); no position network, lambda_t = 1, and no
Gaussian: the weights are the scorer's softmax over the window alone (Luong puts the
Gaussian in local-p only), a^N_t(s) = 1 below. **local_m_gaussian**: the same centres with
the Gaussian of eq. (8) (sigma = D/2 unless set), what `local_m` meant before transduce
0.3.

**The window and the weights** (eqs. 8-10), for every local type. With D = `window` (the
paper's 2 sigma; Luong's D) the window is the real positions s with |s - floor(p_t)| <= D,
where floor(p_t) is kept within [1, |x|], so it never is empty. Then

    a^N_t(s) = lambda_t * exp(-(s - p_t)^2 / (2 sigma^2))    eq. (8), sigma = `sigma` or D/2
    a^S_t(s) = softmax over the window of the score            eqs. (2), (9); 1 with none
    c_t      = sum over the window of a^N_t(s) a^S_t(s) h_s    eq. (10)

c_t is not normalized (lambda_t scales it, as in the paper). The Gaussian uses the real p_t,
so gradients reach delta_p_t through it; the window's integer positions do not. Only the
window is computed: its 2D + 1 encoder states (and keys) are gathered for each step, so a
step costs O(D), not O(|x|) (a source of at most two windows, a word in G2P, is scored
whole with the window masked: the same weights, cheaper than gathering). For the model
contract, the weights are normalized over the window, a^N a^S / sum(a^N a^S) (lambda_t
cancels), and scattered back to full length, zero outside the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from transduce.models.base import wide


@dataclass
class AttentionConfig:
    """`model.attention` of the lstm family; a bare scorer name (`attention: mlp`) is short
    for `{type: global, scorer: mlp}`."""

    type: Literal["global", "local_m", "local_m_gaussian", "local_monotonic"] = "global"
    scorer: Literal["dot", "general", "bilinear", "mlp", "none"] = "general"
    window: int = 2  # D: positions floor(p_t) - D .. floor(p_t) + D (the paper's 2 sigma)
    sigma: float | None = None  # of the Gaussian, eq. (8); default D / 2 (not in local_m)
    position: Literal["exp", "softplus", "constrained"] = "exp"  # delta_p_t: eq. 6, -, eq. 5
    max_step: float = 5.0  # C_max of eq. (5), `position: constrained` only
    scale: bool = True  # lambda_t of eq. (7) (local_monotonic)
    position_size: int | None = None  # K of eqs. (5)-(7); default decoder_size

    def check(self) -> list[str]:
        problems = []
        if self.scorer == "none" and self.type == "global":
            problems.append("scorer: none needs a local type (local_m or local_monotonic)")
        if self.sigma is not None and self.type == "local_m":
            problems.append(
                "sigma: local_m (Luong et al.) has no Gaussian; "
                "type local_m_gaussian multiplies the window by one"
            )
        if self.window < 1:
            problems.append(f"window: must be at least 1, not {self.window}")
        if self.sigma is not None and self.sigma <= 0:
            problems.append(f"sigma: must be positive, not {self.sigma}")
        if self.max_step <= 0:
            problems.append(f"max_step: must be positive, not {self.max_step}")
        if self.position_size is not None and self.position_size < 1:
            problems.append(f"position_size: must be at least 1, not {self.position_size}")
        return problems

    @property
    def local(self) -> bool:
        return self.type != "global"


class Attention(nn.Module):
    """Attention scores between decoder states and encoder states (eq. 3)."""

    def __init__(self, kind: str, decoder_size: int, memory_size: int, hidden: int) -> None:
        super().__init__()
        self.kind = "general" if kind == "bilinear" else kind
        if self.kind == "general":
            self.transform = nn.Linear(memory_size, decoder_size, bias=False)  # T of eq. (7)
        elif self.kind == "mlp":
            self.key = nn.Linear(memory_size, hidden)
            self.query = nn.Linear(decoder_size, hidden, bias=False)
            self.vector = nn.Linear(hidden, 1, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        """The encoder half of the scores, computed once per source."""
        if self.kind == "general":
            return self.transform(memory)  # B x S x H
        if self.kind == "mlp":
            return self.key(memory)  # B x S x A
        return memory  # B x S x H (dot; none reads no keys)

    def scores(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Scores for decoder states B x T x H and keys B x S x *: B x T x S."""
        if self.kind == "mlp":  # every step's keys are all the keys
            return self.window_scores(queries, keys.unsqueeze(1))  # B x T x S
        return torch.bmm(queries, keys.transpose(1, 2))  # B x T x S

    def window_scores(self, queries: Tensor, keys: Tensor) -> Tensor | None:
        """Scores for decoder states B x T x H and each step's own keys B x T x W x *:
        B x T x W; None for `none` (a^S = 1)."""
        if self.kind == "none":
            return None
        if self.kind == "mlp":
            hidden = torch.tanh(self.query(queries).unsqueeze(2) + keys)  # B x T x W x A
            return self.vector(hidden).squeeze(-1)  # B x T x W
        return torch.matmul(keys, queries.unsqueeze(-1)).squeeze(-1)  # B x T x W


def gather_window(values: Tensor, index: Tensor) -> Tensor:
    """Rows `index` (B x T x W, into dimension 1) of `values` B x S x D: B x T x W x D."""
    B, T, W = index.shape
    rows = index.reshape(B, T * W, 1).expand(-1, -1, values.shape[-1])  # B x TW x D
    return values.gather(1, rows).view(B, T, W, values.shape[-1])


class LocalAttention(nn.Module):
    """The position network (eqs. 5-7) and the windowed weights (eqs. 8-10)."""

    START = -1.0  # p_0 = 0 in the paper's 1-based positions
    DENSE_WIDTHS = 2  # sources of at most this many windows are scored whole (masked)

    def __init__(self, config: AttentionConfig, decoder_size: int) -> None:
        super().__init__()
        self.config = config
        self.sigma = config.sigma if config.sigma is not None else config.window / 2
        self.gaussian = config.type != "local_m"  # a^N of eq. (8); Luong's local-m has none
        offsets = torch.arange(-config.window, config.window + 1, dtype=torch.float32)
        self.register_buffer("offsets", offsets, persistent=False)  # W = 2D + 1
        if config.type == "local_monotonic":
            size = config.position_size or decoder_size
            self.hidden = nn.Linear(decoder_size, size)  # W_p of eqs. (5)-(7)
            self.project = nn.Linear(size, 2 if config.scale else 1)  # V_p (and V_lambda)

    def moves(self, queries: Tensor) -> tuple[Tensor, Tensor | None]:
        """delta_p_t and log lambda_t (None: lambda_t = 1) for decoder states ... x H:
        ... each, in float32 (or float64) whatever the autocast (eqs. 5-7)."""
        if self.config.type in ("local_m", "local_m_gaussian"):
            return wide(queries.new_ones(queries.shape[:-1])), None
        z = wide(self.project(torch.tanh(self.hidden(queries))))  # ... x 1 or 2
        u = z[..., 0]
        if self.config.position == "exp":
            delta = torch.exp(u)  # eq. (6)
        elif self.config.position == "softplus":
            delta = nn.functional.softplus(u)
        else:
            delta = self.config.max_step * torch.sigmoid(u)  # eq. (5)
        return delta, (z[..., 1] if self.config.scale else None)  # log of eq. (7)

    def positions(self, queries: Tensor, last: Tensor) -> tuple[Tensor, Tensor | None]:
        """p_1 .. p_T B x T for decoder states B x T x H, and log lambda_t; `last` B x 1:
        the last real position. p_t = min(p_0 + sum_{u<=t} delta_p_u, last) equals the
        step-by-step recursion because every delta_p_u >= 0."""
        delta, log_scale = self.moves(queries)  # B x T
        return torch.minimum(self.START + delta.cumsum(dim=1), last), log_scale

    def attend(
        self,
        scorer: Attention,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        p: Tensor,
        last: Tensor,
        log_scale: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """Context and attention for decoder states B x T x H at centres p B x T.

        Reads only the window (gathered) when the source is longer than DENSE_WIDTHS
        windows; a shorter source (a word, in G2P) is cheaper to score whole, with the
        positions outside the window masked: the same weights, no gather and scatter.

        Args:
            scorer: The score function (eq. 3).
            keys: B x S x * (from `scorer.keys`); values: B x S x D, the states to mix.
            last: B x 1, the last real position of each source.
            log_scale: B x T, log lambda_t, or None.

        Returns:
            c_t of eq. (10), B x T x D, and the normalized weights scattered to B x T x S.
        """
        S, W = values.shape[1], self.offsets.numel()
        centre = torch.minimum(p.detach().floor().clamp(min=0), last)  # B x T
        if S <= self.DENSE_WIDTHS * W:
            positions = torch.arange(S, device=p.device, dtype=p.dtype).expand(*p.shape, S)
            inside = (positions - centre.unsqueeze(-1)).abs() <= self.config.window
            valid = inside & (positions <= last.unsqueeze(-1))  # B x T x S
            scores = None if scorer.kind == "none" else scorer.scores(queries, keys)
            weights, attention = self._weights(positions, p, scores, valid, log_scale)
            return torch.matmul(weights.to(values.dtype), values), attention  # eq. (10)
        positions = centre.unsqueeze(-1) + self.offsets  # B x T x W
        valid = (positions >= 0) & (positions <= last.unsqueeze(-1))  # B x T x W
        index = torch.minimum(positions.clamp(min=0), last.unsqueeze(-1)).long()  # B x T x W
        scores = scorer.window_scores(queries, gather_window(keys, index))  # B x T x W
        weights, attention = self._weights(positions, p, scores, valid, log_scale)
        windowed = gather_window(values, index)  # B x T x W x D
        weights = weights.to(values.dtype).unsqueeze(-2)  # B x T x 1 x W
        context = torch.matmul(weights, windowed).squeeze(-2)  # B x T x D, eq. (10)
        full = attention.new_zeros(*attention.shape[:-1], S)  # B x T x S
        return context, full.scatter_add(-1, index, attention)

    def _weights(
        self,
        positions: Tensor,
        p: Tensor,
        scores: Tensor | None,
        valid: Tensor,
        log_scale: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """a^N a^S (eqs. 8-9) and its normalization over the window, at `positions`
        B x T x N (N: the window or the whole source) where `valid`; 0 elsewhere."""
        log_weights = -((positions - p.unsqueeze(-1)) ** 2) / (2 * self.sigma**2)  # eq. (8)
        if not self.gaussian:  # local_m: a^N = 1
            log_weights = torch.zeros_like(log_weights)
        if scores is not None:  # else a^S = 1
            scores = wide(scores).masked_fill(~valid, float("-inf"))
            log_weights = log_weights + torch.log_softmax(scores, dim=-1)  # eqs. (2), (9)
        log_weights = log_weights.masked_fill(~valid, float("-inf"))  # B x T x N
        attention = torch.softmax(log_weights, dim=-1)  # normalized over the window
        if log_scale is not None:
            log_weights = log_weights + log_scale.unsqueeze(-1)  # log lambda_t, eq. (8)
        return torch.exp(log_weights), attention
