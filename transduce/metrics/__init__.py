"""The one metric module: WER/PER, ACC/MFS, LEV, BLEU, tagging accuracy (`score`, training).

    from transduce.metrics import get_metric
    get_metric("per", unit="symbol").corpus_score(["K AE T"], [["K AE T", "K AA T"]]).value

Each score carries a signature (metric, options, number of references, unit, version).
The exact definitions are in `transduce.metrics.edit`, `transduce.metrics.bleu`,
`transduce.metrics.tagging` and the README. Metrics score lines already in memory
(a `Corpus`); reading files is the `score` command's (`transduce.scoring`).
"""

from __future__ import annotations

from typing import Any

from transduce.metrics.base import Metric, Option, Score
from transduce.metrics.bleu import Bleu
from transduce.metrics.corpus import Corpus
from transduce.metrics.edit import EDIT_METRICS, lcs_length
from transduce.metrics.tagging import TaggingAccuracy
from transduce.registry import lookup

METRICS: dict[str, type[Metric]] = {m.name: m for m in (*EDIT_METRICS, Bleu, TaggingAccuracy)}


def get_metric(name: str, **options: Any) -> Metric:
    """A metric by name with its options (`unit` and the metric's own); errors list valid names."""
    return lookup(METRICS, name, "metric")(**options)


__all__ = ["METRICS", "Corpus", "Metric", "Option", "Score", "get_metric", "lcs_length"]
