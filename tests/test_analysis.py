"""`analyze-monotonicity`: crossing alignments by hand, the command on a tiny model, and
the heatmaps that the library computes for it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from transduce.analysis import attention_maps, crosses, load_model, read_pairs, write_plots

from .toy import TINY_LSTM, recipe, write_task


def positions(n: int, tags: int = 0) -> torch.Tensor:
    """Counted positions of a source of `tags` tags, <sep>, then n symbols (or n symbols)."""
    if not tags:
        return torch.arange(1, n + 1)
    return torch.cat([torch.zeros(tags + 1, dtype=torch.long), torch.arange(1, n + 1)])


def test_crossing_edges_by_hand():
    diagonal = torch.eye(3)[None]  # 1 x T x S
    assert not crosses(diagonal, positions(3), 0.1).item()
    swapped = torch.tensor([[[0.0, 1, 0], [1, 0, 0], [0, 0, 1]]])  # steps 1, 2 cross
    assert crosses(swapped, positions(3), 0.1).item()
    # the crossing edge has weight 0.05: below the threshold it does not count
    faint = torch.tensor([[[0.0, 0.95, 0.05], [0.05, 0.0, 0.95], [0, 0, 1]]])
    assert not crosses(faint, positions(3), 0.1).item()
    assert crosses(faint, positions(3), 0.01).item()
    # staying on a position, and spreading over two, is monotone
    spread = torch.tensor([[[0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1], [0, 0, 1]]])
    assert not crosses(spread, positions(3), 0.1).item()
    # two mechanisms at once
    both = torch.cat([diagonal, swapped])
    assert crosses(both, positions(3), 0.1).tolist() == [False, True]


def test_tags_left_of_the_separator_take_no_part():
    # source: tag <sep> l1 l2; step 2 puts its weight on the tag: left out
    matrix = torch.tensor([[[0.0, 0, 1, 0], [0.6, 0, 0, 0.4], [0, 0, 0, 1]]])
    assert not crosses(matrix, positions(2, tags=1), 0.1).item()
    matrix[0, 0] = torch.tensor([0.0, 0, 0, 1])  # step 1 at l2,
    matrix[0, 1] = torch.tensor([0.6, 0, 0.4, 0])  # step 2 back at l1 (0.4 -> 1.0): crossing
    assert crosses(matrix, positions(2, tags=1), 0.1).item()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny trained run directory and its prepared data."""
    from transduce import config as configuration
    from transduce.training import Trainer

    root = tmp_path_factory.mktemp("analyze")
    task = write_task(root, "copy", n=200)
    data = recipe(task, TINY_LSTM, max_updates=40, validate_every=20)
    Trainer(configuration.parse(data), root / "run").run()
    return root / "run", task


def test_the_command_reports_tables_json_and_a_file(run, trained, tmp_path: Path):
    trained, prepared = trained
    data = prepared / "test.tsv"
    examples = len(data.read_text(encoding="utf-8").splitlines())
    result = run("analyze-monotonicity", trained, data)
    assert result.exit_code == 0, result.output
    assert "%mono" in result.stderr and "crossing" in result.stderr
    assert "scale of the paper's tables" in result.stderr
    report = tmp_path / "report.json"
    shown = run("analyze-monotonicity", trained, data, "--decoded", "--json", "--report", report)
    assert shown.exit_code == 0, shown.output
    printed = json.loads(shown.stdout)
    assert printed == json.loads(report.read_text(encoding="utf-8"))
    assert printed["mode"] == "decoded" and printed["examples"] == examples
    assert set(printed["monotonicity"]) == {"0.0", "0.5", "1.0"}
    counts = printed["crossings"]["attention"]
    assert sum(counts.values()) == examples
    correct = counts["monotonic_correct"] + counts["crossing_correct"]
    assert correct == pytest.approx(printed["accuracy"] * examples / 100)
    for delta, stats in printed["monotonicity"].items():
        assert 0 <= stats["overall"]["mono"] <= 100, delta
        assert 0 <= stats["overall"]["mono_authors"] <= 100, delta  # the authors' scale
        assert stats["overall"]["loss_authors"] >= 0, delta
    # a prepared directory reads its test split
    directory = run("analyze-monotonicity", trained, prepared, "--json")
    assert json.loads(directory.stdout)["examples"] == examples


