"""`transduce export`: the TorchScript file decodes as `transduce decode` does, in a Python
that cannot import transduce, for every family (LSTM with copy and input feeding, hard
monotonic attention with copy, transformers with both position schemes, the tagger) and
every kind of input line (characters, lemma<TAB>tags, lower-cased words, sentences of
words, unknown characters that a model with copy copies, a source put in NFD)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from transduce import checkpoint, decoding
from transduce import config as configuration
from transduce import export as exporting
from transduce.data.prepare import PrepareRequest, prepare
from transduce.training import Trainer

from .conftest import DATA as data
from .conftest import transduce_env
from .test_tagger import TINY as TINY_TAGGER
from .test_tagger import write_conllu
from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, toy_threads, write_task

# Odd lines among the real ones: blank, Unicode spaces around, unknown and multi-byte
# characters (which a model with copy copies: an unknown space inside as itself), an empty
# line
ODD = ["", "  ab\u00a0", "xé中g", "\u3000", "gfedcba", "a\u2003bQ"]
# lines of symbols that no vocabulary of the toy task has (an inner space among them)
UNSEEN = ["QQ\u2003Z", "中"]


def _train(data: dict, out: Path) -> Path:
    Trainer(configuration.parse(data), out).run()
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Each model with the raw input lines to decode."""
    root = tmp_path_factory.mktemp("export")
    toy = write_task(root, "reverse", n=600)
    words = [
        line.split("\t")[0].replace(" ", "")
        for line in (toy / "test.tsv").read_text(encoding="utf-8").splitlines()
    ]
    chars = words[:20] + ODD + words[20:]
    train = {"max_updates": 300, "validate_every": 100, "precision": "fp32"}
    made: dict[str, tuple[Path, list[str]]] = {}
    families = {
        "lstm-copy-feeding": {**TINY_LSTM, "copy": True, "input_feeding": True},
        "hard-monotonic": {**TINY_LSTM, "name": "hard", "monotonic": True},
        "hard-monotonic-copy": {**TINY_LSTM, "name": "hard", "monotonic": True, "copy": True},
        "transformer": TINY_TRANSFORMER,
    }
    for name, model in families.items():
        made[name] = (_train(recipe(toy, model, **train), root / name), chars)
    # the copy model with its gate shut (p_gen = 0): it can only copy, so its outputs of
    # symbols it has never seen must be those symbols (`test_unknown_symbols_are_copied`)
    shut = root / "lstm-copy-shut"
    shutil.copytree(made["lstm-copy-feeding"][0], shut)
    payload = checkpoint.load(shut / "best.pt")
    payload["model"]["gate.state.bias"].fill_(-60.0)
    checkpoint.save(shut / "best.pt", payload)
    made["lstm-copy-shut"] = (shut, [*chars, *UNSEEN])
    # the same model as one whose source text was put in NFD (tsv's source_normalize):
    # raw input is decomposed before it is cut, here as in `transduce decode`
    nfd = root / "lstm-copy-nfd"
    shutil.copytree(made["lstm-copy-feeding"][0], nfd)
    payload = checkpoint.load(nfd / "best.pt")
    payload["sides"]["source"]["normalize"] = "nfd"
    checkpoint.save(nfd / "best.pt", payload)
    made["lstm-copy-nfd"] = (nfd, [*chars, "한국어", "ge\u0301\u0323a", "g\u1e0b\u0323c", "Åbé"])

    inflection = root / "inflection"
    prepare(
        PrepareRequest(
            "sigmorphon",
            inflection,
            inputs={
                "train": [data / "english-train-sample"],
                "test": [data / "english-dev-sample"],
            },
            dev_ratio=0.2,
        )
    )
    lines = [
        "\t".join(line.split("\t")[0::2])
        for line in (data / "english-dev-sample").read_text(encoding="utf-8").splitlines()
    ]
    separator = {**TINY_TRANSFORMER, "position_scheme": "separator"}
    made["transformer-separator"] = (
        _train(recipe(inflection, separator, max_updates=200), root / "transformer-sep"),
        [*lines, "Aa machen\tV.PTCP;PST", "naïve\t V ; PST "],
    )
    # the tag transducer: the tags as a vector at every decoder step, the monotone
    # alignment over <sep> and the lemma (`hard`'s `tag_input`, `attend_tags: false`)
    transducer = {
        **TINY_LSTM,
        "name": "hard",
        "monotonic": True,
        "copy": True,
        "tag_input": True,
        "attend_tags": False,
    }
    made["hard-tag-transducer"] = (
        _train(recipe(inflection, transducer, max_updates=200), root / "hard-tags"),
        [*lines, "Aa machen\tV.PTCP;PST"],
    )
    # a copy model (its target vocabulary holds the tags and <sep>, to copy them) made to
    # write the tag [V] above all, then <sep>, then e: no output may hold the first two
    # (`transduce.decoding.never_written`; `test_no_output_holds_a_tag_or_sep`)
    tags = root / "lstm-copy-tags"
    _train(recipe(inflection, {**TINY_LSTM, "copy": True}, max_updates=100), tags)
    payload = checkpoint.load(tags / "best.pt")
    payload["model"]["gate.state.bias"].fill_(60.0)  # p_gen = 1
    bias = payload["model"]["output.bias"]
    bias[payload["vocab"]["target"].index("[V]")] += 50.0
    bias[payload["vocab"]["target"].index("<sep>")] += 49.0
    bias[payload["vocab"]["target"].index("e")] += 48.0
    checkpoint.save(tags / "best.pt", payload)
    made["lstm-copy-tags"] = (tags, lines)

    cmudict = root / "cmudict"
    prepare(PrepareRequest("cmudict", cmudict, inputs={"train": [data / "cmudict-sample.dict"]}))
    spelled = [
        line.split(" ")[0].upper()
        for line in (data / "cmudict-sample.dict").read_text(encoding="utf-8").splitlines()
    ]
    made["lstm-lowercase"] = (
        _train(
            recipe(cmudict, TINY_LSTM, max_updates=300, max_epochs=1000, validate_every=300),
            root / "lstm-lowercase",
        ),
        [*spelled, "ÀBÇ", "ΟΔΟΣ", "Straße", "İSTANBUL"],
    )

    for split, n, seed in (("train", 200, 0), ("dev", 20, 1), ("test", 30, 2)):
        write_conllu(root / f"{split}.conllu", n, seed)
    tagger = {
        "data": {
            "format": "conllu",
            **{s: [str(root / f"{s}.conllu")] for s in ("train", "dev", "test")},
        },
        "model": {**TINY_TAGGER, "max_length": 5},  # longer sentences are tagged in pieces
        "train": {
            "batch_size": 16,
            "max_updates": 60,
            "select_on": "tagacc",
            "threads": toy_threads(),
        },
        "decode": {"batch_size": 8},
    }
    sentences = [
        " ".join(
            line.split("\t")[1] for line in block.splitlines() if line and not line.startswith("#")
        )
        for block in (root / "test.conllu").read_text(encoding="utf-8").split("\n\n")
        if block.strip()
    ]
    made["tagger"] = (_train(tagger, root / "tagger"), [*sentences, "", "unseen words here"])
    return made


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exported")
    files = {}
    for name, (run_dir, _) in models.items():
        files[name] = root / f"{name}.pt"
        exporting.export(run_dir, files[name])
    return files


