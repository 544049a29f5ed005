"""The house plan, checked: the package order (import-linter's contracts in pyproject.toml),
no two packages importing each other, no import cycle, the top level small, modules readable,
and a test file mirroring each module.

Imports are read from the source (every ``import``/``from`` statement, including those inside
functions and under ``TYPE_CHECKING``), so the check covers imports a test run never executes.
``docs/architecture.md`` is the plan these rules keep true.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dvt_hpo"
PYPROJECT = PACKAGE.parent / "pyproject.toml"

# The only modules beside the packages: entry points, the user-facing exceptions, and the
# stdlib-only helpers a user may import or copy (report, metrics) or every side shares (atomic).
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "cli.py",
    "exceptions.py",
    "report.py",
    "metrics.py",
    "atomic.py",
    "worker.py",
}
MAX_LINES = 600
# The built-in trainer is read top to bottom in one sitting (config -> data -> model -> probe ->
# loop -> report), like nanoGPT's; its satellite concepts already have their own modules.
# The study file's dataclasses carry each field's rule and the sentence the generated reference
# shows (docs/reference/study-yaml.md), so a field's whole description stays in one place.
LONG_ON_PURPOSE = {"train/builtin.py", "spec/model.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (a name imported from a package counts as the
    submodule when one exists, else as the package)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_top_level_holds_only_entry_points_and_shared_helpers() -> None:
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL, (
        f"new top-level modules {sorted(top - TOP_LEVEL)}: put them in a package"
    )
    assert len(top) <= 8


def test_the_package_order_holds() -> None:
    """``lint-imports``: each package imports only those below it, the trial side reaches no
    orchestrator package, the orchestrator's modules never import torch, the trial process never
    imports optuna ([tool.importlinter] in pyproject.toml; it prints what breaks them)."""
    # In a process of its own: import-linter reconfigures logging (the control server's
    # warnings would then miss caplog in later tests).
    lint = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))"
    )
    done = subprocess.run(
        [sys.executable, "-c", lint, str(PYPROJECT)],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _both_ways(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Package pairs that import each other (a top-level module is its own package; the root
    ``dvt_hpo``, whose lazy names point everywhere, is left out)."""
    edges = {
        (_package(a), _package(b))
        for a, targets in graph.items()
        for b in targets
        if _package(a) != _package(b) and "dvt_hpo" not in (_package(a), _package(b))
    }
    return sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})  # type: ignore[misc]


def test_no_two_packages_import_each_other() -> None:
    assert _both_ways(_graph()) == []


def test_the_pair_finder_finds_a_pair() -> None:
    graph = {"dvt_hpo.a.x": {"dvt_hpo.b.y"}, "dvt_hpo.b.z": {"dvt_hpo.a"}, "dvt_hpo": {"dvt_hpo.a"}}
    assert _both_ways(graph) == [("dvt_hpo.a", "dvt_hpo.b")]


# Optuna's private names dvt-hpo uses, all read in dvt_hpo/optuna_api/private.py.
OPTUNA_PRIVATE = {"_trial_id", "_study_id", "_backend", "_CachedStorage", "_CONSTRAINTS_KEY"}


