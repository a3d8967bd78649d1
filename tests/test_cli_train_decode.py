"""`transduce train` and `transduce decode` through the CLI; a pipeline of real processes."""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from .conftest import transduce_env
from .test_cli import one_line_error
from .toy import TINY_LSTM, recipe, write_task


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny LSTM trained on the reverse task (shared by the decode tests)."""
    from transduce import config as configuration
    from transduce.training import Trainer

    root = tmp_path_factory.mktemp("trained")
    data = recipe(write_task(root, "reverse"), TINY_LSTM, max_epochs=20)
    Trainer(configuration.parse(data), root / "run").run()
    return root / "run"


def write_recipe(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_train_cli(run, tmp_path: Path):
    prepared = write_task(tmp_path, "copy", n=200)
    config = write_recipe(
        tmp_path / "r.yaml", recipe(prepared, TINY_LSTM, max_updates=20, validate_every=10)
    )
    result = run(
        "train", "--config", config, "--out", tmp_path / "run", "--set", "train.batch_size=8"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "model lstm: " in result.stderr and " parameters" in result.stderr
    assert (
        "update 10" in result.stderr and "update 20" in result.stderr and "test (" in result.stderr
    )
    report = json.loads((tmp_path / "run" / "train.json").read_text(encoding="utf-8"))
    assert report["config"]["train"]["batch_size"] == 8
    one_line_error(
        run("train", "--config", config, "--out", tmp_path / "run"),
        "already holds a run",
        "--resume",
    )
    result = run("train", "--out", tmp_path / "run", "--resume", "--set", "train.max_updates=30")
    assert result.exit_code == 0, result.output
    assert "resuming at update 20" in result.stderr
    assert (
        json.loads((tmp_path / "run" / "train.json").read_text(encoding="utf-8"))["updates"] == 30
    )


def test_train_cli_data_root_and_base(run, tmp_path: Path, monkeypatch):
    """`$DATA/` paths under --data-root; the run's config.yaml resumes without it."""
    root = tmp_path / "datasets"
    root.mkdir()
    write_task(root, "copy", n=200)
    baseline = recipe(Path("$DATA/copy-prepared"), TINY_LSTM, max_updates=10, validate_every=10)
    write_recipe(tmp_path / "baseline.yaml", baseline)
    variant = write_recipe(
        tmp_path / "variant.yaml", {"base": "baseline.yaml", "train": {"batch_size": 8}}
    )
    monkeypatch.delenv("TRANSDUCE_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    one_line_error(
        run("train", "--config", variant, "--out", "run"),
        "copy-prepared: no such data file",
        "--data-root DIR",
        "TRANSDUCE_DATA",
    )
    assert not Path("run").exists()
    result = run("train", "--config", variant, "--data-root", "datasets", "--out", "run")
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load(Path("run/config.yaml").read_text(encoding="utf-8"))
    assert saved["data"]["prepared"] == str(root / "copy-prepared")
    assert saved["train"]["batch_size"] == 8 and saved["train"]["max_updates"] == 10
    monkeypatch.chdir(tmp_path / "datasets")  # elsewhere, and no data root given
    result = run("train", "--out", tmp_path / "run", "--resume", "--set", "train.max_updates=20")
    assert result.exit_code == 0, result.output
    assert "resuming at update 10" in result.stderr


def test_train_config_errors_are_one_line(run, tmp_path: Path):
    bad = write_recipe(
        tmp_path / "bad.yaml",
        {
            "data": {"format": "cmudict"},
            "model": {"name": "lstm", "layers": 3},
            "train": {"batch_size": 0},
        },
    )
    one_line_error(
        run("train", "--config", bad, "--out", tmp_path / "x"),
        "2 problems",
        "model.layers: unknown key",
        "train.batch_size",
    )
    assert not (tmp_path / "x").exists()
    one_line_error(run("train", "--config", "nonesuch"), "not a shipped recipe")


def test_decode_raw_lines(run, trained: Path):
    result = run("decode", trained, input="abc\n\ngfe\nabz\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n") == ["c b a", "", "e f g", result.stdout.split("\n")[3], ""]
    assert "1 input symbols are unknown" in result.stderr  # the z