def _decode(run, run_dir: Path, lines: list[str], path: Path) -> list[str]:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = run("decode", run_dir, path)
    assert result.exit_code == 0, result.output
    return result.stdout.split("\n")[: len(lines)]


LOADER = """
import json, sys
sys.modules["transduce"] = None  # importing transduce fails here
import torch
torch.set_num_threads(1)  # beside the suite's other processes
jobs = json.load(open(sys.argv[1], encoding="utf-8"))
out = {}
for name, job in jobs.items():
    model = torch.jit.load(job["file"])
    out[name] = [model.transduce(job["lines"]), model.transduce(job["lines"], 3)]
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))
"""


def _without_transduce(jobs: dict, tmp_path: Path) -> dict:
    """Each job's exports decoded by `LOADER` in a subprocess where `import transduce` fails:
    name -> [outputs in default batches, outputs in batches of 3]."""
    (tmp_path / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", LOADER, str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
        cwd=tmp_path,
        env=transduce_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))


def test_every_family_decodes_as_decode_does_without_transduce(models, exported, run, tmp_path):
    """Greedy outputs identical to `transduce decode` (its default batches, and batches of
    3), in a subprocess where `import transduce` fails."""
    jobs = {
        name: {"file": str(exported[name]), "lines": lines} for name, (_, lines) in models.items()
    }
    found = _without_transduce(jobs, tmp_path)
    for name, (run_dir, lines) in models.items():
        expected = _decode(run, run_dir, lines, tmp_path / f"{name}.txt")
        default, small = found[name]
        assert default == expected, name
        assert small == expected, name
        assert sum(1 for e in expected if e) >= len(lines) // 2, name  # real outputs


