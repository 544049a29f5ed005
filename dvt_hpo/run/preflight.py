"""What ``run`` and ``validate`` check beyond a valid file, before anything is written.

- A ``trainer.command``'s executable exists (on ``PATH`` or as a file), and so does the script
  of ``python script.py``.
- The entry point's module is found by the one import rule of :mod:`dvt_hpo.process.import_path`, and
  its function is defined there: the module's source is parsed with :mod:`ast`, never imported
  (a user's module may import torch, train at import time, or fail). A ``def``, ``class``,
  assignment or import of the name counts; a module with no Python source (compiled) or a
  ``from x import *`` that may provide the name leaves the check undecided, with a note.
- The objectives and constraints name metrics the trainer reports, where its names are known
  (:mod:`dvt_hpo.spec.known_metrics`; a command's ``trainer.metrics_pattern`` groups).
- ``tracking.mlflow``: MLflow is installed and accepts the tracking URI
  (:mod:`dvt_hpo.tracking.check`).
- The storage driver is installed and the GPUs named in ``trials.devices`` exist.
- For the built-in trainer, its own config: ``model.builder`` (also each searched choice) is a
  built-in builder or a ``package.module:function`` found by the same rule, and takes every
  ``model.kwargs`` key (:mod:`dvt_hpo.run.builders`, from the builder's source); the
  ``optim.target`` and ``sched.target`` classes (also searched choices) exist and take every
  ``optim_args`` / ``sched_args`` key, from their sources too;
  ``devices.device: cuda`` needs a GPU in every trial slot.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvt_hpo.command.template import placeholders
from dvt_hpo.config.hints import did_you_mean
from dvt_hpo.config.source import Doc, Key
from dvt_hpo.exceptions import SpecError
from dvt_hpo.process import import_path
from dvt_hpo.spec.known_metrics import check_known_metrics
from dvt_hpo.spec.model import BUILTIN_ENTRYPOINT, StudySpec
from dvt_hpo.studyfile.load import read_study_file

__all__ = [
    "EntryPoint",
    "check_executable",
    "check_runnable",
    "entrypoint_origin",
    "find_entrypoint",
    "load_runnable",
]


@dataclass(frozen=True)
class EntryPoint:
    """``module:attr`` as trials will import it, read without importing."""

    module: str
    attr: str
    origin: str | None  # the module's file (None: not found)
    defined: bool | None  # None: not decidable from the source (see note)
    note: str | None = None  # why the check was skipped
    problem: str | None = None  # why it is not defined (with a did-you-mean)


def entrypoint_origin(entrypoint: str, study_dir: Path) -> str | None:
    """Where trials import the entry point's module from (its file), by the one rule of
    :mod:`dvt_hpo.process.import_path`; ``None`` when it cannot be found. Nothing is imported but its
    parent packages, as :func:`importlib.util.find_spec` does."""
    module = entrypoint.partition(":")[0]
    with import_path.study_imports(study_dir):
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
    if found is None:
        return None
    if found.origin in (None, "namespace"):
        return ", ".join(found.submodule_search_locations or ()) or module
    return found.origin


def find_entrypoint(entrypoint: str, study_dir: Path) -> EntryPoint:
    """Whether ``module:attr`` (``attr`` may be dotted: ``Class.method``) is defined, from the
    module's source."""
    module, _, attr = entrypoint.partition(":")
    origin = entrypoint_origin(entrypoint, study_dir)
    if origin is None:
        return EntryPoint(module, attr, None, None)
    path = Path(origin)
    if path.suffix != ".py" or not path.is_file():
        note = (
            f"module {module!r} has no Python source ({origin}); the check that it defines "
            f"{attr!r} was skipped"
        )
        return EntryPoint(module, attr, origin, None, note=note)
    try:
        tree = ast.parse(path.read_bytes(), filename=origin)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{origin}:{line}" if line else origin
        problem = f"module {module!r} cannot be parsed ({where}): {exc.__class__.__name__}: {exc}"
        return EntryPoint(module, attr, origin, False, problem=problem)
    body: Sequence[ast.stmt] = tree.body
    owner = f"module {module!r} ({origin})"
    for i, part in enumerate(attr.split(".")):
        names, star = _defined_names(body)
        if part not in names:
            if star:
                note = (
                    f"{owner} does `import *`, which may define {part!r}; the check that it "
                    "is defined was skipped"
                )
                return EntryPoint(module, attr, origin, None, note=note)
            public = sorted(n for n in names if not n.startswith("_"))
            listing = f" (it defines: {', '.join(public)})" if 0 < len(public) <= 12 else ""
            problem = f"{owner} defines no {part!r}{did_you_mean(part, names)}{listing}"
            return EntryPoint(module, attr, origin, False, problem=problem)
        cls = _class_named(body, part)
        if cls is None or i == len(attr.split(".")) - 1:
            break
        body, owner = cls.body, f"class {part!r} of {owner}"
    return EntryPoint(module, attr, origin, True)