def test_decode_nbest_tsv_and_report(run, trained: Path, tmp_path: Path):
    result = run(
        "decode",
        trained / "best.pt",
        "--beam",
        "3",
        "--nbest",
        "2",
        "--report",
        tmp_path / "r.json",
        input="abc\n\ndd\n",
    )
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [line[0] for line in lines] == ["1", "1", "2", "3", "3"]
    assert lines[2] == ["2", "", ""]  # an empty input line: one line, empty
    assert lines[0][1] == "c b a" and float(lines[0][2]) >= float(lines[1][2])
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert (
        report["lines"] == 3 and report["options"]["beam"] == 3 and report["words_per_second"] > 0
    )
    prepared_test = next(trained.parent.glob("reverse-prepared")) / "test.tsv"
    result = run("decode", trained, prepared_test, "--input-format", "tsv")
    sources = [
        line.split("\t")[0] for line in prepared_test.read_text(encoding="utf-8").splitlines()
    ]
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(sources)
    right = sum(o == " ".join(reversed(s.split(" "))) for o, s in zip(outputs, sources))
    assert right >= 0.8 * len(sources)


def test_decode_runs_in_the_precision_asked_for(trained: Path):
    from transduce import checkpoint
    from transduce.inference import Transducer
    from transduce.precision import bf16_works

    seen = []
    for bf16 in (True, False, None):  # None: as trained (float32 here)
        transducer = Transducer.from_checkpoint(checkpoint.load(trained), "cpu", bf16)
        encode = transducer.model.init_state

        def spy(batch, encode=encode):
            seen.append(torch.is_autocast_enabled("cpu"))
            return encode(batch)

        transducer.model.init_state = spy
        assert transducer.transduce(["abc"])[0].texts
    # bf16 where this CPU runs it (see transduce.precision), float32 with a warning elsewhere
    assert seen == [bf16_works("cpu"), False, False]
    warned = Transducer.from_checkpoint(checkpoint.load(trained), "cpu", True).precision_warning
    assert (warned is None) == bf16_works("cpu")


def test_decode_errors(run, trained: Path, tmp_path: Path):
    one_line_error(run("decode", tmp_path / "nothing.pt"), "no such checkpoint")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    one_line_error(run("decode", junk), "not a transduce checkpoint")
    one_line_error(run("decode", trained, "--nbest", "3"), "--nbest (3) cannot exceed --beam (1)")


def test_pipeline_in_subprocesses(tmp_path: Path):
    """prepare -> train -> decode -> score, each a real process, as in a shell script."""
    raw = tmp_path / "lexicon.tsv"
    words = [
        "abc",
        "bca",
        "cab",
        "aab",
        "bba",
        "ccb",
        "abab",
        "baba",
        "caca",
        "acca",
        "bbcc",
        "ccaa",
    ] * 3
    raw.write_text(
        "".join(f"{w}\t{' '.join(w.upper())}\n" for w in dict.fromkeys(words)), encoding="utf-8"
    )
    config = write_recipe(
        tmp_path / "r.yaml",
        recipe(tmp_path / "data", TINY_LSTM, max_updates=15, validate_every=15, batch_size=4),
    )
    env = transduce_env()

    def sh(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env
        )

    assert (
        sh(f"transduce -q prepare tsv {raw} --out data --dev-ratio 0.2 --test-ratio 0.2").returncode
        == 0
    )
    trained = sh(f"transduce -q train --config {config} --out run")
    assert trained.returncode == 0, trained.stderr
    pipeline = sh(
        "cut -f1 data/test.tsv | tr -d ' ' | transduce decode run"
        " | transduce score - data/test.tsv --ref-col 2 --metric wer --json"
    )
    assert pipeline.returncode == 0, pipeline.stderr
    wer = json.loads(pipeline.stdout)["scores"]["wer"]["value"]
    assert 0 <= wer <= 100
    # the natural pipeline (the source column as it is: space-separated) stops with the hint
    natural = sh("cut -f1 data/train.tsv | transduce decode run > hyp.txt")  # 3 lines decide
    assert natural.returncode == 2 and "--input-format tsv" in natural.stderr, natural.stderr
    assert len(natural.stderr.strip().splitlines()) == 1
    tabbed = sh("transduce decode run data/test.tsv")
    assert tabbed.returncode == 2 and "--input-format tsv" in tabbed.stderr, tabbed.stderr
    # ... and as the hint says, it gives the same WER as the raw characters
    for source in ("cut -f1 data/test.tsv |", "cat data/test.tsv |"):
        hinted = sh(
            f"{source} transduce decode run - --input-format tsv"
            " | transduce score - data/test.tsv --ref-col 2 --metric wer --json"
        )
        assert hinted.returncode == 0, hinted.stderr
        assert json.loads(hinted.stdout)["scores"]["wer"]["value"] == wer