def test_unknown_symbols_are_copied(models, exported, run, tmp_path):
    """A model that can only copy writes the symbols it has never seen as they are (its
    outputs are symbols separated by spaces; an inner space is its escape), in the exported
    file as with `transduce decode`."""
    run_dir = models["lstm-copy-shut"][0]
    found = _without_transduce(
        {"shut": {"file": str(exported["lstm-copy-shut"]), "lines": UNSEEN}}, tmp_path
    )["shut"][0]
    expected = _decode(run, run_dir, UNSEEN, tmp_path / "unseen.txt")
    assert found == expected
    for line, output in zip(UNSEEN, found, strict=True):
        symbols = {"<U+2003>" if c == "\u2003" else c for c in line}
        assert output and set(output.split(" ")) <= symbols, (line, output)
    # the text of a copied symbol, as `tokens.detokenize` writes it: a character target
    # unescapes an inner space, a target of symbols keeps the escape
    text = exporting.Seq2SeqExport._text
    for unescapes, joiner, written in ((True, "", "a\u2003Q"), (False, " ", "a <U+2003> Q")):
        spec = SimpleNamespace(
            target_text=["<pad>", "<s>", "</s>", "<unk>", "<sep>", "a"],
            unescapes=unescapes,
            unspace={"<U+2003>": "\u2003", "<space>": " "},
            joiner=joiner,
        )
        assert text(spec, [5, 6, 7], ["<U+2003>", "Q"]) == written


def test_no_output_holds_a_tag_or_sep(models, exported, run, tmp_path, monkeypatch):
    """A copy model that would write the tag [V] and <sep> above all: no output holds a
    tag or <sep>, in the exported file as with `transduce decode`; with the rule switched
    off, `transduce decode` writes them in every output (so the rule keeps them out)."""
    run_dir, lines = models["lstm-copy-tags"]
    found = _without_transduce(
        {"tags": {"file": str(exported["lstm-copy-tags"]), "lines": lines}}, tmp_path
    )["tags"][0]
    expected = _decode(run, run_dir, lines, tmp_path / "tags.txt")
    assert found == expected
    tag = re.compile(r"<sep>|\[[^\]]+\]")
    assert all(output.startswith("e") and not tag.search(output) for output in expected), expected
    monkeypatch.setattr(
        decoding,
        "never_written",
        lambda source, index, width: torch.zeros(len(source), width, dtype=torch.bool),
    )
    unruled = _decode(run, run_dir, lines, tmp_path / "unruled.txt")
    assert all("[V]" in output for output in unruled), unruled


