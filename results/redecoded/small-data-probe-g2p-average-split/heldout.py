"""best.pt and final.pt of small-data-probe-g2p-average-split on the dev half that chose neither.

python heldout.py RUNS_DIR OUT_DIR (with transduce installed): for each finished run in
RUNS_DIR, writes OUT_DIR/CELL.half.tsv (the dev lines that `train.dev_subset` drew, as
`transduce.tasks.base.dev_subset` draws them), CELL.heldout.tsv (the other lines),
CELL.best.half.predictions (the check: it must give the run's recorded best dev WER, else
the script stops with an error),
CELL.best.heldout.predictions and CELL.final.heldout.predictions, and prints their WERs.
"""

import json
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

from transduce.experiments.runner import finished
from transduce.metrics import get_metric
from transduce.tasks.base import dev_subset

Pair = namedtuple("Pair", "source line")


def wer(pred: Path, tsv: Path) -> float:
    """The project's WER (`transduce.metrics`) of `pred` against the second column of `tsv`."""
    hyp = pred.read_text(encoding="utf-8").splitlines()
    ref = [[line.split("\t")[1]] for line in tsv.read_text(encoding="utf-8").splitlines()]
    assert len(hyp) == len(ref), pred
    return get_metric("wer").corpus_score(hyp, ref).value


def main(runs: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for run in sorted(runs.iterdir()):
        if not finished(run):  # an interrupted run has a train.json too, and no final.pt
            continue
        recorded = json.loads((run / "train.json").read_text(encoding="utf-8"))
        train = recorded["config"]["train"]
        lines = (run / "data/dev.tsv").read_text(encoding="utf-8").splitlines()
        pairs = [Pair(line.split("\t")[0], line) for line in lines]
        seed = train["dev_subset_seed"]  # None: train.seed, as training draws it
        half = dev_subset(pairs, train["dev_subset"], train["seed"] if seed is None else seed)
        chosen = {p.source for p in half}
        held = [p for p in pairs if p.source not in chosen]
        for name, part in (("half", half), ("heldout", held)):
            text = "".join(p.line + "\n" for p in part)
            (out / f"{run.name}.{name}.tsv").write_text(text, encoding="utf-8")
        for checkpoint, split in (("best", "half"), ("best", "heldout"), ("final", "heldout")):
            pred = out / f"{run.name}.{checkpoint}.{split}.predictions"
            command = ["transduce", "decode", "-q", str(run / f"{checkpoint}.pt")]
            command += [str(out / f"{run.name}.{split}.tsv"), "--input-format", "tsv"]
            with open(pred, "w", encoding="utf-8") as f:
                subprocess.run([*command, "--device", "cpu"], stdout=f, check=True, env=env)
        check = wer(out / f"{run.name}.best.half.predictions", out / f"{run.name}.half.tsv")
        best = wer(out / f"{run.name}.best.heldout.predictions", out / f"{run.name}.heldout.tsv")
        final = wer(out / f"{run.name}.final.heldout.predictions", out / f"{run.name}.heldout.tsv")
        if abs(check - recorded["best"]["score"]) > 0.005:  # another half, or another model
            sys.exit(
                f"{run.name}: best.pt gives WER {check:.2f} on the drawn half, but the run "
                f"recorded {recorded['best']['score']:.2f}: not the half that selected it"
            )
        print(
            f"{run.name}: {len(half)} drawn, {len(held)} held out; best dev WER recorded "
            f"{recorded['best']['score']:.2f}, decoded {check:.2f}; held out: best.pt "
            f"{best:.2f}, final.pt {final:.2f}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
