"""The built-in trainer's ``model.kwargs`` checked against the builder's signature, read from
its source with :mod:`ast`, never imported (the builders import torch; the orchestrator does
not).

A built-in builder is the function of :mod:`dvt_hpo.train.models` decorated
``@register_model("<name>")``; a ``package.module:function`` builder is that function in its
module's source. The keywords a builder takes are its parameters after ``in_shape`` and
``num_classes`` (as :func:`dvt_hpo.train.models.build_model` passes them); a builder with
``**kwargs``, or one whose source cannot be read (compiled, assigned, decorated by something
that may change its signature), takes anything and is left to the trial.

The optimizer and scheduler (``optim.target``, ``sched.target``, also as searched choices) are
checked the same way: the class is found by following the modules' sources (``torch.optim``'s
``__init__`` re-exports ``from torch.optim.sgd import SGD``), nothing imported, and its
``__init__``'s keywords, after the parameters or optimizer the trainer passes itself, are what
``optim_args`` / ``sched_args`` (and a search dimension's path into them) may name. What the
source cannot tell (``from x import *``, a module ``__getattr__``, an assignment, compiled code,
``**kwargs``) is left to the trial.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvt_hpo.config.hints import closest, did_you_mean
from dvt_hpo.config.source import Doc, Key
from dvt_hpo.spec.model import StudySpec

__all__ = ["builder_keywords", "check_model_kwargs", "check_optim_sched", "class_keywords"]

_BUILTIN_MODULE = "dvt_hpo.train.models"
_FIXED = ("in_shape", "num_classes")  # what build_model passes itself


def _parse(origin: str | None) -> ast.Module | None:
    if origin is None or not origin.endswith(".py") or not Path(origin).is_file():
        return None
    try:
        return ast.parse(Path(origin).read_bytes(), filename=origin)
    except (SyntaxError, ValueError):
        return None


def _keywords(node: ast.FunctionDef, fixed: int = len(_FIXED)) -> tuple[str, ...] | None:
    args = node.args
    if args.kwarg is not None:
        return None
    names = [a.arg for a in (*args.posonlyargs, *args.args)][fixed:]
    names = [n for n in names if n not in [a.arg for a in args.posonlyargs]]
    return (*names, *(a.arg for a in args.kwonlyargs))


def _registered_name(decorator: ast.expr) -> str | None:
    """``"cnn"`` of ``@register_model("cnn")``."""
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Name)
        and decorator.func.id == "register_model"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and isinstance(decorator.args[0].value, str)
    ):
        return decorator.args[0].value
    return None


def builder_keywords(builder: str, study_dir: Path) -> tuple[str, ...] | None:
    """The keywords ``model.builder`` takes, or ``None`` when any (or when it cannot be told
    from the source)."""
    from dvt_hpo.process import import_path

    if ":" in builder:
        module, _, function = builder.partition(":")
        with import_path.study_imports(study_dir):
            try:
                found = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                return None
    else:
        function = None
        found = importlib.util.find_spec(_BUILTIN_MODULE)
    tree = _parse(found.origin if found is not None else None)
    if tree is None:
        return None
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if function is None:
            if any(_registered_name(d) == builder for d in node.decorator_list):
                return _keywords(node)
        elif node.name == function:
            return None if node.decorator_list else _keywords(node)
    return None


def check_model_kwargs(doc: Doc, spec: StudySpec) -> None:
    """Refuse, at its line, a ``model.kwargs`` key (in the config, or a search dimension's
    path) that a builder the trials may use does not take."""
    config_kwargs = spec.trainer.config["model"]["kwargs"]
    builder_key: Key = ("trainer", "config", "model", "builder")
    builders: list[Any] = [spec.trainer.config["model"]["builder"]]
    for dim in spec.search_space:
        if dim.path == "model.builder" and dim.choices is not None and dim.when is None:
            builders = list(dim.choices)
    keys: list[tuple[Key, str]] = [
        (("trainer", "config", "model", "kwargs", name), name) for name in config_kwargs
    ]
    for i, dim in enumerate(spec.search_space):
        prefix = "model.kwargs."
        rest = dim.path[len(prefix) :] if dim.path.startswith(prefix) else ""
        name = rest.split(".")[0].split("[")[0]
        if name and name not in config_kwargs and dim.when is None:
            keys.append((("search_space", i, "path"), name))
    for builder in builders:
        if not isinstance(builder, str):
            continue
        takes = builder_keywords(builder, spec.path.parent)
        if takes is None:
            continue
        for key, name in keys:
            if name not in takes:
                raise doc.error(key, _refusal(builder, name, takes, builders, builder_key))


def _refusal(
    builder: str, name: str, takes: Sequence[str], builders: Sequence[Any], key: Key
) -> str:
    searched = (
        f" (model.builder is searched: every choice must take it, {', '.join(map(str, builders))})"
        if len(builders) > 1
        else ""
    )
    return (
        f"model {builder!r} takes no argument {name!r}{did_you_mean(name, takes)} (it takes: "
        f"{', '.join(takes) or 'none'}){searched}"
    )


# --- optim.target / sched.target --------------------------------------------------------------

_DEPTH = 8  # re-exports and base classes followed before the check gives up (left to the trial)


@dataclass(frozen=True)
class _Found:
    """What the sources tell of a ``module.Class`` target."""

    exists: bool | None  # None: not decidable from the source
    keywords: tuple[str, ...] | None = None  # None: takes anything, or not decidable
    names: tuple[str, ...] = ()  # what the module defines (for did-you-mean), when missing
    missing_module: str | None = None  # the module that cannot be found, when one


def _module_file(module: str) -> tuple[str | None, str | None]:
    """``(file, None)`` for ``module``'s source, found without importing anything (a dotted
    :func:`importlib.util.find_spec` imports the parents, torch among them); ``(None, name)``
    naming the part that is not found; ``(None, None)`` when not decidable (not plain files)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None, top
    if spec is None:
        return None, top
    origin = spec.origin
    locations = list(spec.submodule_search_locations or [])
    for i, part in enumerate(rest):
        if not locations:
            return None, None
        found: Path | None = None
        for folder in locations:
            for candidate in (Path(folder) / part / "__init__.py", Path(folder) / f"{part}.py"):
                if candidate.is_file():
                    found = candidate
                    break
            if found is not None:
                break
        if found is None:
            # A compiled module (.so) or a namespace folder: not decidable; otherwise missing.
            if any(
                (Path(f) / part).is_dir() or any(Path(f).glob(f"{part}.*.so")) for f in locations
            ):
                return None, None
            return None, ".".join([top, *rest[: i + 1]])
        origin = str(found)
        locations = [str(found.parent)] if found.name == "__init__.py" else []
    return origin, None


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether anything in ``node`` (an ``if``, ``try``, ``del``...) binds ``name``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == name and not isinstance(sub.ctx, ast.Load):
            return True
        defines = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(sub, defines) and sub.name == name:
            return True
        if isinstance(sub, ast.alias) and (sub.asname or sub.name).split(".")[0] == name:
            return True
    return False


