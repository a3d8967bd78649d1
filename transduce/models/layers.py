"""Building blocks shared by the model families."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Dropout(nn.Module):
    """Inverted dropout whose CPU mask comes from 16 random bits per element.

    On the CPU, `nn.Dropout` draws one Bernoulli sample per element and costs about 4 times
    as much as the rest of this layer; here each element takes 16 bits of a random 64-bit
    word, kept when they reach p * 2^16 (so p is rounded to a multiple of 1/65536). On CUDA
    it is `nn.functional.dropout`.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout must be in [0, 1), not {p}")
        self.p = p
        self.threshold = round(p * 65536) - 32768  # int16 values >= threshold are kept
        self.scale = 1.0 / (1.0 - p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return nn.functional.dropout(x, self.p, True)
        n = x.numel()
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
        keep = words.view(torch.int16)[:n].view(x.shape) >= self.threshold
        return x * keep * self.scale

    def extra_repr(self) -> str:
        return f"p={self.p}"


def reverse_index(lengths: Tensor, width: int) -> Tensor:
    """B x S positions that reverse each sequence within its length (padding stays put)."""
    positions = torch.arange(width, device=lengths.device).unsqueeze(0)  # 1 x S
    lengths = lengths.unsqueeze(1)  # B x 1
    return torch.where(positions < lengths, lengths - 1 - positions, positions)  # B x S


class BiLSTM(nn.Module):
    """A (partly) bidirectional LSTM over right-padded sequences, without packing.

    PyTorch's LSTM takes its fast (oneDNN) path on a padded tensor but not on a packed
    sequence; packing is only needed so that the backward direction starts at each
    sequence's own end. Here the backward direction reads each sequence reversed within
    its length instead, so it starts at the last real token, padding stays at the end, and
    both directions use the fast path. The result equals a packed bidirectional LSTM's.

    With `bidirectional` = n < `layers`, only the first n layers have a backward direction;
    the layers above are forward LSTMs of 2 x `hidden` units, so every layer outputs
    2 x `hidden` (Sockeye's RNN encoder: `sockeye/encoder.py`, `get_recurrent_encoder`, one
    `BiDirectionalRNNEncoder` layer of rnn-num-hidden // 2 per direction, then a stacked
    `RecurrentEncoder` of rnn-num-hidden). The backward modules of the first n layers keep
    their names, so a fully bidirectional encoder's parameters are unchanged.
    """

    def __init__(
        self,
        input_size: int,
        hidden: int,
        layers: int,
        dropout: float,
        bidirectional: int | None = None,
    ) -> None:
        super().__init__()
        both = layers if bidirectional is None else bidirectional
        sizes = [input_size] + [2 * hidden] * (layers - 1)
        units = [hidden if layer < both else 2 * hidden for layer in range(layers)]
        self.forward_layers = nn.ModuleList(
            nn.LSTM(s, u, batch_first=True) for s, u in zip(sizes, units)
        )
        self.backward_layers = nn.ModuleList(
            nn.LSTM(s, hidden, batch_first=True) for s in sizes[:both]
        )
        self.drop = Dropout(dropout)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """x: B x S x E (right-padded); lengths: B. Returns B x S x 2H."""
        index = reverse_index(lengths, x.shape[1]).unsqueeze(-1)  # B x S x 1
        for layer, forward in enumerate(self.forward_layers):
            if layer:
                x = self.drop(x)  # between layers
            ahead, _ = forward(x)  # B x S x H (bidirectional layer) or B x S x 2H
            if layer >= len(self.backward_layers):  # a forward layer: reads left to right
                x = ahead  # B x S x 2H
                continue
            backward = self.backward_layers[layer]
            behind, _ = backward(x.gather(1, index.expand_as(x)))  # B x S x H, reversed
            behind = behind.gather(1, index.expand_as(behind))  # back in order
            x = torch.cat([ahead, behind], dim=-1)  # B x S x 2H
        return x


def lstm_step(
    lstm: nn.LSTM, x: Tensor, h: Tensor, c: Tensor, drop: nn.Module | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """One time step of a unidirectional `nn.LSTM`, computed with its own weights.

    The fused LSTM kernel prepares itself for every input shape, which dominates a decoder
    step whose batch shrinks as sentences finish (measured: 19 ms a call against ~1 ms);
    one step is two small matrix products and the gates.

    Args:
        lstm: The module whose weights to use.
        x: B x E, the input of the step.
        h, c: B x L x H, the states of the L layers.
        drop: Applied between layers (as the module's own dropout is, in training).

    Returns:
        The top layer's output B x H and the new states B x L x H.
    """
    hs, cs = [], []
    for layer in range(lstm.num_layers):
        if layer and drop is not None:
            x = drop(x)
        gates = torch.addmm(
            getattr(lstm, f"bias_ih_l{layer}"), x, getattr(lstm, f"weight_ih_l{layer}").t()
        ) + torch.addmm(
            getattr(lstm, f"bias_hh_l{layer}"),
            h[:, layer],
            getattr(lstm, f"weight_hh_l{layer}").t(),
        )  # B x 4H: input, forget, cell, output gates
        i, f, g, o = gates.chunk(4, dim=1)
        cell = torch.sigmoid(f) * c[:, layer] + torch.sigmoid(i) * torch.tanh(g)  # B x H
        x = torch.sigmoid(o) * torch.tanh(cell)  # B x H
        hs.append(x)
        cs.append(cell)
    return x, torch.stack(hs, dim=1), torch.stack(cs, dim=1)  # B x H, B x L x H, B x L x H