def _optuna_private_uses(path: Path) -> list[str]:
    """Where ``path`` reaches into Optuna's private API: an underscored optuna module imported
        (also as a string), or one of :data:`OPTUNA_PRIVATE` and ``_storage`` read on another object
    than ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(a.name for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.startswith("optuna.") else []
        elif isinstance(node, ast.Attribute):
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not own and (node.attr in OPTUNA_PRIVATE or node.attr == "_storage"):
                found.append(f"{node.lineno}: .{node.attr}")
            continue
        for name in names:
            if name in OPTUNA_PRIVATE or (
                name.startswith("optuna.") and any(p.startswith("_") for p in name.split("."))
            ):
                found.append(f"{node.lineno}: {name}")
    return found


def test_optunas_private_api_is_used_in_one_module_only() -> None:
    adapter = PACKAGE / "optuna_api" / "private.py"
    uses = {
        str(p.relative_to(PACKAGE)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != adapter and (found := _optuna_private_uses(p))
    }
    assert uses == {}
    assert _optuna_private_uses(adapter)  # the check sees what the adapter does


def test_no_import_cycle_among_modules() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_relative_and_package_imports_resolve_to_modules(tmp_path: Path) -> None:
    known = {"dvt_hpo.study", "dvt_hpo.study.loop", "dvt_hpo.study.space", "dvt_hpo.config.paths"}
    source = tmp_path / "x.py"
    source.write_text(
        "from dvt_hpo.study import space\n"
        "def f():\n"
        "    from . import loop\n"
        "    import dvt_hpo.config.paths\n"
    )
    assert _imports(source, "dvt_hpo.study.x", known) == {
        "dvt_hpo.study.space",
        "dvt_hpo.study.loop",
        "dvt_hpo.config.paths",
    }


# The loop's package, split by concept, keeps room to grow under the cap (freeze and thaw of
# trials land in a trial's run).
STUDY_MAX_LINES = 450


def test_no_module_of_the_loop_is_longer_than_its_own_cap() -> None:
    long = {
        p.name: n
        for p in (PACKAGE / "study").glob("*.py")
        if (n := len(p.read_text().splitlines())) > STUDY_MAX_LINES
    }
    assert long == {}


def test_no_module_is_longer_than_a_reader_holds() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert set(long) <= LONG_ON_PURPOSE, long


# -- the test tree mirrors the package ---------------------------------------------------------

TESTS = PACKAGE.parent / "tests"
# Modules with no test file of their own, on purpose.
NO_MIRROR = {
    # One-line entry points and the kept name: run by tests/test_cli.py and tests/trial/test_main.py.
    "__main__.py": "python -m dvt_hpo, run by tests/test_cli.py",
    "trial/__main__.py": "python -m dvt_hpo.trial, run by every trial of the suite",
    "worker.py": "the kept alias, run by tests/trial/test_main.py",
}
# The deepvisiontools backend runs in its own virtualenv; tests/backends/ tests it by what a user
# does (its config, a study, resume, warm starts, the schema mirror), not module by module.
BY_BEHAVIOUR = ("backends/deepvisiontools/",)


def _mirrors(module: Path) -> list[Path]:
    """Where the test of ``dvt_hpo/a/m.py`` lives: ``tests/a/test_m.py``, or
    ``tests/a/test_a_m.py`` (tests/train has no ``__init__.py``, so its file names carry the
    package's to stay unique in the suite)."""
    rel = module.relative_to(PACKAGE)
    folder = TESTS.joinpath(*rel.parts[:-1])
    names = [f"test_{rel.stem}.py"]
    if len(rel.parts) > 1:
        names.append(f"test_{rel.parts[-2]}_{rel.stem}.py")
    return [folder / name for name in names]


def _without_mirror() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
        and not str(p.relative_to(PACKAGE)).startswith(BY_BEHAVIOUR)
        and not any(m.exists() for m in _mirrors(p))
    }


def test_every_module_has_its_mirror_test() -> None:
    missing = _without_mirror() - set(NO_MIRROR)
    assert missing == set(), (
        f"{sorted(missing)}: write tests/<package>/test_<module>.py (docs/architecture.md, Tests)"
    )


def test_the_modules_without_a_mirror_still_exist() -> None:
    gone = {m for m in NO_MIRROR if not (PACKAGE / m).exists()}
    assert gone == set(), f"{sorted(gone)} are no modules any more: take them off NO_MIRROR"


# -- data flows down: a layer below the loop answers, the loop applies ---------------------------

# The packages at or above the loop (docs/architecture.md): the only ones that hold the runner
# or a trial's run.
AT_OR_ABOVE_THE_LOOP = ("study", "cluster", "tracking", "views", "run")
# A lower layer that drove the loop's objects would take them by these names.
LOOP_OBJECT_NAMES = {"run", "runner"}
# Where a rule must return a decision rather than set it on someone else's object.
DECIDING = ("budget", "recovery")


def _drives_the_loop(source: str) -> list[str]:
    """A parameter named ``run`` or ``runner`` typed ``Any`` (or not typed): the runner or a
    trial's run handed down to be driven."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg not in LOOP_OBJECT_NAMES:
                    continue
                annotation = ast.unparse(arg.annotation) if arg.annotation else None
                if annotation in (None, "Any", "typing.Any"):
                    found.append(f"{node.lineno}: {arg.arg}: {annotation}")
    return found


def _sets_other_objects(source: str) -> list[str]:
    """An assignment to an attribute of anything but ``self``/``cls`` (``x.a = ...``,
    ``x.a[k] = ...``, ``x.a += ...``): a rule setting its answer on the caller's object."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target) if isinstance(target, ast.Tuple) else [target]:
                while isinstance(part, (ast.Subscript, ast.Starred)):
                    part = part.value
                if not isinstance(part, ast.Attribute):
                    continue
                own = isinstance(part.value, ast.Name) and part.value.id in ("self", "cls")
                if not own:
                    found.append(f"{node.lineno}: {ast.unparse(target)}")
    return found


def _below_the_loop() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.parent != PACKAGE and p.relative_to(PACKAGE).parts[0] not in AT_OR_ABOVE_THE_LOOP
    ]