def _blocks(node: ast.stmt) -> Iterable[Sequence[ast.stmt]]:
    """The statement lists nested in a compound statement that still run at module level."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(node, name, None)
        if isinstance(block, list):
            yield block
    for handler in getattr(node, "handlers", ()):
        yield handler.body
    for case in getattr(node, "cases", ()):
        yield case.body


def _targets(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _targets(element)
    elif isinstance(target, ast.Starred):
        yield from _targets(target.value)


def _defined_names(body: Sequence[ast.stmt]) -> tuple[set[str], bool]:
    """Names a module (or class) body binds, and whether it does ``from x import *``."""
    names: set[str] = set()
    star = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(_targets(target))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names.update(_targets(node.target))
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    names.add(alias.asname or alias.name)
        elif not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for block in _blocks(node):
                inner, inner_star = _defined_names(block)
                names |= inner
                star = star or inner_star
    return names, star


def _class_named(body: Sequence[ast.stmt], name: str) -> ast.ClassDef | None:
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
        for block in _blocks(node) if not isinstance(node, ast.ClassDef) else ():
            found = _class_named(block, name)
            if found is not None:
                return found
    return None


def load_runnable(path: str | Path, overrides: Sequence[str] = ()) -> StudySpec:
    """The study file as ``run`` and ``validate`` take it: valid (:func:`load_spec`), and
    runnable on this machine (:func:`check_runnable`). Nothing is written anywhere."""
    doc, spec = read_study_file(path, overrides)
    check_runnable(doc, spec)
    return spec


def check_runnable(doc: Doc, spec: StudySpec) -> None:
    """Raise :class:`SpecError` at the line of the first thing a run could not do."""
    from dvt_hpo.devices.slots import split_devices, visible_gpus
    from dvt_hpo.store.storage import check_storage_driver

    folder = spec.path.parent
    entrypoint = spec.trainer.entrypoint
    if spec.trainer.command is not None:
        check_executable(doc, spec.trainer.command, folder)
    else:
        _check_callable(doc, ("trainer", "entrypoint"), entrypoint, folder, "the entry point")
    check_known_metrics(doc, spec)
    for i, name in enumerate(spec.trials.preload):
        if not import_path.find_module(name, folder):
            raise doc.error(
                ("trials", "preload", i),
                f"module {name!r} cannot be found: the warm template imports it as trials "
                f"do, from the study file's folder ({folder}), then PYTHONPATH and the "
                "installed packages",
            )
    try:
        check_storage_driver(spec.study.storage)
    except SpecError as exc:
        raise doc.error(("study", "storage"), exc.message) from None
    mlflow = spec.tracking.mlflow
    if mlflow is not None:
        from dvt_hpo.tracking.check import tracking_problem

        if (problem := tracking_problem(mlflow.tracking_uri)) is not None:
            key: Key = ("tracking", "mlflow", "tracking_uri")
            raise doc.error(key if mlflow.tracking_uri else ("tracking", "mlflow"), problem)
    from dvt_hpo.study.setup import runs_dir_problem

    if (problem := runs_dir_problem(spec.trials.runs_dir)) is not None:
        raise doc.error(("trials", "runs_dir"), f"{problem}; it must be a writable folder")
    trials = spec.trials
    on_cpu = isinstance(trials.devices, str) and trials.devices.strip().lower() == "cpu"
    # nvidia-smi costs a process start; trials.devices: cpu never needs it.
    gpus: list[str] = [] if on_cpu else visible_gpus()
    try:
        slots = split_devices(
            trials.devices,
            trials.parallel,
            nproc_per_node=trials.nproc_per_node,
            per_gpu=trials.per_gpu,
            gpus=gpus,
        )
    except SpecError as exc:
        # At the line of the field the rule names (devices, parallel or per_gpu).
        raise doc.place(exc) from None
    from dvt_hpo.budget.compute import check_slots

    check_slots(spec, slots)  # study.budget.gpu_hours where no slot has a GPU
    if entrypoint == BUILTIN_ENTRYPOINT:
        from dvt_hpo.run.builders import check_model_kwargs, check_optim_sched

        _check_builders(doc, spec)
        check_model_kwargs(doc, spec)
        check_optim_sched(doc, spec)
        per_trial = min(len(slot.gpus) for slot in slots)
        _check_device(doc, spec, per_trial, on_cpu)


_PYTHON_RE = re.compile(r"^python[0-9.]*$")


def check_executable(doc: Doc, command: Sequence[str], folder: Path) -> None:
    """``command[0]`` exists: on ``PATH``, or as an executable file (a path with a ``/``,
    relative to the study file's folder, where trials run); for ``python script.py`` the script
    too. An executable with placeholders other than ``{python}`` is left to the trial."""
    key: Key = ("trainer", "command", 0)
    exe = command[0]
    if exe != "{python}":
        if placeholders(exe):
            return
        _check_found(doc, key, exe, folder)
    python = exe == "{python}" or bool(_PYTHON_RE.match(Path(exe).name))
    script = command[1] if len(command) > 1 else None
    if (
        python
        and script
        and script.endswith(".py")
        and not placeholders(script)
        and not (folder / Path(script).expanduser()).is_file()
    ):
        raise doc.error(
            ("trainer", "command", 1),
            f"no such script: {script!r} (trials run in the study file's folder, {folder})",
        )


def _check_found(doc: Doc, key: Key, exe: str, folder: Path) -> None:
    if "/" in exe:
        path = folder / Path(exe).expanduser()
        if not path.is_file():
            raise doc.error(key, f"no such file: {exe!r} (resolved against {folder}: {path})")
        if not os.access(path, os.X_OK):
            raise doc.error(
                key,
                f"{exe!r} is not executable: chmod +x it, or run it through its interpreter "
                f'(["bash", "{exe}"], ["{{python}}", "{exe}"])',
            )
    elif shutil.which(exe) is None:
        hint = ""
        if (folder / exe).is_file():
            hint = (
                f'; {exe!r} is a file in the study folder: write ["{{python}}", "{exe}", ...]'
                if exe.endswith(".py")
                else f"; {exe!r} is a file in the study folder: write './{exe}'"
            )
        raise doc.error(
            key,
            f"executable {exe!r} is not found on PATH{hint} ({{python}} is the interpreter "
            "running dvt-hpo)",
        )


def _check_callable(doc: Doc, key: Key, target: str, folder: Path, what: str) -> None:
    module = target.partition(":")[0]
    found = find_entrypoint(target, folder)
    if found.origin is None:
        raise doc.error(
            key,
            f"module {module!r} of {what} {target!r} cannot be found: trials import it from "
            f"the study file's folder ({folder}), then PYTHONPATH and the installed packages, "
            "never from the working directory",
        )
    if found.defined is False:
        raise doc.error(key, f"{what} {target!r}: {found.problem}")


def _check_builders(doc: Doc, spec: StudySpec) -> None:
    from dvt_hpo.train.config import BUILTIN_MODELS  # stdlib + schema: no torch

    builder_key: Key = ("trainer", "config", "model", "builder")
    candidates: list[tuple[Key, Any]] = [(builder_key, spec.trainer.config["model"]["builder"])]
    for i, dim in enumerate(spec.search_space):
        if dim.path == "model.builder" and dim.choices is not None:
            candidates += [(("search_space", i, "choices"), choice) for choice in dim.choices]
    folder = spec.path.parent
    for key, name in candidates:
        if isinstance(name, str) and ":" in name:
            _check_callable(doc, key, name, folder, "the model builder")
        elif name not in BUILTIN_MODELS:
            raise doc.error(
                key,
                f"unknown model builder {name!r}{did_you_mean(str(name), BUILTIN_MODELS)} "
                f"(built in: {', '.join(BUILTIN_MODELS)}; or your own as "
                "'package.module:function')",
            )


def _check_device(doc: Doc, spec: StudySpec, per_trial: int, on_cpu: bool) -> None:
    key: Key = ("trainer", "config", "devices", "device")
    device = spec.trainer.config["devices"]["device"]
    if not device.startswith("cuda"):
        return
    if per_trial == 0:
        why = (
            f"trials.devices is {spec.trials.devices!r}"
            if on_cpu
            else "no GPU is visible here (CUDA_VISIBLE_DEVICES / nvidia-smi -L)"
        )
        raise doc.error(
            key,
            f"device {device!r} but trials get no GPU: {why}; use 'auto' (CUDA where there is "
            "a GPU) or 'cpu'",
        )
    index = device.partition(":")[2]
    # Under torchrun each rank takes cuda:LOCAL_RANK whatever the index says.
    if index and spec.trials.launcher != "torchrun" and int(index) >= per_trial:
        plural = "s" if per_trial != 1 else ""
        raise doc.error(
            key,
            f"device {device!r} but each trial sees {per_trial} GPU{plural} (cuda:0 to "
            f"cuda:{per_trial - 1}; trials.devices={spec.trials.devices!r}, "
            f"trials.parallel={spec.trials.parallel}); use 'cuda' or 'auto'",
        )