def test_the_text_functions_cut_as_python_does():
    """Characters, whitespace split and strip, and lower-casing, as TorchScript runs them."""
    chars = torch.jit.script(exporting.utf8_chars)
    split = torch.jit.script(exporting.split_space)
    strip = torch.jit.script(exporting.strip_space)
    lower = torch.jit.script(exporting.lower_chars)
    space = exporting._whitespace()
    table, cased = exporting._lower()
    samples = [
        "abc",
        "  a\u00a0b\u2003c\u3000d\te\n",
        "é中😀 x\u0085y",
        "ΟΔΟΣ ΟΔΟΣ. Σ",
        "İSTANBUL Straße ǅ",
        "\u200b\ufeffzero-width",
        "",
    ]
    for text in samples:
        assert chars(text) == list(text)
        assert split(chars(text), space) == text.split()
        assert strip(text, space) == text.strip()
        assert lower(chars(text), table, cased) == list(text.lower())  # İ: two symbols
    assert len(space) == sum(1 for p in range(0x110000) if chr(p).isspace())


def test_the_file_says_what_it_holds(models, exported):
    files = {exporting.METADATA: ""}
    torch.jit.load(str(exported["transformer"]), _extra_files=files)
    metadata = json.loads(files[exporting.METADATA])
    assert metadata["model"] == "transformer"
    assert metadata["search"] == "greedy"
    assert metadata["checkpoint"].endswith("best.pt")


def test_refusals_are_one_line_and_keep_what_was_there(models, run, tmp_path):
    run_dir = models["transformer"][0]
    existing = tmp_path / "model.pt"
    existing.write_bytes(b"kept")
    result = run("export", run_dir, "--out", existing, "--format", "onnx")
    assert result.exit_code == 2
    assert "onnx" in result.output and len(result.output.strip().splitlines()) == 1
    assert existing.read_bytes() == b"kept"
    result = run("export", run_dir, "--out", tmp_path)
    assert result.exit_code == 2 and "a folder" in result.output
    result = run("export", tmp_path / "nothing", "--out", tmp_path / "x.pt")
    assert result.exit_code == 2 and not (tmp_path / "x.pt").exists()
    result = run("export", run_dir, "--out", run_dir / "best.pt")
    assert result.exit_code == 2
    result = run("export", run_dir, "--out", existing)
    assert result.exit_code == 0, result.output
    assert torch.jit.load(str(existing)).transduce(["abc"])[0] != ""


def test_subword_models_are_refused():
    """A BPE segmenter is not TorchScript: refused before anything is traced."""

    from transduce.data.sides import Sides

    subwords = SimpleNamespace(
        members=[None],
        sides=Sides.from_manifest(
            {"source": {"unit": "subword", "library": "subword-nmt"}, "target": {"unit": "word"}}
        ),
    )
    with pytest.raises(exporting.ExportError, match="subword"):
        exporting.build(subwords)


def test_a_composed_source_is_refused():
    """The export writes decompositions only: a model whose source was put in NFC (tsv's
    `source_normalize`) is refused in one line; NFD, NFKD and hangul are written (below)."""
    from transduce.data.sides import Sides

    for form, refused in (
        ("nfc", True),
        ("nfkc", True),
        ("nfd", False),
        ("nfkd", False),
        ("hangul", False),
    ):
        sides = Sides.from_manifest(
            {"source": {"unit": "char", "normalize": form}, "target": {"unit": "symbol"}}
        )
        transducer = SimpleNamespace(sides=sides)
        if refused:
            with pytest.raises(exporting.ExportError, match=f"Unicode {form.upper()}") as error:
                exporting._refuse_unless_exportable(transducer)
            assert "\n" not in str(error.value)
        else:
            exporting._refuse_unless_exportable(transducer)


