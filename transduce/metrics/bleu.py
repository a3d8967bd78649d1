"""BLEU through sacrebleu, with sacrebleu's own signature.

The corpus value is `sacrebleu.metrics.BLEU.corpus_score` on the lines as text (the unit
does not apply: sacrebleu tokenizes, 13a by default). Several references per line are
passed as reference streams, `None` where a line has fewer alternatives (sacrebleu's way
of taking a variable number of references). The per-line statistics for the bootstrap
and `--per-item` are sacrebleu's sufficient statistics of each line (hypothesis length,
closest reference length, matching and total n-grams), read from `sentence_score`, and
the bootstrap re-aggregates them with `BLEU.compute_bleu`, exactly as the corpus score does.

sacrebleu is imported when a BLEU is computed or its options are checked, not with this
module: importing it (and the lxml and portalocker it imports) took about a sixth of
the start-up of every `transduce` command, shell completion included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from transduce.errors import ConfigError
from transduce.metrics.base import Metric, Option
from transduce.metrics.corpus import Corpus

if TYPE_CHECKING:
    from sacrebleu.metrics import BLEU


def _sacrebleu() -> type[BLEU]:
    """sacrebleu's BLEU class, imported on first use."""
    from sacrebleu.metrics import BLEU

    return BLEU


def _bleu_options() -> dict[str, Option]:
    return {
        "tokenize": Option(
            None, lambda: (None, *_sacrebleu().TOKENIZERS), "sacrebleu tokenizer (default 13a)"
        ),
        "lowercase": Option(False, (False, True), "lower-case before scoring", bool),
        "smooth_method": Option(
            "exp", lambda: tuple(_sacrebleu().SMOOTH_DEFAULTS), "smoothing method"
        ),
        "smooth_value": Option(None, None, "smoothing value (floor, add-k)", float),
        "max_ngram_order": Option(4, (1, 2, 3, 4, 5, 6, 7, 8, 9), "highest n-gram order", int),
        "effective_order": Option(False, (False, True), "drop n-gram orders with no matches", bool),
        "trg_lang": Option("", None, "target language code (picks a tokenizer for zh, ja, ko)"),
        "force": Option(False, (False, True), "do not warn about tokenized input", bool),
    }


class Bleu(Metric):
    name = "bleu"
    title = "BLEU"
    higher_is_better = True
    definition = (
        "sacrebleu corpus BLEU on the lines as text (13a tokenizer by default), multi-reference"
    )
    options: ClassVar[dict[str, Option]] = _bleu_options()
    option_pairs = True  # --bleu-option KEY=VALUE, as sacrebleu names them
    uses_unit = False  # sacrebleu tokenizes

    def _metric(self, **override: Any) -> BLEU:
        try:
            return _sacrebleu()(**{**self.values, **override})
        except (RuntimeError, ImportError, ValueError, OSError) as error:
            # a tokenizer whose extra is not installed, or that downloads a model (flores)
            raise ConfigError(f"metric bleu: {error}") from None

    @staticmethod
    def _streams(corpus: Corpus) -> list[list[str | None]]:
        refs = corpus.ref_texts
        width = max(len(alts) for alts in refs)
        return [[alts[k] if k < len(alts) else None for alts in refs] for k in range(width)]

    def evaluate(self, corpus: Corpus) -> tuple[float, str]:
        bleu = self._metric()
        result = bleu.corpus_score(corpus.hyp_texts, self._streams(corpus))
        return float(result.score), "bleu|" + bleu.get_signature().format()

    def sentences(self, corpus: Corpus) -> list[Any]:
        """sacrebleu's sentence-level scores (with effective order, as it recommends)."""
        bleu = self._metric(effective_order=True)
        return [bleu.sentence_score(h, alts) for h, alts in zip(corpus.hyp_texts, corpus.ref_texts)]

    def item_columns(self, corpus: Corpus) -> list[tuple[str, list[str]]]:
        """sacrebleu's sentence BLEU of every line (effective order)."""
        return [("sentence_bleu", [f"{s.score:.4f}" for s in self.sentences(corpus)])]

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        rows = [
            [s.sys_len, s.ref_len, *s.counts, *s.totals] for s in self.sentences(corpus)
        ]  # N x (2 + 2 * order)
        return [list(map(float, column)) for column in zip(*rows)]

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        order = self.values["max_ngram_order"]
        sys_len, ref_len = sums[0], sums[1]
        correct = [round(x) for x in sums[2 : 2 + order]]
        total = [round(x) for x in sums[2 + order : 2 + 2 * order]]
        result = _sacrebleu().compute_bleu(
            correct,
            total,
            round(sys_len),
            round(ref_len),
            smooth_method=self.values["smooth_method"],
            smooth_value=self.values["smooth_value"],
            effective_order=self.values["effective_order"],
            max_ngram_order=order,
        )
        return float(result.score)
