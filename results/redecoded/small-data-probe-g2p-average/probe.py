"""g2p-avg probe: per language, dev WER of best.pt (best validation) and final.pt (train.json
`final`); test WER of final.pt (recorded, and decoded again as a check) and of best.pt
(decoded here); paired t-tests over the languages. Writes the decodes to OUT."""
import json, math, statistics as st, subprocess, sys
from pathlib import Path
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
rows = []
def wer(hyp, ref):
    return 100 * sum(h.split() != r.split() for h, r in zip(hyp, ref)) / len(ref)
def decode(model, words, dest):
    r = subprocess.run(["/work/venv/bin/transduce", "decode", "-q", str(model), str(words), "--device", "cpu"], capture_output=True, text=True, check=True)
    dest.write_text(r.stdout)
    return r.stdout.splitlines()
for run in sorted(runs.glob("g2p-avg.*.seed1")):
    if not (run / "train.json").is_file(): continue
    rep = json.loads((run / "train.json").read_text())
    if not rep.get("test"): continue
    lang = run.name.split(".")[1]
    best = next(h for h in rep["history"] if h["update"] == rep["best"]["update"])
    test_path = Path(rep["config"]["data"]["test"][0])
    lines = [l.split("\t") for l in test_path.read_text().splitlines()]
    words = out / f"{lang}.test.words"; words.write_text("".join(w[0] + "\n" for w in lines))
    refs = [w[1] for w in lines]
    hb = decode(run / "best.pt", words, out / f"{lang}.best.test.predictions")
    hf = decode(run / "final.pt", words, out / f"{lang}.final.test.predictions")
    recorded = (run / "test.predictions").read_text().splitlines()
    assert hf == recorded, lang
    assert abs(wer(hf, refs) - rep["test"]["wer"]) < 1e-9, (lang, wer(hf, refs), rep["test"]["wer"])
    rows.append(dict(lang=lang, dev_best=best["dev_scores"]["wer"], dev_final=rep["final"]["dev_scores"]["wer"],
                     test_best=wer(hb, refs), test_final=rep["test"]["wer"], updates=rep["final"]["updates"]))
    print(json.dumps(rows[-1]))
from transduce.experiments.significance import paired
for split in ("dev", "test"):
    a = [r[f"{split}_best"] for r in rows]; b = [r[f"{split}_final"] for r in rows]
    d = [y - x for x, y in zip(a, b)]
    print(split, "best", round(st.mean(a), 2), "final", round(st.mean(b), 2), "diff", round(st.mean(d), 3),
          "lower", sum(x < 0 for x in d), "higher", sum(x > 0 for x in d), "equal", sum(x == 0 for x in d), "paired(final-best)", paired(b, a))
(out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
