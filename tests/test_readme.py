"""Every example of the README, run as written, so that the README cannot drift.

The commands of the README's ```bash blocks (and its indented `transduce` lines) run in
README order through bash, in a folder laid out as a user's would be: the data files they
name are small stand-ins made from `tests/data`, `../shared/data` and `~/datasets` hold
stand-ins of the shared datasets, and the ```python blocks run there too. The only
changes to a command are those of `CAP` (a training run is capped at a few updates) and
`REWRITE` (a placeholder of the README replaced by a command); the lines that cannot run
here are listed in `NOT_RUN`, with the reason. A new example with no stand-in for its files
fails this test: give it one below.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REPO, transduce_env

README = REPO / "README.md"

NOT_RUN = {
    "pip install torch==2.13.0 && pip install . && transduce train --config g2p":
        "the install is what .ci/run does; `transduce train --config g2p` runs below",
    'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest -n 2':
        "this is the test run itself",
    "cp completions/transduce.zsh ~/.zfunc/_transduce": "writes to the user's home",
    "cp completions/transduce.fish ~/.config/fish/completions/": "writes to the user's home",
}  # fmt: skip

# A training run of the README, capped: a few updates, validation on 16 dev lines.
CAP = " --set train.max_updates={updates} --set train.validate_every=2 --set train.dev_subset=16"

HARD_TAG = (
    "transduce train --config small/inflection --set model.name=hard --set model.monotonic=true "
    "--set model.tag_input=true --set model.attend_tags=false --set train.average_best_last=false "
    "--set 'data.train=[my-train.tsv]' --set 'data.dev=[my-dev.tsv]' "
    "--set 'data.test=[my-test.tsv]'"
)  # the README's tag transducer (its files stand for the user's own)

REWRITE = {
    # the main job's test decode is 13,548 words: the decode examples below do it again
    "transduce train --config g2p": "transduce train --config g2p --no-test",
    "transduce train --config g2p --out runs/g2p-2 --nproc 2":
        "transduce train --config g2p --out runs/g2p-2 --nproc 2 --no-test",
    "transduce train --config g2p --set train.keep_last=2 --out runs/g2p-kept":
        "transduce train --config g2p --set train.keep_last=2 --out runs/g2p-kept --no-test",
    # the user's own files: the inflection stand-ins
    HARD_TAG: HARD_TAG.replace("my-train.tsv", "english-train-high")
        .replace("my-dev.tsv", "english-dev").replace("my-test.tsv", "english-dev"),
    # a placeholder for any command that prints hypotheses
    "decode_something | transduce score - ref.txt --metric wer --json | jq .scores.wer.value":
        "cat hyp.txt | transduce score - ref.txt --metric wer --json"
        + (" | jq .scores.wer.value" if shutil.which("jq") else ""),
}  # fmt: skip


def examples() -> list[tuple[str, str]]:
    """("bash", command) and ("python", block) in README order: a bash block's lines with
    continuations joined and comments dropped, and the indented `transduce` lines."""
    found: list[tuple[str, str]] = []
    lines = README.read_text(encoding="utf-8").splitlines()
    block: str | None = None
    body: list[str] = []
    for line in lines:
        if line.startswith("```"):
            if block is None:
                block, body = line[3:].strip(), []
                continue
            if block == "python":
                found.append(("python", "\n".join(body)))
            elif block == "bash":
                joined = "\n".join(body).replace("\\\n", " ")
                for command in joined.splitlines():
                    command = re.sub(r"(^|\s+)#\s.*$", "", command).strip()
                    command = re.sub(r"\s+", " ", command)
                    if command:
                        found.append(("bash", command))
            block = None
        elif block is not None:
            body.append(line)
        elif line.startswith("    transduce "):
            found.append(("bash", line.strip()))
    return found


def _cmudict_lines(word_lines: list[str]) -> list[str]:
    """CMUdict entries as the Wu et al. (2018) split files write them: `w o r d<TAB>W ER D`."""
    rows = []
    for line in word_lines:
        word, *phones = line.split()
        rows.append(" ".join(re.sub(r"\(\d+\)$", "", word).lower()) + "\t" + " ".join(phones))
    return rows


def _stand_ins(root: Path) -> Path:
    """The user's folder (returned), `../shared/data` beside it and `~/datasets`."""
    work = root / "user"
    work.mkdir()
    (work / "completions").symlink_to(REPO / "completions")
    copies = {
        "english-train-high": "english-train-sample",
        "english-dev": "english-dev-sample",
        "english-covered-test": "english-covered-test-sample",
        "en_ewt-ud-train.conllu": "ewt_sample.conllu",
        "en_ewt-ud-dev.conllu": "ewt_sample.conllu",
        "en_ewt-ud-test.conllu": "ewt_sample.conllu",
        "train_gsw.tok": "gsw_sample.txt",
        "train_de.tok": "de_sample.txt",
    }
    for name, fixture in copies.items():
        shutil.copy(DATA / fixture, work / name)
    entries = [
        line
        for line in (DATA / "cmudict-sample.dict").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith(";;;")
    ]
    rows = _cmudict_lines(entries)
    (work / "lexicon.tsv").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    (work / "words.txt").write_text("transduce\ntoolkit\n", encoding="utf-8")
    ud = root / "shared" / "data" / "ud" / "UD_English-EWT"  # ../shared/data, the data root
    ud.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(DATA / "ewt_sample.conllu", ud / f"en_ewt-ud-{split}.conllu")
    wu = root / "home" / "datasets" / "g2p-wu2018-cmudict-nettalk"  # ~/datasets
    wu.mkdir(parents=True)
    for split, part in (("train", rows[:30]), ("dev", rows[30:36]), ("test", rows[36:])):
        for name in ("CMUDict", "NETtalk"):
            (wu / f"{name}.{split}").write_text("".join(r + "\n" for r in part), "utf-8")
    _experiment(work)
    return work


