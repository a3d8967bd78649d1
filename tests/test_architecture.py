"""The shape of the package: no import cycles, decoding without the trainer, contracts kept.

The import graph is read from the source (every `import` statement, module-level and
inside functions alike), so a cycle hidden behind a function-local import fails too.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from transduce.models import MODELS, Seq2SeqModel, Tagger
from transduce.tasks import TASKS

PACKAGE = Path(__file__).parent.parent / "transduce"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (`from a import b` counts as a.b when b is
    a module, else as a)."""
    known = modules()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges: set[str | None] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(resolve(a.name) for a in node.names if a.name.startswith("transduce"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                if base.startswith("transduce"):
                    for alias in node.names:
                        full = f"{base}.{alias.name}"
                        edges.add(full if full in known else resolve(base))
        graph[name] = {e for e in edges if e is not None and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_checker_finds_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert reachable(graph, "d") == {"a", "b", "c"}


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "transduce.tasks.seq2seq" in graph and "transduce.cli.app" in graph
    assert cycles(graph) == []


@pytest.mark.parametrize("module", ["transduce.inference", "transduce.cli.decode"])
def test_decoding_does_not_import_the_trainer(module):
    assert "transduce.training" not in reachable(import_graph(), module)


def test_reading_a_recipe_needs_no_torch():
    """`transduce recipes`, config checks and completions stay fast: no torch import."""
    code = "import sys, transduce.config; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_model_fulfils_one_contract_and_has_a_task():
    for name, cls in MODELS.items():
        assert not inspect.isabstract(cls), f"{name} leaves part of its contract unwritten"
        assert issubclass(cls, Seq2SeqModel) != issubclass(cls, Tagger), name
        assert cls.task in TASKS, name
    for name in ("init_state", "step"):  # the tagger has no decoder steps, nor says it has
        assert not hasattr(MODELS["san_tagger"], name)


def test_the_command_line_starts_without_torch(tmp_path):
    """`--version`, `--help`, completion and `score` import no torch (start-up in ~0.3 s
    instead of ~3 s: benchmarks/startup.py); train, decode and analyze import it when run."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\nc d\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from transduce.cli import app\n"
        "for args in (['--version'], ['score', '--help'], ['train', '--help'],\n"
        f"             ['score', {str(hyp)!r}, {str(hyp)!r}, '-q']):\n"
        "    try:\n"
        "        app(args, prog_name='transduce')\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code in (0, None), (args, stop.code)\n"
        "import os\n"
        "from transduce.cli.common import complete_recipe, complete_setting\n"
        "assert complete_setting('train.optimizer.l') == ['train.optimizer.lr=']\n"
        "assert 'model.encoder_size=' in complete_setting('model.enc')\n"
        "assert complete_recipe('g2') == ['g2p']\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_the_command_line_starts_without_sacrebleu():
    """sacrebleu (with the lxml and portalocker it imports) is imported when BLEU is
    scored or its options are checked, not by every command's start-up."""
    code = (
        "import sys\n"
        "from transduce.cli import app\n"
        "try:\n"
        "    app(['--version'], prog_name='transduce')\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'sacrebleu' not in sys.modules, 'sacrebleu imported at start-up'\n"
        "from transduce.errors import ConfigError\n"
        "from transduce.metrics import get_metric\n"
        "try:\n"
        "    get_metric('bleu', tokenize='bogus')\n"
        "except ConfigError as error:\n"
        "    assert '13a' in str(error) and 'bogus' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('a tokenizer sacrebleu lacks was accepted')\n"
        "assert 'sacrebleu' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_run_directory_file_is_named_outside_runs():
    """Every file name of a run directory is written once, in `transduce.runs`: no other
    module of the package has it as a string literal."""
    from transduce import runs

    names = {runs.LAST, runs.BEST, runs.FINAL, runs.CONFIG, runs.REPORT, runs.PREDICTIONS}
    names |= {runs.METRICS, runs.MARKER, runs.LOCK, runs.KEPT_INDEX}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "runs.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # the literal pieces of an f-string are parts of other names (prepare's ".out.lock")
        pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in pieces:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_experiment_run_is_a_library_call_with_a_short_command():
    """The body of `experiment run` (after its options and docstring) is at most 40 lines:
    the work is `transduce.experiments.run.run_experiment`'s, the executors' checks are
    their own `from_options`."""
    tree = ast.parse((PACKAGE / "cli" / "experiment.py").read_text(encoding="utf-8"))
    command = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_command"
    )
    body = command.body[1:]  # after the docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 40
    from transduce.experiments.runner import Executor

    assert inspect.isabstract(Executor)
    assert {"run", "from_options"} <= Executor.__abstractmethods__


def test_the_trainer_holds_its_state_and_its_methods_take_little():
    """`Trainer.setup` makes one `RunState` the trainer holds; no method but `__init__`
    takes more than three parameters (the run's data, model, optimizer, schedule and
    progress are not threaded through the calls); the class is under 400 lines (the
    checkpoint round trip and the report are `RunState`'s, the resume checks
    `transduce.runstate`'s, the reuse of earlier test scores `RunReport`'s, the run
    directory's lock `outputs.claimed_run_dir`'s)."""
    from transduce.training import Trainer

    for name, method in inspect.getmembers(Trainer, inspect.isfunction):
        if name == "__init__":
            continue
        parameters = [p for p in inspect.signature(method).parameters if p != "self"]
        assert len(parameters) <= 3, (name, parameters)
    lines, _ = inspect.getsourcelines(Trainer)
    assert len(lines) < 400, len(lines)
    setup = inspect.signature(Trainer.setup)
    assert setup.return_annotation in ("RunState", "transduce.training.RunState")
