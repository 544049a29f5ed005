"""The built-in trainer's ``model.kwargs`` checked against the builder's signature, read from
its source with :mod:`ast`, never imported (the builders import torch; the orchestrator does
not).

A built-in builder is the function of :mod:`dvt_hpo.train.models` decorated
``@register_model("<name>")``; a ``package.module:function`` builder is that function in its
module's source. The keywords a builder takes are its parameters after ``in_shape`` and
``num_classes`` (as :func:`dvt_hpo.train.models.build_model` passes them); a builder with
``**kwargs``, or one whose source cannot be read (compiled, assigned, decorated by something
that may change its signature), takes anything and is left to the trial.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dvt_hpo.config.hints import did_you_mean
from dvt_hpo.config.source import Doc, Key
from dvt_hpo.spec.model import StudySpec

__all__ = ["builder_keywords", "check_model_kwargs"]

_BUILTIN_MODULE = "dvt_hpo.train.models"
_FIXED = ("in_shape", "num_classes")  # what build_model passes itself


def _parse(origin: str | None) -> ast.Module | None:
    if origin is None or not origin.endswith(".py") or not Path(origin).is_file():
        return None
    try:
        return ast.parse(Path(origin).read_bytes(), filename=origin)
    except (SyntaxError, ValueError):
        return None


def _keywords(node: ast.FunctionDef) -> tuple[str, ...] | None:
    args = node.args
    if args.kwarg is not None:
        return None
    names = [a.arg for a in (*args.posonlyargs, *args.args)][len(_FIXED) :]
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