def test_plots_or_terminal_heatmaps(run, trained, tmp_path: Path):
    trained, prepared = trained
    data = prepared / "test.tsv"
    result = run("analyze-monotonicity", trained, data, "--plot", tmp_path / "p", "--lines", "1,2")
    assert result.exit_code == 0, result.output
    if importlib.util.find_spec("matplotlib") is None:
        assert "plots need matplotlib" in result.stderr and "line 2, attention" in result.stderr
        return
    magic = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}
    for name in ("line1", "line2", "monotonicity"):
        assert (tmp_path / "p" / f"{name}.png").read_bytes().startswith(magic["png"])
    for fmt in ("pdf", "svg"):
        args = ["--plot", tmp_path / fmt, "--lines", "2", "--format", fmt]
        result = run("analyze-monotonicity", trained, data, *args)
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in (tmp_path / fmt).iterdir()) == [
            f"line2.{fmt}",
            f"monotonicity.{fmt}",
        ]
        assert (tmp_path / fmt / f"line2.{fmt}").read_bytes().startswith(magic[fmt])
    result = run("analyze-monotonicity", trained, data, "--plot", tmp_path, "--format", "jpg")
    assert result.exit_code == 2 and "'jpg' is not one of" in result.output


def test_a_panel_per_head_a_row_per_layer():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transduce.analysis import AttentionMap, _curve, _heatmaps, mechanism_grid
    from transduce.models.selfattention import head_names

    names = head_names("decoder", 3, 4)
    assert mechanism_grid(names) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert mechanism_grid(["attention"]) == [[0]]
    assert mechanism_grid(["a", "b.head.1"]) == [[0, 1]]  # not all per layer: one row
    item = AttentionMap(
        3, torch.rand(12, 5, 7).softmax(-1), list("abcdefg"), ["A", "B", "C", "D", "</s>"]
    )
    figure = _heatmaps(plt, item, names, forced=True)
    panels = [a for a in figure.axes if a.get_visible() and a.get_images()]
    assert len(panels) == 12 and len(figure.axes) == 13  # and one colorbar for all
    assert [a.get_title() for a in panels[:4]] == ["head 1", "head 2", "head 3", "head 4"]
    width, height = figure.get_size_inches()
    assert width < 4 * height  # a grid, not one strip of 12 panels
    plt.close(figure)
    history = [
        (u, {"delta": 0.0, "overall": {"mono": 50.0},
             "mechanisms": {n: {"mono": 50.0 + k} for k, n in enumerate(names)}})
        for u in (100, 200)
    ]  # fmt: skip
    figure = _curve(plt, history)
    lines = figure.axes[0].get_lines()
    assert len(lines) == 13 and lines[-1].get_label() == "mean"
    styles = {(str(line.get_color()), line.get_linestyle()) for line in lines}
    assert len(styles) == 13  # no two curves look alike
    legend = figure.axes[0].get_legend()
    figure.canvas.draw()
    box = legend.get_window_extent()
    assert box.x0 >= figure.axes[0].get_window_extent().x1  # outside the data, on the right
    plt.close(figure)


def test_bad_input_is_one_line_and_exit_2(run, trained, tmp_path: Path):
    trained, prepared = trained
    data = prepared / "test.tsv"
    result = run("analyze-monotonicity", trained, data, "--plot", tmp_path, "--lines", "999")
    assert result.exit_code == 2 and "--lines: line 999 is not in the data" in result.output
    unlabelled = tmp_path / "sources.tsv"
    unlabelled.write_text("a b\t\n", encoding="utf-8")
    result = run("analyze-monotonicity", trained, unlabelled)
    assert result.exit_code == 2 and "without a reference" in result.output


def test_the_library_runs_the_model_for_the_heatmaps(trained, tmp_path: Path, monkeypatch):
    run_dir, prepared = trained
    transducer = load_model(str(run_dir))
    pairs = read_pairs(transducer, prepared, "test")
    names = transducer.model.attention_names
    for forced in (True, False):
        maps = attention_maps(transducer, pairs, [2, 1], forced)
        assert [m.line for m in maps] == [2, 1]
        for item, (source, reference) in zip(maps, [pairs[1], pairs[0]]):
            assert item.rows[-1] == "</s>" and len(item.columns) == len(source)
            if forced:
                assert len(item.rows) == len(reference) + 1
            assert item.attention.shape == (len(names), len(item.rows), len(source))  # K x T x S
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert not write_plots(maps, names, tmp_path / "plots", run_dir)
    assert not (tmp_path / "plots").exists()