def _experiment(work: Path) -> None:
    """The README's experiment file, its runs capped as `CAP` caps a training run, one
    seed."""
    import yaml

    text = README.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# (\S+\.yaml): .*?)```", text, re.S)
    assert block, "the README's experiment file (a yaml block starting '# NAME.yaml:')"
    data = yaml.safe_load(block.group(1))
    cap = {"train.max_updates": 4, "train.validate_every": 2, "train.dev_subset": 16}
    data["set"] = {**(data.get("set") or {}), **cap}
    data["seeds"] = data["seeds"][:1]
    data["datasets"] = dict(list(data["datasets"].items())[:1])  # the first: time
    (work / block.group(2)).write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")


def _before(command: str, work: Path) -> None:
    """Files a command reads that no earlier example writes, made from what is there."""
    if " refs.txt " in command or " ref.txt " in command:  # the answers of hyp.txt's lines
        test = (work / "runs" / "g2p" / "data" / "test.tsv").read_text(encoding="utf-8")
        answers = [line.split("\t")[1] for line in test.splitlines()]
        # refs.txt: alternatives split by '|'
        (work / "refs.txt").write_text("".join(f"X|{a}\n" for a in answers), encoding="utf-8")
        (work / "ref.txt").write_text("".join(f"{a}\n" for a in answers), encoding="utf-8")
    if command.startswith("transduce score tags.txt"):  # the gold tags of the test file
        sentences, tags = [], []
        for line in (work / "en_ewt-ud-test.conllu").read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) == 10 and fields[0].isdigit():
                tags.append(fields[3])
            elif not line.strip() and tags:
                sentences.append(" ".join(tags))
                tags = []
        (work / "tags.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")


# The main job's test split is CMUdict's 13,548 words: decoding it and analyzing its
# attention twice took two of the test's four minutes. After the commands that prepare it
# (the main job, `prepare cmudict`) it is cut to its first `TEST_LINES` lines, its
# manifest's SHA-256, size and line counts with it, so that the later examples still read a
# prepared split, as a user's do.
TEST_LINES = 200
SHRINK = {
    "transduce train --config g2p": "runs/g2p/data",
    "transduce prepare cmudict --out data/cmudict": "data/cmudict",
}


def _shrink_test_split(directory: Path) -> None:
    from transduce.io import sha256_file

    test = directory / "test.tsv"
    lines = test.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) > TEST_LINES, f"{test}: {len(lines)} lines"
    test.write_text("".join(lines[:TEST_LINES]), encoding="utf-8")
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["outputs"]["test.tsv"]
    entry["sha256"] = sha256_file(test)
    for key, value in (("bytes", test.stat().st_size), ("lines", TEST_LINES)):
        if key in entry:
            entry[key] = value
    if "test" in manifest.get("lines", {}):
        manifest["lines"]["test"] = TEST_LINES
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _run(command: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], cwd=work, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.long
def test_the_readme_examples_run(tmp_path: Path):
    pytest.importorskip("subword_nmt")  # `prepare parallel --subwords subword-nmt`
    work = _stand_ins(tmp_path)
    env = {**transduce_env(), "HOME": str(tmp_path / "home"), "COLUMNS": "100"}
    env.pop("TRANSDUCE_DATA", None)  # the default data root: ../shared/data
    env.pop("TRANSDUCE_SHARED_DATA", None)
    ran = []
    for kind, text in examples():
        if kind == "python":
            result = subprocess.run(
                [sys.executable, "-c", text], cwd=work, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"README python block:\n{text}\n{result.stderr}"
            ran.append(text)
            continue
        if text in NOT_RUN:
            continue
        command = REWRITE.get(text, text)
        if command.startswith("transduce train"):
            command += CAP.format(updates=6 if "--resume" in command else 4)
        _before(command, work)
        result = _run(command, work, env)
        assert result.returncode == 0, f"README: {text}\nran: {command}\n{result.stderr}"
        assert "Traceback" not in result.stderr, result.stderr
        ran.append(text)
        if text in SHRINK:
            _shrink_test_split(work / SHRINK[text])
        if "--json" in command and "jq" not in command:
            assert "wer" in json.loads(result.stdout)["scores"]
    assert any(t.startswith("transduce train --config g2p") for t in ran)
    assert sum(k == "python" for k, _ in examples()) >= 2 and len(ran) >= 20, ran
    # what the examples made, as the README says
    assert (work / "runs" / "g2p" / "best.pt").is_file() and (work / "mono.json").is_file()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (work / "plots" / "line5.pdf").is_file()
    table = (work / "table.csv").read_text(encoding="utf-8").splitlines()  # the experiment's
    assert table[0].startswith("system,dataset,metric") and len(table) == 1 + 2 * 1 * 2
    resumed = json.loads((work / "runs" / "tf" / "train.json").read_text(encoding="utf-8"))
    assert resumed["updates"] == 6, resumed.get("updates")


def test_every_readme_example_is_known():
    """The lines left out are still in the README (a stale entry here is an error too)."""
    commands = {text for kind, text in examples() if kind == "bash"}
    assert set(NOT_RUN) <= commands, set(NOT_RUN) - commands
    assert set(REWRITE) <= commands, set(REWRITE) - commands
    assert set(SHRINK) <= commands, set(SHRINK) - commands