def test_no_layer_below_the_loop_takes_the_runner_or_a_run_to_drive() -> None:
    found = {
        str(p.relative_to(PACKAGE)): hits
        for p in _below_the_loop()
        if (hits := _drives_the_loop(p.read_text()))
    }
    assert found == {}, "return a decision the loop applies (docs/architecture.md)"


def test_budget_and_recovery_set_no_other_objects_attributes() -> None:
    found = {
        str(p.relative_to(PACKAGE)): hits
        for package in DECIDING
        for p in sorted((PACKAGE / package).rglob("*.py"))
        if (hits := _sets_other_objects(p.read_text()))
    }
    assert found == {}, "return a decision the loop applies (docs/architecture.md)"


def test_the_decision_checks_find_what_they_look_for() -> None:
    source = (
        "def watch(runner: Any, run, ok: int, *, other: Any) -> None:\n"
        "    runner.launch_gate = None\n"
        "    run.history[0] = 1\n"
        "    self.mine = 2\n"
        "    self._told[run.number] = 3\n"
        "    plan.spliced += 1\n"
        "def fine(run: Protocolled) -> None:\n"
        "    local = {}\n"
        "    local[1] = 2\n"
    )
    assert _drives_the_loop(source) == ["1: runner: Any", "1: run: None"]
    assert _sets_other_objects(source) == [
        "2: runner.launch_gate",
        "3: run.history[0]",
        "6: plan.spliced",
    ]
    below = {p.relative_to(PACKAGE).parts[0] for p in _below_the_loop()}
    assert {"budget", "recovery", "results", "store"} <= below
    assert not below & set(AT_OR_ABOVE_THE_LOOP)


def test_study_spec_has_one_import_home() -> None:
    """Inside the package ``StudySpec`` comes from ``dvt_hpo.spec.model``; ``dvt_hpo.studyfile``
    re-exports it for users only."""
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module != "dvt_hpo.spec.model"
                and any(a.name == "StudySpec" for a in node.names)
                and p != PACKAGE / "studyfile" / "__init__.py"
            ):
                found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


# -- one class owns a trial folder's layout ------------------------------------------------------

TRIAL_DIR_MODULE = PACKAGE / "wire" / "trial_dir.py"
# The files and folders of a trial's folder and of its resume folder (dvt_hpo/wire/trial_dir.py).
TRIAL_FILE_NAMES = (
    "payload.json",
    "result.json",
    "stdout.log",
    "stderr.log",
    "saved.json",
    "state.pt",
    "chain.json",
    "curve.json",
)
RANK_ERROR_PREFIX = "error-rank"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _trial_file_literals(source: str) -> list[str]:
    """String literals naming a file of a trial's folder: a path piece (split on ``/``) that is
    one of :data:`TRIAL_FILE_NAMES` or starts with ``error-rank``, or ``trial-{n:04d}`` /
    ``trial-%04d``. Docstrings and prose (a message naming ``result.json``) are no paths."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            for piece in node.value.split("/"):
                if piece in TRIAL_FILE_NAMES or piece.startswith((RANK_ERROR_PREFIX, "trial-%04d")):
                    found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            # f"trial-{number:04d}": the numbered folder, formatted in one place.
            for before, value in itertools.pairwise(node.values):
                if (
                    isinstance(before, ast.Constant)
                    and str(before.value).endswith("trial-")
                    and isinstance(value, ast.FormattedValue)
                    and value.format_spec is not None
                ):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_a_trial_folders_file_names_are_written_in_one_module() -> None:
    found = {
        str(p.relative_to(PACKAGE)): hits
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != TRIAL_DIR_MODULE and (hits := _trial_file_literals(p.read_text()))
    }
    assert found == {}, "name them through dvt_hpo.wire.trial_dir.TrialDir / ResumeDir"


def test_the_trial_file_check_finds_what_it_looks_for() -> None:
    source = (
        '"""Writes result.json."""\n'
        "def f(folder, number, rank):\n"
        '    """Reads folder / "stderr.log"."""\n'
        '    a = folder / "result.json"\n'
        '    b = folder.glob("error-rank*.json")\n'
        '    c = runs / f"trial-{number:04d}"\n'
        '    d = f"{folder}/state/saved.json"\n'
        '    say("the trial\'s result.json is kept")\n'
        '    e = f"trial-{number}"\n'
        '    g = "trial-%04d" % number\n'
    )
    assert _trial_file_literals(source) == [
        "4: 'result.json'",
        "5: 'error-rank*.json'",
        "6: f'trial-{number:04d}'",
        "7: '/state/saved.json'",
        "10: 'trial-%04d'",
    ]
    assert _trial_file_literals(TRIAL_DIR_MODULE.read_text())  # the one home names them
