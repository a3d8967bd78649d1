"""Hard attention (Wu, Shapiro and Cotterell 2018) and exact hard monotonic attention
(Wu and Cotterell 2019), on the encoder and decoder of the `lstm` model.

**0th order, exact** (system ④, `estimator: exact`). The alignment a_i of output symbol y_i
is latent, with the prior alpha_j(i) = p(a_i = j | y_<i, x) of eqs. (6)-(7) and the emission
p(y_i | a_i = j, y_<i, x) = softmax(W tanh(S (h_i ⊕ h_j))) of eqs. (8)-(9). Without input
feeding the decoder states h_i (eq. 10) do not depend on the alignments, so the likelihood
factorizes over steps, eq. (3):

    log p(y | x) = sum_i log sum_j alpha_j(i) p(y_i | a_i = j, y_<i, x).

`forward` returns for every step the mixture of softmaxes

    log p(y_i = v | y_<i, x) = logsumexp_j [log alpha_j(i) + log p(v | a_i = j, y_<i, x)]

as B x T x V: the contract's NLL of these is exactly -log of eq. (3), and greedy and beam
decoding read the same mixture from `step`. Training computes all steps and source
positions at once (the emission is one B x T x S x d_s tensor; no loop over steps or
alignments); when that tensor would pass `defaults.HARD_EMISSION_ELEMENTS` it is computed in
blocks of target steps that are recomputed in the backward pass, so memory stays bounded.

**Monotonic, exact** (`monotonic: true`; Wu and Cotterell 2019). First-order alignments with
a_i >= a_{i-1}: p(a_i = j | a_{i-1} = k, y_<i, x) = softmax over real j >= k of e_ij (eq. 7's
scores), and a_0 = 1 (so a_1 has the 0th-order prior). The forward algorithm in log space,

    prior_i(j) = logsumexp_{k <= j} [post_{i-1}(k) + log p(a_i = j | a_{i-1} = k, y_<i, x)]
    post_i(j)  = prior_i(j) + log p(y_i | a_i = j, y_<i, x) - log p(y_i | y_<i, x),

gives prior_i = log p(a_i | y_<i, x), the predictive alignment distribution, and
post_i = log p(a_i | y_<=i, x). Each step's distribution is the mixture above with prior_i
in place of alpha(i), and by the chain rule the steps' log-probabilities sum to log p(y | x)
over every monotone alignment: O(|x|^2 |y|), vectorized over the batch and positions, one
small loop over target steps. The output may end at any source position.

**REINFORCE** (`estimator: reinforce`; systems ⑤ without and ② with input feeding, §5.2 and
§8.2, after Xu et al. 2015). Training maximizes the lower bound of eq. (17),
sum_a p(a | x) log p(y | x, a), with k = `samples` alignment paths per example: a_i is
sampled from alpha(i) at each step (with input feeding, eq. 14, c̄_i = f(h_i, h_{a_i}) of the
sampled position is fed to the next step, so each path is its own decoder run). The
gradient estimate per path is

    sum_i grad log p(y_i | a_i, ...) + sum_i (R_i - b_i) grad log alpha_{a_i}(i),

with R_i the log-likelihood terms a_i can change: log p(y_i | a_i, ...) without input
feeding, the sum over steps t >= i with it (each reward belongs to its own path, batch item
and step, and is detached). The baseline b_i is a moving average with decay 0.9 of the
batch's mean per-token reward, times the number of terms in R_i. At evaluation, a model
without input feeding is the exact mixture above; with input feeding the fed c̄ is its
expectation under alpha(i), sum_j alpha_j(i) f(h_i, h_j), and the reported dev NLL is that
deterministic approximation's.

**Tags** (`tag_input`, `attend_tags`, as the `lstm` model's): the tag vector is joined to
every decoder input of eq. (10), which leaves the decoder states free of the alignments, so
all of the above stays exact. With `attend_tags: false` the alignments range over <sep> and
the lemma only, and a_0 is the <sep> (the tag transducer of Wu & Cotterell 2019: the tags
enter the decoder, the monotone alignment walks the lemma).

`attention` in the model contract is the prior (alpha, or prior_i); `alignment_posterior`
gives p(a_i = j | y, x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from transduce import defaults
from transduce.data.batching import Batch
from transduce.models.base import Seq2SeqOutput, State, Step, register, wide
from transduce.models.copy import extend, mix_emission
from transduce.models.layers import lstm_step
from transduce.models.lstm import LSTMConfig, LSTMModel

# A log-probability that is exactly 0 after exp, but finite, so that a logsumexp over
# impossible transitions alone has finite gradients (-inf would give NaN).
IMPOSSIBLE = -1e9


@dataclass
class HardAttentionConfig(LSTMConfig):
    estimator: Literal["exact", "reinforce"] = "exact"
    monotonic: bool = False  # first-order monotone alignments (Wu and Cotterell 2019)
    samples: int = 2  # REINFORCE: alignment paths per example (§8.2: 2 small, 4 large)
    baseline_decay: float = 0.9  # REINFORCE: moving average of the reward baseline

    def check(self) -> list[str]:
        problems = super().check()
        if self.input_feeding and self.estimator == "exact":
            problems.append(
                "input_feeding: makes the alignments depend on each other, so the likelihood "
                "cannot be marginalized exactly (§5.1); use estimator: reinforce"
            )
        if self.monotonic and (self.estimator != "exact" or self.input_feeding):
            problems.append("monotonic: needs estimator: exact and no input feeding")
        if self.attention.local:
            problems.append(
                f"attention.type: hard attention is over the whole source (global), "
                f"not {self.attention.type}"
            )
        if self.copy and self.estimator != "exact":
            problems.append("copy: needs estimator: exact (the emission of each alignment)")
        if self.decoder_init != "zero" and not self.input_feeding:
            problems.append(
                "decoder_init: the decoder without input feeding runs from zero states here; "
                "use decoder_init: zero, or input_feeding: true (estimator: reinforce)"
            )
        if self.samples < 1:
            problems.append(f"samples: must be at least 1, not {self.samples}")
        if not 0 <= self.baseline_decay < 1:
            problems.append(f"baseline_decay: must be in [0, 1), not {self.baseline_decay}")
        return problems


@dataclass
class HardOutput(Seq2SeqOutput):
    """With REINFORCE in training, `log_probs` and `attention` are means over the k sampled
    paths, and the paths' own terms come along for the estimator."""

    log_prior: Tensor | None = None  # k x B x T: log alpha_{a_i}(i) of the sampled a_i
    reward: Tensor | None = None  # k x B x T: log p(y_i | a_i, ...), detached