def _relative(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


def _find_class(module: str, name: str, depth: int = 0) -> tuple[_Found, ast.ClassDef | None, str]:
    """The class ``name`` of ``module`` (following ``from x import name``), its node and the
    module that defines it."""
    if depth > _DEPTH:
        return _Found(None), None, module
    origin, missing = _module_file(module)
    if origin is None:
        return _Found(False if missing else None, missing_module=missing), None, module
    tree = _parse(origin)
    if tree is None:
        return _Found(None), None, module
    is_package = Path(origin).name == "__init__.py"
    names: list[str] = []
    star = False
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            if node.name == name:
                return _Found(True), node, module
            names.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                    continue
                bound = alias.asname or alias.name
                if bound == name:
                    return _find_class(_relative(module, is_package, node), alias.name, depth + 1)
                names.append(bound)
        elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            star = True  # anything may be provided
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Import, ast.FunctionDef)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            bound_names = [t.id for t in targets if isinstance(t, ast.Name)]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                bound_names.append(node.target.id)
            if isinstance(node, ast.Import):
                bound_names += [(a.asname or a.name).split(".")[0] for a in node.names]
            if isinstance(node, ast.FunctionDef):
                bound_names.append(node.name)
            if name in bound_names:
                return _Found(None), None, module  # defined, but not as a class we can read
        elif _binds(node, name):
            return _Found(None), None, module  # in an if/try block, or a loop: not decidable
    if star:
        return _Found(None), None, module
    public = tuple(n for n in names if not n.startswith("_"))
    return _Found(False, names=public), None, module