def test_the_decomposition_is_pythons_normal_form():
    """`decompose_chars` as TorchScript runs it equals `unicodedata.normalize` (NFD and
    NFKD; for hangul, Unicode's arithmetic decomposition of the syllables alone) on Hangul,
    accents, marks out of canonical order, compatibility characters and random text, and
    `Side.cut` (decode's) cuts to the same characters."""
    import unicodedata

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from transduce.data import tokens
    from transduce.data.sides import Side

    chars = torch.jit.script(exporting.utf8_chars)
    decompose = torch.jit.script(exporting.decompose_chars)
    tables = {form: exporting._decompositions(form) for form in ("nfd", "nfkd", "hangul")}
    assert len(tables["nfd"][0]) > 11172  # every Hangul syllable, and more
    samples = [
        "한국어 읽기",
        "é è ñ Å",
        "e\u0301\u0323 \u1e0b\u0323 q\u0307\u0323",  # marks whose order NFD changes
        "ﬁ ² Ⅻ ｶ",  # compatibility forms: NFKD only
        "\u0344\u0f73",  # decompositions that start with a mark
        "",
    ]

    def agree(text: str) -> None:
        for form, (table, classes) in tables.items():
            expected = (
                unicodedata.normalize(form.upper(), text) if form != "hangul" else text_hangul(text)
            )
            assert decompose(chars(text), table, classes) == list(expected), (form, text)
            assert Side.of("char", normalize=form).cut(text) == tokens.chars(expected)

    def text_hangul(text: str) -> str:  # by hand: Unicode's arithmetic (sec. 3.12)
        out = []
        for c in text:
            index = ord(c) - 0xAC00
            if 0 <= index < 11172:
                out += [chr(0x1100 + index // 588), chr(0x1161 + index % 588 // 28)]
                out += [chr(0x11A7 + index % 28)] if index % 28 else []
            else:
                out.append(c)
        return "".join(out)

    assert text_hangul("한é") == "\u1112\u1161\u11abé"
    for text in samples:
        agree(text)

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=12))
    def random_text(text):
        agree(text)

    random_text()


@pytest.mark.slow
def test_nettalk_exports_decode_the_whole_test_split(shared, run, tmp_path):
    """The issue's check on real data: an LSTM, a hard-attention model and a transformer
    trained 300 updates on NETtalk (Wu et al.'s split); each export decodes the 2,002 test
    words to exactly what `transduce decode` prints, in a Python without transduce."""
    wu = shared / "g2p-wu2018-cmudict-nettalk"
    prepared = tmp_path / "nettalk"
    prepare(
        PrepareRequest(
            "tsv",
            prepared,
            inputs={s: [wu / f"NETtalk.{s}"] for s in ("train", "dev", "test")},
        )
    )
    words = [
        line.split("\t")[0].replace(" ", "")
        for line in (prepared / "test.tsv").read_text(encoding="utf-8").splitlines()
    ]
    small = {"embedding_dim": 64, "encoder_size": 128, "decoder_size": 128}
    families = {
        "lstm": {**TINY_LSTM, **small},
        "hard": {**TINY_LSTM, **small, "name": "hard"},
        "transformer": {**TINY_TRANSFORMER, "d_model": 128, "feedforward": 256, "heads": 4},
    }
    jobs = {}
    for name, model in families.items():
        train = {"max_updates": 300, "validate_every": 300, "batch_size": 32, "precision": "fp32"}
        if name == "transformer":  # the toy recipe's 0.005 is too fast for it on real data
            train["optimizer"] = {"lr": 0.001}
        run_dir = _train(recipe(prepared, model, **train), tmp_path / name)
        exporting.export(run_dir, tmp_path / f"{name}.pt")
        jobs[name] = {"file": str(tmp_path / f"{name}.pt"), "lines": words}
    found = _without_transduce(jobs, tmp_path)
    for name in families:
        expected = _decode(run, tmp_path / name, words, tmp_path / f"{name}.txt")
        assert found[name][0] == expected, name
        assert found[name][1] == expected, name
        assert len(words) > 1900 and sum(1 for e in expected if e) > 1900, name