def test_python_api(trained: Path, tmp_path: Path):
    """The README's Python example: transduce.load, then .transduce with search options."""
    import transduce

    model = transduce.load(trained)  # a run directory: its best.pt
    predictions = model.transduce(["abc", "", "cab"], beam=3, nbest=2)
    assert [len(p.texts) for p in predictions] == [2, 0, 2]
    assert len(predictions[0].scores) == 2 and predictions[0].scores[0] >= predictions[0].scores[1]
    greedy = transduce.Transducer.from_checkpoint(trained / "best.pt").transduce(["abc"])
    assert greedy[0].texts[0] == model.transduce(["abc"])[0].texts[0]
    with pytest.raises(TypeError, match="list of strings"):
        model.transduce("abc")
    with pytest.raises(transduce_errors().ConfigError, match="beam"):
        model.transduce(["abc"], beam=0)


def transduce_errors():
    from transduce import errors

    return errors


def test_decode_inflection_input(run, tmp_path: Path, data: Path):
    """A sigmorphon model reads lemma<TAB>tags and writes the form as joined characters."""
    from transduce import config as configuration
    from transduce.training import Trainer

    inputs = {"train": [data / "english-train-sample"], "test": [data / "english-dev-sample"]}
    from transduce.data.prepare import PrepareRequest, prepare

    prepare(PrepareRequest("sigmorphon", tmp_path / "p", inputs=inputs, dev_ratio=0.2))
    data_recipe = recipe(tmp_path / "p", TINY_LSTM, max_updates=5)
    Trainer(configuration.parse(data_recipe), tmp_path / "run").run()
    result = run(
        "decode",
        tmp_path / "run",
        "--max-output-length",
        "4",
        input="walk\tV;PST\n\nrun\tV;V.PTCP;PRS\n",
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and all(" " not in line for line in lines)
    assert all(len(line) <= 4 for line in lines)
    one_line_error(
        run("decode", tmp_path / "run", input="walk\n"), "<stdin>:1:", "expected lemma<TAB>tags"
    )


def test_decode_streams_a_line_in_a_line_out(trained: Path):
    """`decode RUN -` behind a pipe or a person typing: each line's output comes before the
    next line is written (a batch is decoded as soon as no more input is ready)."""
    process = subprocess.Popen(
        ["transduce", "decode", str(trained), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=transduce_env(),
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        outputs = []
        for word in ("abc", "", "cab"):
            process.stdin.write(word + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], 120)  # no hang if broken
            assert ready, f"no output for {word!r} before the input ended"
            outputs.append(process.stdout.readline())
        process.stdin.close()
        assert process.wait(timeout=120) == 0
    finally:
        process.kill()
    assert outputs[1] == "\n" and outputs[0].strip() and outputs[2].strip()


def test_decode_of_a_file_in_batches_numbers_lines_across_batches(run, trained, tmp_path):
    words = ["abc", "cab", "bca", "ab", "ca"] * 8  # 40 lines: three pieces of 16 lines
    source = tmp_path / "words.txt"
    source.write_text("".join(w + "\n" for w in words[:37]) + "ab\tc\n", encoding="utf-8")
    one_line_error(run("decode", trained, source, "--batch-size", "1"), "words.txt:38", "a tab")
    good = tmp_path / "ok.txt"
    good.write_text("".join(w + "\n" for w in words), encoding="utf-8")
    whole = run("decode", trained, good)
    pieces = run("decode", trained, good, "--batch-size", "1")
    assert whole.exit_code == pieces.exit_code == 0 and whole.stdout == pieces.stdout
    assert len(whole.stdout.splitlines()) == 40
