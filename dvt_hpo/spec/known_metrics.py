"""The metrics a trainer can report, known before any training, and the check that every
objective and constraint names one of them.

For the built-in trainer and the deepvisiontools backend the names depend only on the trainer
config (latency on or off, the task, ...), so ``validate`` and ``run`` refuse
``objective.metric: macro_f2`` with a did-you-mean instead of training every trial to its last
epoch and failing it. A searched categorical or bool may change them (``eval.latency.enabled``
searched): a name any choice reports is accepted. A command with ``trainer.metrics_pattern``
reports the pattern's named groups. Custom entry points and other commands report what they
like; their first trial that ends without the metric names the ones it did report
(:mod:`dvt_hpo.results.reduction`).

Stdlib only, like the rest of the orchestrator's side.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dvt_hpo.config.hints import closest
from dvt_hpo.config.paths import set_path

if TYPE_CHECKING:
    from dvt_hpo.config.source import Doc, Key
    from dvt_hpo.spec.model import StudySpec

__all__ = ["KNOWN_BY_ENTRYPOINT", "KnownMetrics", "check_known_metrics", "known_for"]


@dataclass(frozen=True)
class KnownMetrics:
    """What a trainer reports for one config."""

    trainer: str  # as a message names it: "the built-in trainer"
    epoch: frozenset[str]  # reported at every epoch: objectives and constraints
    final: frozenset[str] = frozenset()  # only in the returned metrics: constraints only
    # Names under these prefixes come from a library whose own names cannot be listed ahead
    # (deepvisiontools' ``valid/iou/cls1``): accepted unchecked.
    open_prefixes: tuple[str, ...] = ()
    order: tuple[str, ...] = ()  # how the message lists them (the rest sorted after)
    how: Mapping[str, str] = field(default_factory=dict)  # a name off in this config: how to on

    def union(self, other: KnownMetrics) -> KnownMetrics:
        epoch = self.epoch | other.epoch
        return KnownMetrics(
            trainer=self.trainer,
            epoch=epoch,
            final=self.final | other.final,
            open_prefixes=tuple(dict.fromkeys((*self.open_prefixes, *other.open_prefixes))),
            order=tuple(dict.fromkeys((*self.order, *other.order))),
            how={k: v for k, v in {**other.how, **self.how}.items() if k not in epoch},
        )

    def listing(self, names: Iterable[str]) -> str:
        names = set(names)
        first = [n for n in self.order if n in names]
        return ", ".join([*first, *sorted(names - set(first))])


# The trainers whose names are known: entry point -> the stdlib-only function of its config.
KNOWN_BY_ENTRYPOINT = {
    "dvt_hpo.train:run": "dvt_hpo.train.metric_names:known_metrics",
    "dvt_hpo.backends.deepvisiontools:run": (
        "dvt_hpo.backends.deepvisiontools.metric_names:known_metrics"
    ),
}


def _function(target: str) -> Callable[[Mapping[str, Any]], KnownMetrics]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def _choices(kind: str, choices: Sequence[Any] | None) -> Sequence[Any]:
    if choices is not None:
        return choices
    return (False, True) if kind == "bool" else ()


def known_for(spec: StudySpec) -> KnownMetrics | None:
    """What the study's trials can report, or ``None`` for a trainer that is not known (a
    custom entry point, a command without ``trainer.metrics_pattern``). A command with a
    pattern reports its named groups but ``step``."""
    if spec.trainer.command is not None:
        if spec.trainer.metrics_pattern is None:
            return None
        groups = set(re.compile(spec.trainer.metrics_pattern).groupindex) - {"step"}
        return KnownMetrics(
            trainer="trainer.metrics_pattern (a named group per metric; a script reporting "
            "with dvt_hpo.report needs no pattern)",
            epoch=frozenset(groups),
        )
    target = KNOWN_BY_ENTRYPOINT.get(spec.trainer.entrypoint)
    if target is None:
        return None
    known_of = _function(target)
    config = spec.trainer.config
    known = known_of(config)
    for dim in spec.search_space:
        for choice in _choices(dim.kind, dim.choices):
            variant = copy.deepcopy(dict(config))
            try:
                set_path(variant, dim.path, choice, create=True)
            except (KeyError, IndexError, TypeError, AttributeError):
                continue
            known = known.union(known_of(variant))
    return known


def _refusal(name: str, known: KnownMetrics, constraint: bool) -> str | None:
    names = known.epoch | known.final if constraint else known.epoch
    if name in names or name.startswith(known.open_prefixes):
        return None
    if name in known.how:
        return f"metric {name!r} is not reported by {known.trainer} here: {known.how[name]}"
    if not constraint and name in known.final:
        return (
            f"metric {name!r} is only in the metrics {known.trainer} returns at the end, not "
            "reported per epoch: an objective needs a metric of every epoch (a constraint may "
            f"use it); it reports per epoch: {known.listing(known.epoch)}"
        )
    match = closest(name, names)
    hint = f"; did you mean {match!r}?" if match is not None else ""
    extra = ""
    if known.open_prefixes:
        extra = f", and the library's own metrics under {', '.join(known.open_prefixes)}"
    return (
        f"metric {name!r} is never reported by {known.trainer}{hint} (it reports: "
        f"{known.listing(names)}{extra})"
    )


def check_known_metrics(doc: Doc, spec: StudySpec) -> None:
    """Refuse, at its line, an objective or constraint naming a metric the trainer never
    reports (only for the trainers of :data:`KNOWN_BY_ENTRYPOINT`)."""
    known = known_for(spec)
    if known is None:
        return
    objective = spec.objective
    checks: list[tuple[Key, str, bool]] = []
    if ("objective", "metrics") in doc.locs:
        for i, metric in enumerate(objective.metrics):
            checks.append((("objective", "metrics", i, "name"), metric.name, False))
    else:
        checks.append((("objective", "metric"), objective.metric, False))
    for i, constraint in enumerate(objective.constraints):
        checks.append((("objective", "constraints", i, "metric"), constraint.metric, True))
    for key, name, constraint in checks:
        problem = _refusal(name, known, constraint)
        if problem is not None:
            raise doc.error(key, problem)
