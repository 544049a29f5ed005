"""The search suite's families by name (one adapter per module)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from family import Family


def _lcbench() -> Family:
    from lcbench import Lcbench

    return Lcbench()


def _rbv2_rpart() -> Family:
    from rbv2_rpart import Rbv2Rpart

    return Rbv2Rpart()


def _iaml_glmnet() -> Family:
    from iaml_glmnet import IamlGlmnet

    return IamlGlmnet()


def _builtin_digits() -> Family:
    from builtin_digits import BuiltinDigits

    return BuiltinDigits()


FAMILIES: dict[str, Callable[[], Family]] = {
    "lcbench": _lcbench,
    "rbv2_rpart": _rbv2_rpart,
    "iaml_glmnet": _iaml_glmnet,
    "builtin_digits": _builtin_digits,
}


@cache
def family(name: str) -> Family:
    """The family ``name``, built once per process."""
    if name not in FAMILIES:
        raise KeyError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]()
