"""The attentional LSTM encoder-decoder of Wu, Shapiro and Cotterell (2018), §4-5.

Encoder (§4.1): embeddings e(x_j) into a bidirectional LSTM; h_j = forward ⊕ backward.
Decoder (§4.3): an LSTM over the embeddings of the previous outputs, eq. (10); with input
feeding (§5.1, eq. 14) its input is e(y_{i-1}) ⊕ c̄_{i-1}, c̄_{i-1} = f(h_{i-1}, c_{i-1}).
Attention (eq. 6): alpha_j(i) = softmax_j(e_ij), with the score e_ij
    dot:      h_i^T h_j                      (needs decoder_size = 2 * encoder_size)
    general:  h_i^T T h_j, T in R^{d_h x 2d_h}  (eq. 7; "bilinear" is the same scorer)
    mlp:      v^T tanh(W_q h_i + W_k h_j)     (Bahdanau et al. 2015)
Context (eq. 13): c_i = sum_j alpha_j(i) h_j. Or, with `attention.type: local_monotonic`,
`local_m` or `local_m_gaussian`, the local attention of Tjandra et al. (2017) or Luong et
al.'s (2015) local-m over a window of the source (see `transduce.models.attention`).
Output (eqs. 8-9, 12): p(y_i | y_<i, x) = softmax(W f(h_i, c_i)), f = tanh(S (h_i ⊕ c_i)),
S in R^{d_s x 3d_h}; d_s = decoder_size + 2 * encoder_size unless `output_size` is set.

Without input feeding the decoder states do not depend on the attention, so training runs
the decoder LSTM over the whole target in one call and computes every attention step at
once (one batched product; local attention: the centres by a cumulative sum, then every
step's window): no Python loop over time steps.

With `copy: true` the output distribution is See et al.'s (2017) pointer-generator mixture
of eq. (8) and the attention mass on each source symbol (`transduce.models.copy`).

Sockeye 1.18's RNN (the toolkit of Rios et al. 2021, Table 6) is this model with four
options, read from Sockeye's source at tag 1.18.x:
- `encoder_bidirectional_layers: 1`: `sockeye/encoder.py`, `get_recurrent_encoder`, makes
  the first layer a `BiDirectionalRNNEncoder` of rnn-num-hidden // 2 units per direction
  and stacks forward `RecurrentEncoder` layers of rnn-num-hidden above it; here
  `encoder_size` is the per-direction size, so rnn-num-hidden = 2 x `encoder_size`.
- `input_feeding: true` with `output_size: decoder_size`: `sockeye/decoder.py`,
  `RecurrentDecoder._step`, feeds the decoder LSTM [e(y_{i-1}); hidden_{i-1}], where the
  attentional hidden state is `_hidden_mlp`'s tanh(W [h_i; c_i] + b) of rnn-num-hidden
  units (0 at the first step): our c̄ of eq. (9) with d_s = decoder_size, eq. (14) with
  `feed_merge: concat`. The output layer reads that same state.
- `decoder_init: last`: `RecurrentDecoder.get_initial_state` with `rnn-decoder-state-init
  last` (the default) sets each decoder layer's h_0 and c_0 to tanh(W_k h_|x| + b_k), one
  map k per layer and state (`enc2decinit_k`), where h_|x| is the top encoder layer's
  output at the last real source position (`SequenceLast`).
- `init: xavier`: `sockeye/initializer.py`, `get_initializer`, with the defaults of
  `sockeye/arguments.py` that Table 6 names (weight-init xavier, scale 3.0, factor avg,
  uniform): U(-a, a), a = sqrt(3 / ((fan_in + fan_out) / 2)), which is Glorot's uniform
  with gain 1, on every weight, embeddings included; the recurrent (h2h) matrices are
  orthogonal with scale 1.414 (`--rnn-h2h-init orthogonal`, the default); biases 0 (the
  LSTM forget bias too, `--rnn-forget-bias 0`).
Sockeye's mlp attention (`sockeye/rnn_attention.py`, `MlpAttention`) has no bias on the
encoder projection; ours does (`decoder_size` more parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch
from transduce.models.attention import Attention, AttentionConfig, LocalAttention
from transduce.models.base import (
    ModelConfig,
    Seq2SeqModel,
    Seq2SeqOutput,
    State,
    Step,
    masked_softmax,
    register,
    wide,
)
from transduce.models.copy import Copying, mix
from transduce.models.layers import BiLSTM, Dropout, lstm_step
from transduce.special import PAD_ID, SEP_ID


@dataclass
class LSTMConfig(ModelConfig):
    embedding_dim: int = 200
    encoder_layers: int = 2
    encoder_size: int = 400  # per direction
    decoder_layers: int = 1
    decoder_size: int = 400
    # type (global, local_m, local_m_gaussian, local_monotonic), scorer, window: attention.py;
    # a bare scorer name (dot, general, bilinear, mlp) is a global attention with it
    attention: AttentionConfig | Literal["dot", "general", "bilinear", "mlp"] = field(
        default_factory=AttentionConfig
    )
    attention_size: int | None = None  # the mlp scorer's hidden units; default decoder_size
    input_feeding: bool = False
    # how e(y_{i-1}) and c̄_{i-1} enter the decoder with input feeding: concatenated (eq. 14),
    # or merged by a linear map to embedding_dim, so the decoder LSTM keeps its size (§8.2,
    # system ①)
    feed_merge: Literal["concat", "linear"] = "concat"
    output_size: int | None = None  # d_s of eq. (9); default decoder_size + 2 * encoder_size
    # with input feeding: shrink d_s until the model has the parameter count it would have
    # without input feeding (§8.2: system ① against ③; finding #5)
    match_parameters: bool = False
    dropout: float = 0.4
    tie_embeddings: bool = False  # W of eq. (8) = the target embeddings (needs d_s = embedding_dim)
    # a pointer-generator copy distribution over the source symbols (`transduce.models.copy`;
    # the target vocabulary then holds every training source symbol too)
    copy: bool = False
    # how many of the lowest encoder layers are bidirectional (encoder_size per direction);
    # the layers above are forward LSTMs of 2 * encoder_size units, so every layer outputs
    # 2 * encoder_size (Sockeye: 1, rnn-num-hidden = 2 * encoder_size). None: all
    encoder_bidirectional_layers: int | None = None
    # the decoder LSTM's h_0 and c_0: zero, or tanh of a linear map (one per layer and state)
    # of the top encoder state at the last source position (Sockeye's state init `last`)
    decoder_init: Literal["zero", "last"] = "zero"
    # PyTorch's default initialization, or Sockeye's: Xavier uniform weights, orthogonal
    # recurrent matrices (gain 1.414), zero biases
    init: Literal["default", "xavier"] = "default"
    # the tags (the source symbols before <sep>: lemma<TAB>tags data) given to the decoder at
    # every step as one vector, ReLU(W sum_j e(x_j) + b) of embedding_dim units, beside
    # e(y_{i-1}) (the tag transducers of Wu & Cotterell 2019; Aharoni & Goldberg 2017 feed
    # the tags to the decoder at every step): the decoder need not find them by attention
    tag_input: bool = False
    # whether attention (and copy) read the tag positions; false: the lemma only (with
    # tag_input, the tags then reach the decoder only through tag_input and the encoder)
    attend_tags: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.attention, str):
            self.attention = AttentionConfig(scorer=self.attention)

    def check(self) -> list[str]:
        problems = []
        for name in (
            "embedding_dim",
            "encoder_layers",
            "encoder_size",
            "decoder_layers",
            "decoder_size",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be at least 1")
        if not 0 <= self.dropout < 1:
            problems.append(f"dropout: must be in [0, 1), not {self.dropout}")
        if self.attention.scorer == "dot" and self.decoder_size != 2 * self.encoder_size:
            problems.append(
                "attention.scorer: dot needs decoder_size = 2 * encoder_size "
                f"({2 * self.encoder_size}), not {self.decoder_size}; or use general"
            )
        if self.tie_embeddings and self.combined_size != self.embedding_dim:
            problems.append(
                f"tie_embeddings: needs output_size = embedding_dim ({self.embedding_dim}), "
                f"not {self.combined_size}"
            )
        if self.match_parameters and not self.input_feeding:
            problems.append("match_parameters: only applies with input_feeding: true")
        if self.match_parameters and self.tie_embeddings:
            problems.append("match_parameters: cannot shrink d_s while tie_embeddings fixes it")
        both = self.encoder_bidirectional_layers
        if not self.attend_tags and not self.tag_input:
            problems.append("attend_tags: false needs tag_input: true (else no tag is read)")
        if not self.attend_tags and self.attention.local:
            problems.append("attend_tags: false works with global attention only")
        if both is not None and not 0 <= both <= self.encoder_layers:
            problems.append(
                f"encoder_bidirectional_layers: must be in [0, encoder_layers = "
                f"{self.encoder_layers}] (or null: all), not {both}"
            )
        return problems

    @property
    def combined_size(self) -> int:
        return self.output_size or self.decoder_size + 2 * self.encoder_size


def output_size(c: LSTMConfig, target_vocab: int) -> int:
    """d_s of eq. (9) for a model of config `c`.

    With `match_parameters`, the d_s at which the input-fed model has as many parameters as
    the same model without input feeding at d_s0 = `combined_size`. The count is affine in
    d_s: each unit of d_s costs a row of S (decoder + 2 * encoder + 1 with its bias) and a
    column of W (V), plus, for input feeding, a column of the decoder's input weights
    (4 * decoder_size) when concatenated, or a column of the merge map (embedding_dim, and a
    fixed E x E + E) when merged linearly. Rounded to the nearest unit.
    """
    if not c.match_parameters:
        return c.combined_size
    per_unit = c.decoder_size + 2 * c.encoder_size + 1 + target_vocab
    if c.feed_merge == "linear":
        fixed, feed_unit = c.embedding_dim * c.embedding_dim + c.embedding_dim, c.embedding_dim
    else:
        fixed, feed_unit = 0, 4 * c.decoder_size
    return max(1, round((c.combined_size * per_unit - fixed) / (per_unit + feed_unit)))


@register
class LSTMModel(Copying, Seq2SeqModel):
    """Soft attention LSTM (Wu et al. 2018): system ③ without input feeding; with it, system
    U (concatenated, d_s = 3 d_h) or system ① (`feed_merge: linear`, `match_parameters`)."""

    name = "lstm"
    Config = LSTMConfig

    def __init__(self, config: LSTMConfig, source_vocab: int, target_vocab: int) -> None:
        super().__init__(config, source_vocab, target_vocab)
        c = config
        memory = 2 * c.encoder_size
        self.source_embedding = nn.Embedding(source_vocab, c.embedding_dim, padding_idx=PAD_ID)
        self.target_embedding = nn.Embedding(target_vocab, c.embedding_dim, padding_idx=PAD_ID)
        self.encoder = BiLSTM(
            c.embedding_dim,
            c.encoder_size,
            c.encoder_layers,
            c.dropout,
            bidirectional=c.encoder_bidirectional_layers,
        )
        self.d_s = output_size(c, target_vocab)
        feed = self.d_s if c.input_feeding and c.feed_merge == "concat" else 0
        if c.tag_input:  # the tag vector, joined to every decoder input
            self.tag_projection = nn.Linear(c.embedding_dim, c.embedding_dim)
            feed += c.embedding_dim
        if c.input_feeding and c.feed_merge == "linear":  # §8.2: [e ⊕ c̄] -> R^{d_e}
            self.merge = nn.Linear(c.embedding_dim + self.d_s, c.embedding_dim)
        self.decoder = nn.LSTM(
            c.embedding_dim + feed,
            c.decoder_size,
            num_layers=c.decoder_layers,
            batch_first=True,
            dropout=c.dropout if c.decoder_layers > 1 else 0.0,
        )
        self.attention = Attention(
            c.attention.scorer, c.decoder_size, memory, c.attention_size or c.decoder_size
        )
        # Tjandra et al. (2017): the position network and the window
        self.local = LocalAttention(c.attention, c.decoder_size) if c.attention.local else None
        self.combine = nn.Linear(c.decoder_size + memory, self.d_s)  # S of eq. (9)
        self.output = nn.Linear(self.d_s, target_vocab)  # W of eq. (8)
        if c.tie_embeddings:
            self.output.weight = self.target_embedding.weight
        self.drop = Dropout(c.dropout)
        if c.copy:  # See et al. (2017), eq. (8); the copy map: `read_vocabularies`
            self._init_copy(memory, c.decoder_size, c.embedding_dim, source_vocab)
        if c.decoder_init == "last":  # Sockeye's enc2decinit_k: h_0 and c_0 of each layer
            self.bridge = nn.ModuleList(
                nn.Linear(memory, c.decoder_size) for _ in range(2 * c.decoder_layers)
            )
        if c.init == "xavier":
            self.initialize_as_sockeye()

    def initialize_as_sockeye(self) -> None:
        """Sockeye 1.18's initialization (`sockeye/initializer.py`, `get_initializer`, with
        the defaults of Table 6): every weight matrix, embeddings included, Glorot uniform
        (MXNet's Xavier, magnitude 3, factor avg: a = sqrt(6 / (fan_in + fan_out))); the LSTM
        recurrent matrices orthogonal with gain 1.414 (MXNet's `Orthogonal`, Sockeye's
        `--rnn-h2h-init orthogonal`); biases 0. The padding rows of the embeddings stay 0
        (they are never read as symbols)."""
        for name, parameter in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("bias"):
                nn.init.zeros_(parameter)
            elif leaf.startswith("weight_hh"):
                nn.init.orthogonal_(parameter, gain=1.414)
            elif parameter.dim() >= 2:
                nn.init.xavier_uniform_(parameter)
        with torch.no_grad():
            self.source_embedding.weight[PAD_ID].zero_()
            self.target_embedding.weight[PAD_ID].zero_()

    @property
    def attention_names(self) -> list[str]:
        return ["attention"]

    # ------------------------------------------------------------------ encoder

    def encode(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """Encoder states B x S x 2H and the attention keys, computed once."""
        embedded = self.drop(self.source_embedding(batch.source))  # B x S x E
        memory = self.drop(self.encoder(embedded, batch.source_mask.sum(dim=1)))  # B x S x 2H
        return memory, self.attention.keys(memory)

    # ------------------------------------------------------------------ decoder

    def _attend(
        self, states: Tensor, memory: Tensor, keys: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """From decoder states B x T x H: alpha B x T x S, f B x T x d_s, log-probs B x T x V."""
        if self.local is None:
            scores = self.attention.scores(states, keys)  # B x T x S
            alpha = masked_softmax(scores, mask.unsqueeze(1))  # B x T x S, eq. (6)
            context = torch.bmm(alpha, memory)  # B x T x 2H, eq. (13)
        else:
            last = self._last(mask).unsqueeze(1)  # B x 1
            p, log_scale = self.local.positions(states, last)  # B x T, eqs. (5)-(7)
            context, alpha = self.local.attend(
                self.attention, states, keys, memory, p, last, log_scale
            )  # B x T x 2H, B x T x S: eqs. (8)-(10)
        combined = torch.tanh(
            self.combine(torch.cat([states, context], dim=-1))
        )  # B x T x d_s, eq. (9)
        log_probs = torch.log_softmax(
            self.output(self.drop(combined)), dim=-1
        )  # B x T x V, eq. (8)
        return alpha, combined, log_probs

    def forward(self, batch: Batch) -> Seq2SeqOutput:
        memory, keys = self.encode(batch)
        mask = self._attended(batch)
        if self.config.input_feeding:  # eq. (14): each step needs the previous step's f
            state = self._initial(batch, memory, keys)
            steps = []
            for t in range(batch.target_in.shape[1]):
                steps.append(self.step(state, batch.target_in[:, t]))
                state = steps[-1].state
            log_probs = torch.stack([s.log_probs for s in steps], dim=1)  # B x T x V
            attention = torch.stack([s.attention for s in steps], dim=2)  # B x 1 x T x S
        else:  # eq. (10): the whole target in one LSTM call, all attention steps in one bmm
            embedded = self.drop(self.target_embedding(self._inputs(batch.target_in)))  # B x T x E
            inputs = self._with_tags(embedded, batch.source)  # B x T x E'
            if self.config.decoder_init == "zero":
                states, _ = self.decoder(inputs)  # B x T x H
            else:
                h, c = self._decoder_start(memory, batch.source_mask)  # B x L x H
                h, c = h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()  # L x B x H
                states, _ = self.decoder(inputs, (h, c))  # B x T x H
            states = self.drop(states)
            alpha, _, log_probs = self._attend(states, memory, keys, mask)
            if self.config.copy:  # eqs. (8)-(9) of See et al. (2017), every step at once
                gate = torch.bmm(alpha, self.gate.project(memory).unsqueeze(-1)).squeeze(-1)
                gate = gate + self.gate.query(states, embedded)  # B x T
                log_probs = mix(log_probs, gate, alpha, *self._copying(batch))  # B x T x (V + K)
            attention = alpha.unsqueeze(1)  # B x 1 x T x S
        return Seq2SeqOutput(
            log_probs, attention, self.attention_names, batch.source_mask, batch.target_mask
        )

    @staticmethod
    def _tag_positions(source: Tensor) -> Tensor:
        """B x S, True at the tags: the positions before a source's first <sep> (none in a
        source without one)."""
        has_sep = (source == SEP_ID).any(dim=1, keepdim=True)  # B x 1
        before = torch.cumsum((source == SEP_ID).int(), dim=1) == 0  # B x S
        return before & has_sep & (source != PAD_ID)

    def _tags(self, source: Tensor) -> Tensor:
        """`tag_input`'s vector, B x E: ReLU(W sum_j e(x_j) + b) over the tag positions j
        (the sum is 0 for a source without tags)."""
        embedded = self.drop(self.source_embedding(source))  # B x S x E
        bag = (embedded * self._tag_positions(source).unsqueeze(-1)).sum(dim=1)  # B x E
        return torch.relu(self.tag_projection(bag))

    def _with_tags(self, embedded: Tensor, source: Tensor) -> Tensor:
        """The decoder inputs of every step, B x T x E': e(y_{i-1}), with `tag_input`
        joined with the tag vector, [e(y_{i-1}); t] (as `_feed` does for one step)."""
        if not self.config.tag_input:
            return embedded
        tags = self._tags(source).unsqueeze(1)  # B x 1 x E
        return torch.cat([embedded, tags.expand(-1, embedded.shape[1], -1)], dim=-1)

    def _attended(self, batch: Batch) -> Tensor:
        """B x S: the positions attention (and copy) read: every real one (the source
        mask), or with `attend_tags: false` the real ones that are not tags."""
        if self.config.attend_tags:
            return batch.source_mask
        return batch.source_mask & ~self._tag_positions(batch.source)

    @staticmethod
    def _last(mask: Tensor) -> Tensor:
        """The last real source position of each item, B (0-based, as a float)."""
        return mask.sum(dim=1).float() - 1

    def _decoder_start(self, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The decoder's h_0 and c_0, B x L x H each: zero, or (`decoder_init: last`)
        tanh(W_k h_|x| + b_k) of the encoder states B x S x 2H at the last real position,
        map k = 2l for layer l's h and 2l + 1 for its c (Sockeye's `get_initial_state`)."""
        c = self.config
        size = memory.shape[0]
        if c.decoder_init == "zero":
            zeros = memory.new_zeros(size, c.decoder_layers, c.decoder_size)  # B x L x H
            return zeros, zeros.clone()
        rows = torch.arange(size, device=memory.device)  # B
        last = memory[rows, (mask.sum(dim=1) - 1).clamp(min=0)]  # B x 2H
        states = [torch.tanh(bridge(last)) for bridge in self.bridge]  # 2L x (B x H)
        return torch.stack(states[0::2], dim=1), torch.stack(states[1::2], dim=1)  # B x L x H

    def _initial(self, batch: Batch, memory: Tensor, keys: Tensor) -> State:
        """The decoding state. S of eq. (9) is split as S (h ⊕ c) = S_h h + S_c c, and since
        c = sum_j alpha_j h_j, S_c c = sum_j alpha_j (S_c h_j): the encoder states are
        projected through S_c once here, and a step only mixes the projections."""
        c = self.config
        memory = wide(memory)  # steps run in float32 (see `step`)
        size = batch.source.shape[0]
        with torch.autocast(memory.device.type, enabled=False):
            weight = self.combine.weight[:, c.decoder_size :]  # S_c
            projected = torch.matmul(memory, weight.t())  # B x S x d_s
            h, cell = self._decoder_start(memory, batch.source_mask)  # B x L x H
        state = {
            "projected": projected,
            "keys": wide(keys),
            "mask": self._attended(batch),
            "h": h,
            "c": cell,
        }
        if c.tag_input:
            with torch.autocast(memory.device.type, enabled=False):
                state["tags"] = self._tags(batch.source).float()  # B x E
        if c.input_feeding:
            state["feed"] = memory.new_zeros(size, self.d_s)  # B x d_s: c̄_0 = 0
        if c.copy:  # B x S: output ids (and B x K copy_slots: unknown source symbols)
            state.update(self.copy_state(batch))
            with torch.autocast(memory.device.type, enabled=False):
                state["gate_memory"] = self.gate.project(memory)  # B x S: w_h*^T h_j
        if self.local is not None:
            state["last"] = self._last(batch.source_mask)  # B
            state["position"] = memory.new_full((size,), LocalAttention.START)  # B: p_0
        return state

    def init_state(self, batch: Batch) -> State:
        memory, keys = self.encode(batch)  # under autocast: in its lower precision
        return self._initial(batch, wide(memory), wide(keys))

    def step(self, state: State, previous: Tensor) -> Step:
        # A decoder step works on a few hundred rows, too few for bfloat16 kernels to pay
        # for the casts that autocast would add at every step: steps run in float32 (the
        # encoder, one big batched computation, keeps any autocast).
        with torch.autocast(previous.device.type, enabled=False):
            return self._step(state, previous)

    def _feed(self, embedded: Tensor, state: State) -> Tensor:
        """The decoder input: e(y_{i-1}) B x E, with input feeding joined with c̄_{i-1}, with
        `tag_input` with the tag vector."""
        c = self.config
        joined = embedded
        if c.input_feeding:
            joined = torch.cat([embedded, state["feed"]], dim=-1)  # B x (E + d_s), eq. (14)
            joined = self.merge(joined) if c.feed_merge == "linear" else joined
        if c.tag_input:  # [e(y_{i-1}) (; c̄_{i-1}); t]
            joined = torch.cat([joined, state["tags"]], dim=-1)
        return joined

    def _step(self, state: State, previous: Tensor) -> Step:
        previous = self._inputs(previous)  # with copy: a copied unknown symbol as <unk>
        token = self.drop(self.target_embedding(previous))  # B x E
        embedded = self._feed(token, state)  # B x E'
        output, h, c = lstm_step(self.decoder, embedded, state["h"], state["c"], self.drop)  # B x H
        output = self.drop(output)
        new = dict(state)
        if self.local is None:
            scores = self.attention.scores(output.unsqueeze(1), state["keys"])  # B x 1 x S
            alpha = masked_softmax(scores, state["mask"].unsqueeze(1))  # B x 1 x S, eq. (6)
            mixed = torch.bmm(alpha, state["projected"])  # B x 1 x d_s: S_c c, eqs. (9), (13)
        else:  # p_t = min(p_{t-1} + delta_p_t, last): only the window is read
            delta, log_scale = self.local.moves(output)  # B
            last = state["last"].unsqueeze(1)  # B x 1
            new["position"] = torch.minimum(state["position"] + delta, state["last"])  # B
            mixed, alpha = self.local.attend(
                self.attention,
                output.unsqueeze(1),
                state["keys"],
                state["projected"],
                new["position"].unsqueeze(1),
                last,
                None if log_scale is None else log_scale.unsqueeze(1),
            )  # B x 1 x d_s, B x 1 x S: eqs. (8)-(10)
        mixed = mixed.squeeze(1)  # B x d_s
        weight = self.combine.weight[:, : self.config.decoder_size]  # S_h
        combined = torch.tanh(torch.addmm(self.combine.bias, output, weight.t()) + mixed)  # B x d_s
        log_probs = torch.log_softmax(self.output(self.drop(combined)), dim=-1)  # B x V, eq. (8)
        if self.config.copy:  # See et al. (2017), eqs. (8)-(9)
            weights = alpha.squeeze(1)  # B x S
            gate = (weights * state["gate_memory"]).sum(-1) + self.gate.query(output, token)  # B
            index, slots = state["copy_index"], state["copy_slots"]
            log_probs = mix(log_probs, gate, weights, index, slots)  # B x (V + K)
        new.update(h=h, c=c)  # B x L x H
        if self.config.input_feeding:
            new["feed"] = combined  # B x d_s
        return Step(log_probs, alpha, new)  # B x V, B x 1 x S
