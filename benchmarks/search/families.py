"""The search suite's families by name (one adapter per module)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from family import Family


def _lcbench(steps: int | None = None) -> Family:
    from lcbench import Lcbench

    return Lcbench() if steps is None else Lcbench(steps)


def _rbv2_rpart() -> Family:
    from rbv2_rpart import Rbv2Rpart

    return Rbv2Rpart()


def _iaml_glmnet() -> Family:
    from iaml_glmnet import IamlGlmnet

    return IamlGlmnet()


def _cash_rpart_glmnet() -> Family:
    from cash_rpart_glmnet import CashRpartGlmnet

    return CashRpartGlmnet()


def _builtin_digits(configs: int | None = None, holdout: bool = False) -> Family:
    from builtin_digits import BuiltinDigits

    return BuiltinDigits(configs=configs, holdout=holdout)


FAMILIES: dict[str, Callable[[], Family]] = {
    "lcbench": _lcbench,
    "rbv2_rpart": _rbv2_rpart,
    "iaml_glmnet": _iaml_glmnet,
    "builtin_digits": _builtin_digits,
}


# Variants of the suite's families, on the same tasks and so in the same halves (split.json
# records the four): LCBench cut to its first K epochs, a K-epoch family (where the default's
# curve-length line, dvt_hpo.sampling.kinds.SHORT_CURVE_EPOCHS, falls between the 10-step
# families and LCBench's 52); the built-in trainer's table at 1,000 configs per task (the
# family `builtin_digits` reads the 53-54 per task the table held in rounds 7 and 8); a learner
# choice between rbv2_rpart and iaml_glmnet on iaml_glmnet's tasks, the suite's second
# conditional family (round 10); the built-in trainer's held-out tasks (round 13), recorded after
# the split into a table of their own, with halves of their own in split.json (all report).
VARIANTS: dict[str, tuple[str, Callable[[], Family]]] = {
    "lcbench_e20": ("lcbench", lambda: _lcbench(20)),
    "lcbench_e30": ("lcbench", lambda: _lcbench(30)),
    "builtin_digits_1000": ("builtin_digits", lambda: _builtin_digits(1000)),
    "cash_rpart_glmnet": ("iaml_glmnet", _cash_rpart_glmnet),
    "builtin_digits_holdout": ("builtin_digits_holdout", lambda: _builtin_digits(holdout=True)),
}


def halves_of(name: str) -> str:
    """The family whose halves in split.json ``name`` takes: its own, or a variant's family's."""
    return VARIANTS[name][0] if name in VARIANTS else name


@cache
def family(name: str) -> Family:
    """The family ``name`` (one of FAMILIES or VARIANTS), built once per process."""
    if name in VARIANTS:
        return VARIANTS[name][1]()
    if name not in FAMILIES:
        raise KeyError(f"unknown family {name!r}; known: {', '.join([*FAMILIES, *VARIANTS])}")
    return FAMILIES[name]()
