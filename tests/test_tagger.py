"""The self-attention tagger (Dufter et al. 2020), its training and decoding through the
CLI, and tagging accuracy over all, OOV and ambiguous tokens (§2.6)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml

from transduce.data.prepare import PrepareRequest, prepare
from transduce.errors import ConfigError, DataError
from transduce.metrics.corpus import Corpus
from transduce.metrics.tagging import Lexicon, TaggingAccuracy
from transduce.models import build_model
from transduce.models.tagger import SanTaggerConfig
from transduce.tasks.tagging import char_vocab, encode_chars, tag_batch, tag_sentences, windows

from .toy import toy_threads

NOUNS = ["cat", "dog", "bird", "fish", "cow"]
VERBS = ["sees", "likes", "eats"]


def toy_sentence(rng: random.Random) -> list[tuple[str, str]]:
    """DET NOUN VERB DET NOUN, where "run" is a NOUN after "the" and a VERB after a noun:
    only the context tells its tag."""
    words = []
    for slot in ("det", "noun", "verb", "det", "noun"):
        if slot == "det":
            words.append(("the", "DET"))
        elif slot == "noun":
            words.append((rng.choice([*NOUNS, "run"]), "NOUN"))
        else:
            words.append((rng.choice([*VERBS, "run"]), "VERB"))
    return words[: rng.randint(3, 5)]


def write_conllu(path: Path, n: int, seed: int) -> Path:
    rng = random.Random(seed)
    blocks = []
    for k in range(n):
        lines = [f"# sent_id = {k}"]
        for i, (word, tag) in enumerate(toy_sentence(rng), 1):
            lines.append(f"{i}\t{word}\t{word}\t{tag}\t_\t_\t0\troot\t_\t_")
        blocks.append("\n".join(lines) + "\n")
    path.write_text("\n".join(blocks) + "\n", encoding="utf-8")
    return path


TINY = {
    "name": "san_tagger",
    "embedding_dim": 16,
    "position_dim": 8,
    "char_embedding_dim": 8,
    "char_filters": 8,
    "layers": 2,
    "heads": 2,
    "dropout": 0.0,
    "max_length": 8,
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """Raw CoNLL-U files of the toy task (train, dev, test)."""
    root = tmp_path_factory.mktemp("toy-ud")
    for split, n, seed in (("train", 300, 0), ("dev", 40, 1), ("test", 40, 2)):
        write_conllu(root / f"{split}.conllu", n, seed)
    return root


def recipe(toy: Path, **model) -> dict:
    return {
        "data": {
            "format": "conllu",
            **{split: [str(toy / f"{split}.conllu")] for split in ("train", "dev", "test")},
        },
        "model": {**TINY, **model},
        "train": {
            "batch_size": 16,
            "max_epochs": 6,
            "select_on": "tagacc",
            "optimizer": {"lr": 0.01},
            "threads": toy_threads(),
        },
    }


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# ------------------------------------------------------------------------ tagacc


def test_oov_and_ambiguous_counts_by_hand():
    train = [(["the", "run", "is", "long"], ["DET", "NOUN", "AUX", "ADJ"]),
             (["they", "run"], ["PRON", "VERB"])]  # fmt: skip
    lexicon = Lexicon.build(train)
    assert lexicon.is_ambiguous("run") and not lexicon.is_ambiguous("the")
    assert lexicon.is_oov("fast") and not lexicon.is_oov("run")
    words = [["they", "run", "fast"], ["the", "long", "run", "ends"]]
    refs = ["PRON VERB ADV", "DET ADJ NOUN VERB"]
    hyps = ["PRON NOUN ADV", "DET ADJ NOUN NOUN"]
    # tokens 7, correct 5; OOV: fast (right), ends (wrong); ambiguous: run (wrong), run (right)
    corpus = Corpus(hyps, refs, "symbol", sources=words)
    scores = {
        s: TaggingAccuracy(lexicon=lexicon, subset=s).score(corpus).value
        for s in ("all", "oov", "ambiguous")
    }
    assert scores == {"all": 100 * 5 / 7, "oov": 50.0, "ambiguous": 50.0}
    assert TaggingAccuracy().corpus_score(["A B"], ["A C"]).value == 50.0
    with pytest.raises(ConfigError, match="--train"):
        TaggingAccuracy(subset="oov")
    with pytest.raises(DataError, match="a tag per word"):
        TaggingAccuracy().corpus_score(["A B C"], ["A C"])


def test_score_cli_tagacc(run, tmp_path: Path, toy: Path):
    hyps = tmp_path / "hyp.txt"
    from transduce.scoring import read_tagged

    sentences = read_tagged(str(toy / "test.conllu"))
    lines = [" ".join(tags) for _, tags in sentences]
    lines[0] = " ".join("X" for _ in sentences[0][1])  # every tag of the first sentence wrong
    hyps.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tokens = sum(len(tags) for _, tags in sentences)
    result = run(
        "score", hyps, toy / "test.conllu", "--metric", "tagacc",
        "--train", toy / "train.conllu", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["scores"]
    assert set(scores) == {"tagacc", "tagacc_oov", "tagacc_ambiguous"}
    assert scores["tagacc"]["value"] == pytest.approx(
        100 * (tokens - len(sentences[0][1])) / tokens
    )
    assert scores["tagacc_oov"]["value"] == 0.0  # the toy test has no unseen word
    run_on_tsv = run("score", hyps, toy / "test.conllu", "--metric", "tagacc")
    assert run_on_tsv.exit_code == 0 and "tagacc_oov" not in run_on_tsv.output
    bad = tmp_path / "bad.txt"
    bad.write_text("DET\n" * len(lines), encoding="utf-8")
    result = run("score", bad, toy / "test.conllu", "--metric", "tagacc")
    assert result.exit_code == 2 and "a tag per word" in result.output
    assert f"{bad}:1: " in result.output  # the hypothesis file and line
    result = run("score", hyps, toy / "test.conllu", "--metric", "wer", "--train", hyps)
    assert result.exit_code == 2 and "--train applies to --metric tagacc" in result.output


def test_tagacc_compares_whole_tags_and_reads_words_as_written(run, tmp_path: Path):
    # references of mostly one tag would make --unit auto guess characters
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("NOUN\nNOUN\nDET NOUN\n", encoding="utf-8")
    ref.write_text("NOUN\nVERB\nDET NOUN\n", encoding="utf-8")
    result = run("score", hyp, ref, "--metric", "tagacc", "--json")
    assert json.loads(result.stdout)["scores"]["tagacc"]["value"] == 75.0
    assert "unit:symbol" in json.loads(result.stdout)["scores"]["tagacc"]["signature"]
    # a word with a space stays one word (escaped, as prepare writes it)
    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    train.write_text("chủ<space>tịch nói\tNOUN VERB\n", encoding="utf-8")
    test.write_text("chủ<space>tịch mới nói\tNOUN ADJ VERB\n", encoding="utf-8")
    hyp.write_text("NOUN NOUN VERB\n", encoding="utf-8")
    result = run(
        "score", hyp, test, "--ref-col", "2", "--metric", "tagacc", "--train", train, "--json"
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["scores"]
    assert scores["tagacc_oov"]["value"] == 0.0  # mới: the one unseen word, wrong
    assert scores["tagacc"]["value"] == pytest.approx(200 / 3)


# ------------------------------------------------------------------------ model


def test_character_table_and_shapes():
    chars = char_vocab([["the", "cat"], ["a"]])
    encoded = [encode_chars(s, chars, 2) for s in (["the", "cat"], ["zz"])]
    assert encoded[1] == [[3, 3]]  # unknown characters, cut to 2
    batch = tag_batch([[5, 6], [7]], encoded, [[5, 6], [7]])
    assert batch.chars.shape == (2, 2, 2) and batch.chars[1, 1].tolist() == [0, 0]
    model = build_model(
        "san_tagger",
        SanTaggerConfig(**{k: v for k, v in TINY.items() if k != "name"}),
        10,
        9,
        chars=len(chars),
    )
    output = model(batch)
    assert output.log_probs.shape == (2, 2, 9)
    tags = model.tag(batch)
    assert tags[1, 1] == 0 and (tags[0] >= 5).all()  # padding; never a reserved symbol
    assert model.self_attention(batch).shape == (2, 4, 2, 2)


def test_stacked_character_convolutions_by_hand():
    """`char_layers: 3` (the authors' code) stacks three convolutions: the word vector is
    max(relu(conv3(relu(conv2(relu(conv1(e))) * m)) * m) * m) computed here by hand, and
    does not depend on how long the other words of the batch are (padded characters are
    zeros after each layer)."""
    from transduce.models.tagger import CharCNN

    torch.manual_seed(0)
    cnn = CharCNN(12, 4, 6, 5, layers=3)
    assert len(cnn.more) == 2 and sum(p.numel() for p in cnn.parameters()) == (
        12 * 4 + (4 * 6 * 5 + 6) + 2 * (6 * 6 * 5 + 6)
    )
    word = torch.tensor([[[5, 6, 7]]])  # one word of 3 characters
    padded = torch.tensor([[[5, 6, 7, 0, 0, 0, 0], [8, 9, 10, 11, 5, 6, 7]]])
    alone, beside = cnn(word)[0, 0], cnn(padded)[0, 0]
    torch.testing.assert_close(alone, beside)
    x = cnn.embedding(word[0]).transpose(1, 2)
    h = torch.relu(cnn.conv(x))
    for conv in cnn.more:
        h = torch.relu(conv(h))
    torch.testing.assert_close(alone, h.amax(dim=-1)[0])  # no padding: no mask needed
    one = CharCNN(12, 4, 6, 5, layers=1)
    assert len(one.more) == 0
    assert SanTaggerConfig(char_layers=0).check() == ["char_layers: must be at least 1"]


def test_word_vectors(tmp_path: Path):
    config = SanTaggerConfig(
        **{**{k: v for k, v in TINY.items() if k != "name"}, "embedding_dim": 3}
    )
    model = build_model("san_tagger", config, 7, 9, chars=6)
    vectors = tmp_path / "vectors.vec"
    vectors.write_text("3 3\ncat 1 2 3\nzebra 4 5 6\ndog 0.5 0 -1\n", encoding="utf-8")
    symbols = ["<pad>", "<s>", "</s>", "<unk>", "<sep>", "cat", "dog"]
    assert model.load_word_vectors(vectors, symbols) == 2
    assert model.embedding.weight[5].tolist() == [1.0, 2.0, 3.0]
    assert model.embedding.weight[6].tolist() == [0.5, 0.0, -1.0]
    vectors.write_text("cat 1 2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vectors.vec:1: .*found 2 numbers"):
        model.load_word_vectors(vectors, symbols)


# ------------------------------------------------------------------- through the CLI


@pytest.mark.parametrize(
    "options",
    [
        {"position_mode": "add"},
        {"position_mode": "direct_both", "learnable_temperature": True, "conv_attention": "conv1d"},
        {"position_mode": "concat", "conv_attention": "conv2d", "conv_layers": [2]},
        {"position_mode": "direct_relative"},
    ],
    ids=["pe-add", "p-r-temp-conv", "pe-con-conv2d", "r"],
)
def test_the_tagger_learns_the_toy_task(run, tmp_path: Path, toy: Path, options):
    out = tmp_path / "run"
    result = run(
        "train", "--config", write(tmp_path / "r.yaml", recipe(toy, **options)), "--out", out
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "train.json").read_text())
    assert len(report["history"]) == 6  # dev accuracy after every epoch
    assert set(report["history"][0]["dev_scores"]) == {"tagacc", "tagacc_oov", "tagacc_ambiguous"}
    best = next(h for h in report["history"] if h["update"] == report["best"]["update"])
    assert best["dev_scores"]["tagacc"] >= 90.0, report["history"]
    # "run" is the only ambiguous word: its tag (NOUN after "the", VERB after a noun) needs
    # the context; without it, the best guess gets about 60% of them
    assert best["dev_scores"]["tagacc_ambiguous"] >= 85.0, report["history"]
    # decode: one line of tags per sentence, blank lines kept
    result = run("decode", out, "-", input="the run sees the cat\n\nthe cat run\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == ""
    assert len(lines[0].split()) == 5 and len(lines[2].split()) == 3
    predictions = (out / "test.predictions").read_text().splitlines()
    assert len(predictions) == 40
    score = run(
        "score", out / "test.predictions", toy / "test.conllu", "--metric", "tagacc",
        "--train", toy / "train.conllu", "--json",
    )  # fmt: skip
    assert json.loads(score.stdout)["scores"]["tagacc"]["value"] == pytest.approx(
        report["test"]["tagacc"]
    )


def test_tagger_errors(run, tmp_path: Path, toy: Path):
    def train(data: dict, *extra: str):
        return run(
            "train", "--config", write(tmp_path / "r.yaml", data), "--out", tmp_path / "x", *extra
        )

    data = recipe(toy)
    data["train"]["select_on"] = "acc"
    assert "selected on tagacc" in train(data).output
    data = recipe(toy)
    data["loss"] = {"monotonicity": {"weight": 0.1}}
    assert "no cross-attention" in train(data).output
    from .toy import TINY_LSTM, write_task
    from .toy import recipe as seq2seq_recipe

    seq2seq = seq2seq_recipe(write_task(tmp_path, "copy", n=50), TINY_LSTM, select_on="tagacc")
    assert "tagacc scores taggers" in train(seq2seq).output


def test_windows():
    assert windows(5, None) == [(0, 5)] and windows(5, 5) == [(0, 5)]
    assert windows(7, 3) == [(0, 3), (3, 6), (6, 7)]


def test_long_sentences_are_tagged_in_pieces(run, tmp_path: Path, toy: Path):
    """With t = 3 the 4- and 5-word toy sentences are cut in training, dev and decoding."""
    data = recipe(toy, max_length=3, position_mode="direct_both", conv_attention="conv1d")
    data["train"]["max_epochs"] = 2
    out = tmp_path / "run"
    result = run("train", "--config", write(tmp_path / "r.yaml", data), "--out", out)
    assert result.exit_code == 0, result.output
    result = run("decode", out, "-", input="the cat sees the dog the cow\n")
    assert result.exit_code == 0 and len(result.stdout.split()) == 7
    ensemble = run("decode", out, out / "best.pt", "-", input="the cat\n")  # taggers: no
    assert ensemble.exit_code == 2 and "an ensemble is of sequence-to-sequence" in ensemble.output
    torch.manual_seed(0)
    config = SanTaggerConfig(**{**{k: v for k, v in TINY.items() if k != "name"}, "max_length": 3})
    model = build_model("san_tagger", config, 10, 9, chars=7)
    words = [[5, 6, 7, 8, 9, 5, 6], [7]]
    chars = [[[5]] * 7, [[6]]]
    whole = tag_sentences(model, words, chars, torch.device("cpu"), 4)
    cuts = [slice(0, 3), slice(3, 6), slice(6, 7)]
    pieces = tag_sentences(
        model, [words[0][c] for c in cuts], [chars[0][c] for c in cuts], torch.device("cpu"), 4
    )
    assert whole[0] == pieces[0] + pieces[1] + pieces[2] and len(whole[1]) == 1


def test_resume_and_beam_refusal(run, tmp_path: Path, toy: Path):
    data = recipe(toy)
    data["train"]["max_epochs"] = 1
    out = tmp_path / "run"
    assert run("train", "--config", write(tmp_path / "r.yaml", data), "--out", out).exit_code == 0
    result = run("train", "--out", out, "--resume", "--set", "train.max_epochs=2")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "train.json").read_text())["epochs"] == 2
    result = run("decode", out, "-", "--beam", "2", input="the cat\n")
    assert result.exit_code == 2 and "--beam and --nbest do not apply" in result.output
    result = run("analyze-monotonicity", out, out / "data" / "test.tsv")
    assert result.exit_code == 2 and "no cross-attention" in result.output


def test_vocab_fraction(tmp_path: Path, toy: Path):
    from transduce import config as configuration
    from transduce.training import Trainer

    data = recipe(toy)
    data["data"]["vocab_fraction"] = 0.5
    trainer = Trainer(configuration.parse(data), tmp_path / "run")
    vocab = trainer.task.load_data(trainer.task.prepared_dir(trainer.run_dir)).source_vocab
    assert len(vocab) - 5 == 5  # half of the 10 distinct words: the, 5 nouns, 3 verbs, run
    assert "the" in vocab  # the most frequent are kept


def test_prepare_conllu_feeds_the_tagger(tmp_path: Path, toy: Path):
    out = tmp_path / "prepared"
    prepare(PrepareRequest("conllu", out, inputs={"train": [toy / "train.conllu"]}))
    first = (out / "train.tsv").read_text().splitlines()[0].split("\t")
    assert len(first[0].split()) == len(first[1].split())
