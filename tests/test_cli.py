"""Every command through Typer's CliRunner, and real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from transduce import __version__

from .conftest import transduce_env


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_version_and_help(run):
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"transduce {__version__}"
    result = run("--help")
    assert result.exit_code == 0 and "prepare" in result.stdout and "score" in result.stdout


# ------------------------------------------------------------------------------- prepare


def test_prepare_cmudict_file(run, tmp_path: Path, data: Path):
    out = tmp_path / "g2p"
    result = run(
        "prepare", "cmudict", data / "cmudict-sample.dict", "--out", out, "--dev-ratio", "0.1"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # stdout is for data only
    assert "train" in result.stderr and "units: source char, target symbol" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["options"] == {"keep_stress": False, "lowercase": True}


def test_prepare_quiet_prints_nothing(run, tmp_path: Path, data: Path):
    result = run(
        "--quiet", "prepare", "cmudict", data / "cmudict-sample.dict", "-o", tmp_path / "x"
    )
    assert result.exit_code == 0 and result.output == ""


def test_prepare_format_options(run, tmp_path: Path, data: Path):
    args = ["--tag", "xpos", "--test-ratio", "0.25", "--dev-ratio", "0.25"]
    result = run("prepare", "conllu", data / "ewt_sample.conllu", "-o", tmp_path / "x", *args)
    assert result.exit_code == 0, result.output
    one_line_error(run("prepare", "cmudict", "-o", tmp_path / "y", "--tag", "xpos"),
                   "--tag: not an option of the cmudict format")  # fmt: skip
    assert not (tmp_path / "y").exists()


def test_prepare_parallel_given_splits(run, tmp_path: Path, data: Path):
    g, d = data / "gsw_sample.txt", data / "de_sample.txt"
    result = run("prepare", "parallel", "--train", g, "--train", d, "--dev", g, "--dev", d,
                 "--test", g, "--test", d, "-o", tmp_path / "x")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning:") == 3  # the same sentences in all three splits


def test_prepare_malformed_line_is_one_red_line(run, tmp_path: Path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("cat\tK AE T\ndog\n", encoding="utf-8")
    one_line_error(run("prepare", "tsv", bad, "-o", tmp_path / "out"),
                   "bad.tsv:2:", "expected at least 2 tab-separated columns", "'dog'")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_prepare_missing_file(run, tmp_path: Path):
    one_line_error(run("prepare", "tsv", tmp_path / "nope.tsv", "-o", tmp_path / "out"),
                   "nope.tsv", "cannot read")  # fmt: skip


def test_prepare_refuses_to_overwrite(run, tmp_path: Path, data: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x", encoding="utf-8")
    one_line_error(run("prepare", "cmudict", data / "cmudict-sample.dict", "-o", out), "--force")
    assert (out / "keep").exists()


# --------------------------------------------------------------------------------- score


@pytest.fixture
def g2p(tmp_path: Path) -> tuple[Path, Path]:
    hyp = tmp_path / "hyp.txt"
    ref = tmp_path / "ref.txt"
    hyp.write_text("K AE T\nD AA G\n\n", encoding="utf-8")
    ref.write_text("K AE T\nD AO G\nB ER D\n", encoding="utf-8")
    return hyp, ref


def test_score_table_and_json(run, g2p):
    hyp, ref = g2p
    result = run("score", hyp, ref, "--metric", "wer", "-m", "per", "-m", "mfs", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["scores"]["wer"]["value"] == pytest.approx(200 / 3)
    assert report["scores"]["per"]["value"] == pytest.approx(100 * 4 / 9)
    assert report["lines"] == 3 and report["unit"] == "symbol"
    assert "wer" in result.stderr and "66.67" in result.stderr


def test_score_default_metrics_and_report_file(run, g2p, tmp_path: Path):
    hyp, ref = g2p
    result = run(
        "--quiet", "score", hyp, ref, "--report", tmp_path / "r.json", "--bootstrap", "100"
    )
    assert result.exit_code == 0 and result.output == ""
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert list(report["scores"]) == ["wer", "per"]
    assert len(report["scores"]["wer"]["ci"]) == 2


def test_score_per_item(run, g2p, tmp_path: Path):
    hyp, ref = g2p
    result = run("score", hyp, ref, "-m", "mfs", "-m", "bleu", "--per-item", tmp_path / "items.tsv")
    assert result.exit_code == 0, result.output
    rows = [
        line.split("\t")
        for line in (tmp_path / "items.tsv").read_text(encoding="utf-8").splitlines()
    ]
    assert rows[0][:5] == ["line", "hyp", "ref", "ref_index", "edits"]
    assert rows[0][-1] == "sentence_bleu" and "f" in rows[0]
    assert rows[2][1:5] == ["D AA G", "D AO G", "0", "1"]
    assert rows[3][1] == "" and rows[3][rows[0].index("f")] == "0.000000"


def test_score_stdin(run, g2p):
    _, ref = g2p
    result = run("score", "-", ref, "-m", "acc", "--json", input="K AE T\nD AO G\nB ER D\n")
    assert json.loads(result.stdout)["scores"]["acc"]["value"] == 100.0


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["-m", "wer"], ["line counts differ", "has 2 lines", "has 3 lines"]),
        (["--ref-col", "3"], ["no column 3"]),
        (["-m", "acuracy"], ["'acuracy' is not one of", "see: transduce score --help"]),
        (["--unit", "word"], ["'word' is not one of"]),
        (["--ref-col", "two"], ["Invalid value for '--ref-col'", "int"]),
        (["--bootstrap", "10"], ["--bootstrap takes at least 100"]),
    ],
)
def test_score_errors(run, tmp_path: Path, args, fragments):
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a\nb\n", encoding="utf-8")
    ref = tmp_path / "ref.txt"
    ref.write_text("a\nb\nc\n" if "wer" in args else "a\tb\nc\td\n", encoding="utf-8")
    one_line_error(run("score", hyp, ref, *args), *fragments)


def test_metric_names_ignore_case_and_quiet_goes_anywhere(run, g2p):
    hyp, ref = g2p
    result = run("score", hyp, ref, "-m", "ACC", "-q")
    assert result.exit_code == 0 and result.output == ""


def test_score_never_overwrites_an_input(run, g2p, tmp_path: Path, data: Path):
    hyp, ref = g2p
    before = ref.read_text(encoding="utf-8")
    one_line_error(run("score", hyp, ref, "--report", ref), "is an input of this command")
    one_line_error(run("score", hyp, ref, "--per-item", hyp), "is an input of this command")
    assert ref.read_text(encoding="utf-8") == before
    out = tmp_path / "p"
    assert run("-q", "prepare", "cmudict", data / "cmudict-sample.dict", "-o", out).exit_code == 0
    one_line_error(
        run("score", hyp, ref, "--report", out / "test.tsv"), "part of a prepared dataset"
    )


def test_score_hints(run, tmp_path: Path, data: Path):
    out = tmp_path / "p"
    args = ["--test-ratio", "0.3", "--dev-ratio", "0.1", "-o", out]
    assert run("-q", "prepare", "cmudict", data / "cmudict-sample.dict", *args).exit_code == 0
    test = out / "test.tsv"
    rows = [line.split("\t") for line in test.read_text(encoding="utf-8").splitlines()]
    hyp = tmp_path / "hyp"
    hyp.write_text("".join(r[1] + "\n" for r in rows), encoding="utf-8")
    one_line_error(run("score", hyp, test), "a prepared split", "use --ref-col 2")
    copy = tmp_path / "copy.tsv"  # a copy is no longer known as prepared: a warning instead
    copy.write_text(test.read_text(encoding="utf-8"), encoding="utf-8")
    assert "did you mean --ref-col N?" in run("score", hyp, copy).stderr
    words = tmp_path / "words"
    words.write_text("".join(r[1].replace(" ", "") + "\n" for r in rows), encoding="utf-8")
    assert "--unit char" in run("score", words, test, "--ref-col", "2").stderr


def test_score_empty_reference_is_an_error(run, tmp_path: Path):
    hyp, ref = tmp_path / "h", tmp_path / "r"
    hyp.write_text("a\nb\n", encoding="utf-8")
    ref.write_text("a\n\n", encoding="utf-8")
    one_line_error(run("score", hyp, ref), "r:2:", "empty reference")


def test_score_bleu_options(run, tmp_path: Path):
    hyp, ref = tmp_path / "h", tmp_path / "r"
    hyp.write_text("The cat sat .\n", encoding="utf-8")
    ref.write_text("the cat sat .\n", encoding="utf-8")
    result = run("score", hyp, ref, "-m", "bleu", "--bleu-option", "lowercase=true", "--json")
    assert json.loads(result.stdout)["scores"]["bleu"]["value"] == pytest.approx(100.0)
    one_line_error(
        run("score", hyp, ref, "-m", "bleu", "--bleu-option", "colour=red"), "colour=red"
    )
    one_line_error(
        run("score", hyp, ref, "-m", "bleu", "--bleu-option", "tokenize=nope"), "tokenize"
    )


# ----------------------------------------------------------------------- real processes


def test_subprocess_help_and_module():
    result = subprocess.run(
        ["transduce", "--help"], capture_output=True, text=True, env=transduce_env()
    )
    assert result.returncode == 0 and "score" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "transduce", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.strip() == f"transduce {__version__}"


@pytest.mark.parametrize(
    "command",
    [
        *("train", "decode", "prepare", "analyze-monotonicity", "score", "recipes", "average"),
        *("experiment run", "experiment report"),
    ],
)
def test_help_fits_80_columns(command: str):
    """At 80 columns the help text keeps a column of at least 20 characters (`score --help`
    once wrapped every option's help into one-word lines)."""
    env = {**transduce_env(), "COLUMNS": "80"}
    result = subprocess.run(
        ["transduce", *command.split(), "--help"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    # continuation lines of a panel: "│" and spaces up to the help column, then help text
    starts = [
        len(line) - len(line[1:].lstrip(" "))
        for line in lines
        if line.startswith("│") and line[1:].strip(" │") and line[1:6] == "     "
    ]
    assert starts and 79 - max(starts) >= 20, result.stdout


def test_subprocess_pipeline(tmp_path: Path):
    ref = tmp_path / "ref.txt"
    ref.write_text("K AE T\nD AO G\n", encoding="utf-8")
    result = subprocess.run(
        f"printf 'K AE T\\nD AA G\\n' | transduce score - {ref} --metric wer --json",
        shell=True, capture_output=True, text=True, env=transduce_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["scores"]["wer"]["value"] == 50.0
    assert "\x1b[" not in result.stderr  # no colour codes when stderr is not a terminal


def test_subprocess_error_has_no_traceback(tmp_path: Path):
    result = subprocess.run(
        ["transduce", "score", str(tmp_path / "missing"), str(tmp_path / "missing2")],
        capture_output=True, text=True, env=transduce_env(),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_score_metric_options_need_their_metric(run, g2p):
    hyp, ref = g2p
    one_line_error(
        run("score", hyp, ref, "-m", "wer", "--per-average", "word"), "--per-average", "per"
    )
    one_line_error(run("score", hyp, ref, "--bleu-option", "tokenize=none"), "--metric bleu")


def test_usage_errors_before_the_command_are_one_line(run):
    one_line_error(run("--nope"), "No such option: --nope", "see: transduce --help")


def test_reports_never_replace_a_manifest(run, g2p, tmp_path: Path, data: Path):
    hyp, ref = g2p
    out = tmp_path / "p"
    assert run("-q", "prepare", "cmudict", data / "cmudict-sample.dict", "-o", out).exit_code == 0
    before = (out / "manifest.json").read_bytes()
    one_line_error(run("score", hyp, ref, "--per-item", out / "manifest.json"), "prepared dataset")
    assert (out / "manifest.json").read_bytes() == before


def test_recipes_lists_every_shipped_recipe(run):
    from transduce.recipe_loader import shipped_recipes

    result = run("recipes")
    assert result.exit_code == 0 and result.stderr == ""
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [name for name, _ in rows] == shipped_recipes()
    purposes = dict(rows)
    assert purposes["g2p"].startswith("G2P on the CMUdict")
    assert all(purposes.values())


def test_subprocess_recipes_is_pipe_friendly():
    result = subprocess.run(
        "transduce recipes | cut -f1 | grep -x paper/rios2021/transformer-g2p-cmudict-mono",
        shell=True, capture_output=True, text=True, env=transduce_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "paper/rios2021/transformer-g2p-cmudict-mono\n"