@register
class HardAttentionModel(LSTMModel):
    """Hard attention: 0th order exact (④), monotonic exact, or REINFORCE (⑤, ②)."""

    name = "hard"
    Config = HardAttentionConfig

    def __init__(self, config: HardAttentionConfig, source_vocab: int, target_vocab: int) -> None:
        super().__init__(config, source_vocab, target_vocab)
        # REINFORCE: the moving average of the per-token reward (NaN until the first batch)
        self.register_buffer("baseline", torch.tensor(math.nan))

    @property
    def attention_names(self) -> list[str]:
        return ["alignment"]

    # ----------------------------------------------------------------- pieces

    def _split_combine(self) -> tuple[Tensor, Tensor]:
        """S_h and S_c of eq. (9): S (h_i ⊕ h_j) = S_h h_i + S_c h_j."""
        split = self.config.decoder_size
        return self.combine.weight[:, :split], self.combine.weight[:, split:]

    def _emission(
        self,
        queries: Tensor,
        projected: Tensor,
        gates: Tensor | None = None,
        index: Tensor | None = None,
        slots: Tensor | None = None,
    ) -> Tensor:
        """log p(v | a_i = j, y_<i, x) for every step and position, eqs. (8)-(9).

        Args:
            queries: S_h h_i + bias, B x T x d_s.
            projected: S_c h_j, B x S x d_s.
            gates: with `copy`, the logits of p_gen_ij, B x T x S (`transduce.models.copy`).
            index: with `copy`, the output id of each source symbol, B x S.
            slots: with `copy`, B x K zeros for the K extended ids of unknown source
                symbols (`transduce.models.copy`); None: K = 0.

        Returns:
            B x T x S x (V + K) log-probabilities (float32).
        """
        combined = (queries.unsqueeze(2) + projected.unsqueeze(1)).tanh_()  # B x T x S x d_s
        if self.training and self.drop.p > 0:
            # One dropout mask per step, shared by its S mixture components, as the soft
            # model has one per step: S times fewer random draws on the largest tensor.
            B, T, _, D = combined.shape
            combined = combined * self.drop(combined.new_ones(B, T, 1, D))  # B x T x S x d_s
        logits = self.output(combined)  # B x T x S x V
        emission = torch.log_softmax(wide(logits), dim=-1)
        if gates is None or index is None:
            return emission
        return mix_emission(emission, gates, index, slots)  # the alignment's symbol may be copied

    @staticmethod
    def _log_alpha(scores: Tensor, mask: Tensor) -> Tensor:
        """log alpha_j(i) of eq. (6) from scores (B x T x S or B x S) and the mask B x S of
        the positions read (`_attended`): a log-softmax over those."""
        if scores.dim() == 3:
            mask = mask[:, None, :]  # B x 1 x S
        return torch.log_softmax(wide(scores).masked_fill(~mask, -math.inf), dim=-1)

    @staticmethod
    def _gold(emission: Tensor, target: Tensor) -> Tensor:
        """log p(y_i | a_i = j, ...) of the reference symbols: B x T x S from the emission
        B x T x S x V and the targets B x T."""
        index = target[:, :, None, None].expand(*emission.shape[:3], 1)  # B x T x S x 1
        return emission.gather(-1, index).squeeze(-1)  # B x T x S

    def _transitions(self, scores: Tensor, mask: Tensor) -> Tensor:
        """log p(a_i = j | a_{i-1} = k) for monotone alignments: B x T x S(k) x S(j).

        A real row k allows the real positions j >= k; a padding row allows only j = k, so
        that every row is a distribution (padding rows carry no probability).
        """
        S = scores.shape[-1]
        forward = torch.ones(S, S, dtype=torch.bool, device=scores.device).triu()  # k x j
        allowed = forward & mask[:, None, None, :]  # B x 1 x S x S
        allowed = allowed | torch.eye(S, dtype=torch.bool, device=scores.device)
        masked = wide(scores).unsqueeze(2).masked_fill(~allowed, IMPOSSIBLE)  # B x T x S x S
        return torch.log_softmax(masked, dim=-1)

    @staticmethod
    def _start(mask: Tensor) -> Tensor:
        """log p(a_0 = j), B x S: all mass on the first position that alignments read (the
        mask B x S: the first real one; with `attend_tags: false` the <sep> after the tags,
        so that the alignment runs over the lemma alone)."""
        start = torch.full(mask.shape, IMPOSSIBLE, device=mask.device)  # B x S
        first = mask.int().argmax(dim=1)  # B: the first True
        start[torch.arange(mask.shape[0], device=mask.device), first] = 0.0
        return start

    @staticmethod
    def _priors(transitions: Tensor, gold: Tensor, post: Tensor) -> tuple[Tensor, Tensor]:
        """The forward algorithm over a block of steps.

        Args:
            transitions: B x t x S x S log transition probabilities.
            gold: B x t x S, log p(y_i | a_i = j, ...) of the reference symbols.
            post: B x S, log p(a_{i-1} | y_<i, x) before the block.

        Returns:
            The priors log p(a_i | y_<i, x), B x t x S, and the posterior after the block.
        """
        priors = []
        for i in range(transitions.shape[1]):
            prior = torch.logsumexp(post.unsqueeze(-1) + transitions[:, i], dim=1)  # B x S
            priors.append(prior)
            joint = prior + gold[:, i]  # B x S
            post = joint - torch.logsumexp(joint, dim=-1, keepdim=True)  # B x S
        return torch.stack(priors, dim=1), post  # B x t x S, B x S

    def _block(
        self,
        queries: Tensor,
        projected: Tensor,
        scores: Tensor,
        mask: Tensor,
        target: Tensor,
        post: Tensor,
        gates: Tensor | None = None,
        index: Tensor | None = None,
        slots: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Mixture log-probs B x t x (V + K), priors B x t x S and the carried posterior
        B x S for a block of t target steps (`post` only matters for the monotonic model;
        `gates`, `index` and `slots` only with copy)."""
        emission = self._emission(queries, projected, gates, index, slots)  # B x t x S x (V + K)
        if self.config.monotonic:
            gold = self._gold(emission, target)  # B x t x S
            prior, post = self._priors(self._transitions(scores, mask), gold, post)
        else:
            prior = self._log_alpha(scores, mask)  # B x t x S, eq. (6)
        # B x t x (V + K), eq. (3)
        log_probs = torch.logsumexp(prior.unsqueeze(-1) + emission, dim=2)
        return log_probs, prior, post

    def _decoder_states(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """Decoder states h_i (eq. 10) and the score and emission inputs of every step:
        scores e_ij B x T x S, queries S_h h_i + b B x T x d_s, projections S_c h_j B x S x d_s,
        and with copy the logits of p_gen_ij, B x T x S (else None)."""
        memory, keys = self.encode(batch)  # B x S x 2H
        embedded = self.drop(self.target_embedding(self._inputs(batch.target_in)))  # B x T x E
        states, _ = self.decoder(self._with_tags(embedded, batch.source))  # B x T x H
        states = self.drop(states)
        scores = self.attention.scores(states, keys)  # B x T x S, eq. (7)
        weight_h, weight_c = self._split_combine()
        queries = torch.nn.functional.linear(states, weight_h, self.combine.bias)  # B x T x d_s
        projected = torch.matmul(memory, weight_c.t())  # B x S x d_s
        gates = None
        if self.config.copy:
            gates = self.gate.project(memory).unsqueeze(1) + self.gate.query(
                states, embedded
            ).unsqueeze(-1)  # B x T x S
        return states, scores, queries, projected, gates

    # ---------------------------------------------------------------- forward

    def forward(self, batch: Batch) -> Seq2SeqOutput:
        if self.training and self.config.estimator == "reinforce":
            return self._sampled(batch)
        if self.config.input_feeding:  # a loop of `step` with the expected feed
            return super().forward(batch)
        _, scores, queries, projected, gates = self._decoder_states(batch)
        index, slots = self._copying(batch) if gates is not None else (None, None)  # B x S
        mask = self._attended(batch)  # B x S: the positions alignments read
        B, T, S = scores.shape
        post = self._start(mask)  # B x S
        rows = max(1, defaults.HARD_EMISSION_ELEMENTS // max(B * S * projected.shape[-1], 1))
        blocks = []
        for start in range(0, T, rows):
            block = (
                queries[:, start : start + rows],
                projected,
                scores[:, start : start + rows],
                mask,
                batch.target_out[:, start : start + rows],
                post,
                None if gates is None else gates[:, start : start + rows],
                index,
                slots,
            )
            if rows < T and torch.is_grad_enabled():  # keep memory bounded: recompute
                blocks.append(checkpoint(self._block, *block, use_reentrant=False))
            else:
                blocks.append(self._block(*block))
            post = blocks[-1][2]
        log_probs = torch.cat([b[0] for b in blocks], dim=1)  # B x T x (V + K)
        prior = torch.cat([b[1] for b in blocks], dim=1)  # B x T x S
        attention = prior.exp().unsqueeze(1)  # B x 1 x T x S
        return HardOutput(
            log_probs, attention, self.attention_names, batch.source_mask, batch.target_mask
        )

    def alignment_posterior(self, batch: Batch) -> Tensor | None:
        """p(a_i = j | y, x) for the reference targets: B x 1 x T x S.

        0th order: alpha_j(i) p(y_i | a_i = j) / p(y_i | y_<i, x), step by step. Monotonic:
        the smoothed marginals, read as the gradient of log p(y | x) with respect to the
        log emission scores (the forward-backward identity).
        """
        if self.config.input_feeding:
            raise ValueError(
                "alignment posterior: with input feeding the alignments depend on each other "
                "and their posterior is intractable (§5.1)"
            )
        with torch.enable_grad():
            _, scores, queries, projected, gates = self._decoder_states(batch)
            scores, queries, projected = scores.detach(), queries.detach(), projected.detach()
            index, slots = None, None
            if gates is not None:
                gates = gates.detach()
                index, slots = self._copying(batch)
            # B x T x S x (V + K)
            emission = self._emission(queries, projected, gates, index, slots)
            gold = self._gold(emission, batch.target_out).detach()  # B x T x S
            mask = self._attended(batch)  # B x S
            if not self.config.monotonic:
                prior = self._log_alpha(scores, mask)  # B x T x S
                return torch.softmax(prior + gold, dim=-1).unsqueeze(1)  # B x 1 x T x S
            gold.requires_grad_(True)
            transitions = self._transitions(scores, mask)  # B x T x S x S
            prior, _ = self._priors(transitions, gold, self._start(mask))
            steps = torch.logsumexp(prior + gold, dim=-1)  # B x T: log p(y_i | y_<i, x)
            likelihood = (steps * batch.target_mask).sum()
            (posterior,) = torch.autograd.grad(likelihood, gold)  # B x T x S
        return posterior.unsqueeze(1)  # B x 1 x T x S

    # ------------------------------------------------------------- REINFORCE

    def _sampled(self, batch: Batch) -> HardOutput:
        """Training with k sampled alignment paths per example (§5.2)."""
        k = self.config.samples
        if self.config.input_feeding:
            log_probs, log_prior, alpha = self._sampled_fed(batch, k)
        else:
            _, scores, queries, projected, _ = self._decoder_states(batch)
            log_alpha = self._log_alpha(scores, self._attended(batch))  # B x T x S, eq. (6)
            alpha = log_alpha.exp()  # B x T x S
            B, T, S = alpha.shape
            picks = torch.multinomial(alpha.reshape(B * T, S), k, replacement=True)  # BT x k
            picks = picks.t().reshape(k, B, T)  # k x B x T
            log_prior = (
                log_alpha.unsqueeze(0)
                .expand(k, -1, -1, -1)
                .gather(-1, picks.unsqueeze(-1))
                .squeeze(-1)
            )  # k x B x T
            rows = torch.arange(B, device=picks.device)[None, :, None]  # 1 x B x 1
            chosen = projected[rows, picks]  # k x B x T x d_s: S_c h_{a_i}
            combined = torch.tanh(queries.unsqueeze(0) + chosen)  # k x B x T x d_s, eq. (9)
            logits = self.output(self.drop(combined))  # k x B x T x V
            log_probs = torch.log_softmax(wide(logits), dim=-1)  # eq. (8)
        index = batch.target_out.unsqueeze(0).unsqueeze(-1).expand(k, -1, -1, 1)  # k x B x T x 1
        reward = log_probs.gather(-1, index).squeeze(-1).detach()  # k x B x T
        return HardOutput(
            log_probs.mean(dim=0),  # B x T x V
            alpha.unsqueeze(1),  # B x 1 x T x S
            self.attention_names,
            batch.source_mask,
            batch.target_mask,
            log_prior=log_prior,
            reward=reward,
        )

    def _sampled_fed(
        self, batch: Batch, k: int, forced: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Input feeding (eq. 14): k decoder runs per example, each feeding the c̄ of its own
        sampled positions (or of the k x B x T positions `forced`, for tests that enumerate
        paths). Returns log-probs k x B x T x V, log alpha of the positions k x B x T, and
        alpha averaged over the paths B x T x S."""
        B, T = batch.target_in.shape
        memory, keys = self.encode(batch)
        paths = torch.arange(B, device=memory.device).repeat(k)  # kB: path s of item b at sB+b
        state = self._initial(
            Batch(batch.source[paths], batch.source_mask[paths]), memory[paths], keys[paths]
        )
        weight_h, _ = self._split_combine()
        rows = torch.arange(k * B, device=memory.device)
        log_probs, log_prior, alphas = [], [], []
        with torch.autocast(memory.device.type, enabled=False):  # steps in float32, as lstm's
            for t in range(T):
                embedded = self.drop(self.target_embedding(batch.target_in[paths, t]))  # kB x E
                embedded = self._feed(embedded, state)  # kB x E', eq. (14)
                output, h, c = lstm_step(self.decoder, embedded, state["h"], state["c"], self.drop)
                output = self.drop(output)  # kB x H
                scores = self.attention.scores(output.unsqueeze(1), state["keys"]).squeeze(1)
                log_alpha = self._log_alpha(scores, state["mask"])  # kB x S, eq. (6)
                alpha = log_alpha.exp()  # kB x S
                if forced is None:
                    picks = torch.multinomial(alpha, 1).squeeze(1)  # kB
                else:
                    picks = forced[:, :, t].reshape(-1)  # kB
                log_prior.append(log_alpha[rows, picks])  # kB
                query = torch.addmm(self.combine.bias, output, weight_h.t())  # kB x d_s
                combined = torch.tanh(query + state["projected"][rows, picks])  # kB x d_s, eq. (9)
                log_probs.append(torch.log_softmax(self.output(self.drop(combined)), dim=-1))
                alphas.append(alpha.view(k, B, -1).mean(0))  # B x S
                state = dict(state, h=h, c=c, feed=combined)  # c̄_i of the sampled a_i
        log_probs_t = torch.stack(log_probs, dim=1).view(k, B, T, -1)  # k x B x T x V
        log_prior_t = torch.stack(log_prior, dim=1).view(k, B, T)  # k x B x T
        return log_probs_t, log_prior_t, torch.stack(alphas, dim=1)  # ..., B x T x S

    def loss(
        self, batch: Batch, output: Seq2SeqOutput, label_smoothing: float = 0.0
    ) -> dict[str, Tensor]:
        """The contract's loss on the mixture (exact: -log eq. 3 per token); with REINFORCE
        samples, the NLL of the paths plus the score-function term, whose value is kept out
        of `loss` (it only adds its gradient) and reported as `reinforce`."""
        losses = super().loss(batch, output, label_smoothing)
        if not isinstance(output, HardOutput) or output.log_prior is None:
            return losses
        mask = output.target_mask.to(output.reward.dtype)  # B x T
        k = output.reward.shape[0]
        tokens = mask.sum().clamp(min=1)
        reward = output.reward * mask  # k x B x T
        if self.config.input_feeding:  # a_i changes every later step through the feed
            returns = reward.flip(-1).cumsum(-1).flip(-1)  # k x B x T: sum over t >= i
            terms = mask.flip(-1).cumsum(-1).flip(-1)  # B x T
        else:  # a_i changes only step i
            returns, terms = reward, mask
        mean_reward = reward.sum() / (k * tokens)
        with torch.no_grad():
            if torch.isnan(self.baseline):
                self.baseline.copy_(mean_reward)
            baseline = self.baseline.clone()
            decay = self.config.baseline_decay
            self.baseline.mul_(decay).add_((1 - decay) * mean_reward)
        advantage = (returns - baseline * terms) * mask  # k x B x T
        surrogate = -(advantage * output.log_prior).sum() / (k * tokens)
        losses["loss"] = losses["loss"] + surrogate - surrogate.detach()
        losses["reinforce"] = surrogate.detach()
        return losses

    # ----------------------------------------------------------------- decoding

    def _initial(self, batch: Batch, memory: Tensor, keys: Tensor) -> State:
        state = super()._initial(batch, memory, keys)
        if self.config.monotonic:
            size, width = batch.source.shape
            state["prior"] = self._start(state["mask"])  # B x S: a_0, the first position read
            emission = memory.new_zeros(size, width, self.target_vocab)  # B x S x V
            if self.config.copy:  # and the K unknown source symbols (`transduce.models.copy`)
                emission = extend(emission, state["copy_slots"])
            state["emission"] = emission  # B x S x (V + K)
        return state

    def _step(self, state: State, previous: Tensor) -> Step:
        # a copied unknown symbol (an id >= V) is embedded as <unk>; its emission (below)
        # is read at its own id
        token = self.drop(self.target_embedding(self._inputs(previous)))  # B x E
        embedded = self._feed(token, state)  # B x E'
        output, h, c = lstm_step(self.decoder, embedded, state["h"], state["c"], self.drop)
        output = self.drop(output)  # B x H
        scores = self.attention.scores(output.unsqueeze(1), state["keys"]).squeeze(1)  # B x S
        mask = state["mask"]  # B x S
        new = dict(state, h=h, c=c)
        if self.config.monotonic:  # condition a_{i-1} on y_{i-1}, then move forward
            index = previous[:, None, None].expand(*mask.shape, 1)  # B x S x 1
            joint = state["prior"] + state["emission"].gather(-1, index).squeeze(-1)  # B x S
            post = joint - torch.logsumexp(joint, dim=-1, keepdim=True)  # B x S
            transitions = self._transitions(scores.unsqueeze(1), mask)  # B x 1 x S x S
            prior = torch.logsumexp(post.unsqueeze(-1) + transitions[:, 0], dim=1)  # B x S
        else:
            prior = self._log_alpha(scores, mask)  # B x S
        weight_h, _ = self._split_combine()
        query = torch.addmm(self.combine.bias, output, weight_h.t())  # B x d_s
        combined = torch.tanh(query.unsqueeze(1) + state["projected"])  # B x S x d_s, eq. (9)
        emission = torch.log_softmax(self.output(self.drop(combined)), dim=-1)  # B x S x V
        if self.config.copy:  # p_gen_ij for this step's h_i and every h_j
            gates = state["gate_memory"] + self.gate.query(output, token).unsqueeze(-1)  # B x S
            index, slots = state["copy_index"], state["copy_slots"]
            emission = mix_emission(emission, gates, index, slots)  # B x S x (V + K)
        log_probs = torch.logsumexp(prior.unsqueeze(-1) + emission, dim=1)  # B x V, eq. (3)
        alpha = prior.exp().unsqueeze(1)  # B x 1 x S
        if self.config.input_feeding:  # the expected c̄ under alpha
            new["feed"] = torch.bmm(alpha, combined).squeeze(1)  # B x d_s
        if self.config.monotonic:
            new["prior"], new["emission"] = prior, emission
        return Step(log_probs, alpha, new)