def _init_keywords(
    cls: ast.ClassDef, module: str, fixed: int, depth: int = 0
) -> tuple[str, ...] | None:
    """The keywords of ``cls.__init__`` after ``self`` and the ``fixed - 1`` arguments the
    trainer passes; from the first base class when ``cls`` defines none."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return None if node.decorator_list else _keywords(node, fixed)
    if depth > _DEPTH or not cls.bases or not isinstance(cls.bases[0], ast.Name):
        return None
    found, base, base_module = _find_class(module, cls.bases[0].id)
    if base is None:
        return None
    return _init_keywords(base, base_module, fixed, depth + 1)


def class_keywords(target: str, study_dir: Path, passed: int = 1) -> _Found:
    """Whether ``target`` (``package.module.Name`` or ``package.module:Name``) exists, and the
    keywords its ``__init__`` takes after the ``passed`` positional arguments the trainer gives
    (the parameters, the optimizer)."""
    from dvt_hpo.process import import_path

    module, _, attr = target.partition(":") if ":" in target else target.rpartition(".")
    if "." in attr:
        return _Found(None)  # a nested class: left to the trial
    with import_path.study_imports(study_dir):
        found, node, defined_in = _find_class(module, attr)
        if node is None:
            return found
        return _Found(True, _init_keywords(node, defined_in, passed + 1))


@dataclass(frozen=True)
class _Part:
    """The optimizer or the scheduler: its config section and what the trainer passes."""

    section: str  # optim, sched
    args: str  # optim_args, sched_args
    what: str  # optimizer, scheduler
    passes: tuple[str, ...]  # keywords the trainer always passes itself


_PARTS = (
    _Part("optim", "optim_args", "optimizer", ("weight_decay",)),
    _Part("sched", "sched_args", "scheduler", ()),
)


def check_optim_sched(doc: Doc, spec: StudySpec) -> None:
    """Refuse, at its line, an ``optim.target`` / ``sched.target`` (or a searched choice) that
    cannot be found, and an ``optim_args`` / ``sched_args`` key (in the config, or a search
    dimension's path) that the class does not take."""
    config = spec.trainer.config
    folder = spec.path.parent
    for part in _PARTS:
        section = config.get(part.section)
        base: Key = ("trainer", "config", part.section)
        searched = [
            (i, dim)
            for i, dim in enumerate(spec.search_space)
            if dim.path == f"{part.section}.target" and dim.choices is not None
        ]
        if section is None and not searched:
            continue
        # (key, target): the config's, then each searched choice.
        targets: list[tuple[Key, Any]] = []
        if section is not None:
            targets.append(((*base, "target"), section["target"]))
        for i, dim in searched:
            targets += [(("search_space", i, "choices", j), c) for j, c in enumerate(dim.choices)]
        takes: dict[str, tuple[str, ...] | None] = {}
        for key, target in targets:
            if not isinstance(target, str) or target in takes:
                continue
            found = class_keywords(target, folder)
            if found.exists is False:
                raise doc.error(key, _missing(part, target, found))
            takes[target] = found.keywords
            if found.keywords is not None:
                for name in part.passes:
                    if name not in found.keywords:
                        raise doc.error(
                            key,
                            f"{part.what} {target!r} takes no argument {name!r}, which the "
                            f"built-in trainer always passes ({part.section}.{name}); it takes: "
                            f"{', '.join(found.keywords) or 'none'}",
                        )
        _check_args(doc, spec, part, section, searched, targets, takes)


def _check_args(
    doc: Doc,
    spec: StudySpec,
    part: _Part,
    section: Any,
    searched: Sequence[tuple[int, Any]],
    targets: Sequence[tuple[Key, Any]],
    takes: dict[str, tuple[str, ...] | None],
) -> None:
    # Every trial uses one of these: the config's target, or (searched with no condition) one
    # of the choices. A searched target with a condition may leave either in use.
    conditional = any(dim.when is not None for _, dim in searched)
    if searched and not conditional:
        used = [t for key, t in targets if key[0] == "search_space"]
    else:
        used = [t for _, t in targets]
    used = [t for t in dict.fromkeys(used) if isinstance(t, str)]
    base: Key = ("trainer", "config", part.section, part.args)
    keys: list[tuple[Key, str, bool]] = []  # (key, name, every trial passes it)
    given = section[part.args] if section is not None else {}
    keys += [((*base, name), name, not conditional) for name in given]
    prefix = f"{part.section}.{part.args}."
    for i, dim in enumerate(spec.search_space):
        rest = dim.path[len(prefix) :] if dim.path.startswith(prefix) else ""
        name = rest.split(".")[0].split("[")[0]
        if name and name not in given:
            keys.append((("search_space", i, "path"), name, dim.when is None and not conditional))
    for key, name, everywhere in keys:
        refusing = [t for t in used if name not in (takes.get(t) or (name,))]
        accepting = [t for t in used if t not in refusing]
        if not refusing or (accepting and not everywhere):
            continue
        target = refusing[0]
        keywords = takes.get(target) or ()
        choices = (
            f" ({part.section}.target is searched: every choice must take it, {', '.join(used)})"
            if len(used) > 1 and accepting
            else ""
        )
        raise doc.error(
            key,
            f"{part.what} {target!r} takes no argument {name!r}{did_you_mean(name, keywords)} "
            f"(it takes: {', '.join(keywords) or 'none'}){choices}",
        )


def _missing(part: _Part, target: str, found: _Found) -> str:
    if found.missing_module is not None:
        return (
            f"{part.section}.target {target!r}: module {found.missing_module!r} cannot be found "
            "(trials import it from the study file's folder, then PYTHONPATH and the installed "
            "packages)"
        )
    sep = ":" if ":" in target else "."
    module, _, attr = target.rpartition(sep)
    near = closest(attr, found.names)
    hint = f"; did you mean {f'{module}{sep}{near}'!r}?" if near is not None else ""
    return f"unknown {part.what} {target!r}: {module} defines no {attr!r}{hint}"
