"""Section ``objective``: the metric (or several), their directions, the constraints, and how
a trial's history is reduced.

The direction is inferred only from names whose meaning is not in doubt. A wrong guess is the
worst failure of an HPO tool: ``val_mse`` maximized makes the worst trial "best", and a stored
study's direction cannot be changed afterwards. So the rule (:func:`infer_direction`) refuses
rather than guesses, and the loader then asks for ``objective.direction``.

The rule, on the lower-cased name split into words at any character that is not a letter or a
digit (``valid/f1/macro`` -> ``valid f1 macro``; ``valLoss`` is split at the case change when
the whole word is unknown):

1. qualifiers are set aside: split prefixes and suffixes (``val``, ``valid``, ``test``, ``train``,
   ``eval``), aggregations (``mean``, ``macro``, ``top1``, ``at``, numbers), ``score``/``rate``
   and units (``ms``, ``s``, ``mb``, ``pct``, ...);
2. the last remaining word is the head and must be a word of known direction (``loss``,
   ``mse``, ``accuracy``, ``f1``, ...); words before it may narrow it (``box_loss``,
   ``balanced_accuracy``) but not point the other way (``time_to_accuracy``);
3. words that turn a quantity around (``neg``, ``drop``, ``gap``, ``ratio``, ``delta``, ...)
   refuse wherever they are (``loss_ratio``, ``drop_in_accuracy``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dvt_hpo.config.hints import describe
from dvt_hpo.config.source import Key
from dvt_hpo.spec.model import ConstraintSpec, MetricSpec, ObjectiveSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = [
    "MAXIMIZE_WORDS",
    "MINIMIZE_WORDS",
    "Inference",
    "describe_constraint",
    "describe_objective",
    "infer_direction",
    "read_constraints",
    "read_metrics",
    "read_objective",
]

Direction = Literal["minimize", "maximize"]

# fmt: off
MINIMIZE_WORDS = frozenset(
    {
        "loss", "losses", "error", "errors", "err", "mse", "mae", "rmse", "msle", "rmsle",
        "mape", "smape", "nll", "ce", "bce", "crossentropy", "xent", "perplexity", "ppl",
        "wer", "cer", "ter", "eer", "fid", "kid", "latency", "time", "duration", "runtime",
        "seconds", "second", "rank", "regret", "distortion",
    }
)
MAXIMIZE_WORDS = frozenset(
    {
        "accuracy", "acc", "f1", "fscore", "fbeta", "precision", "recall", "auc", "auroc",
        "auprc", "ap", "map", "iou", "miou", "dice", "bleu", "rouge", "rougel", "meteor",
        "chrf", "r2", "psnr", "ssim", "msssim", "ndcg", "mrr", "hits", "kappa", "mcc",
        "jaccard", "sensitivity", "specificity", "tpr", "reward", "return", "throughput",
    }
)
# Words that never change the direction of the word they qualify.
QUALIFIERS = frozenset(
    {
        "val", "valid", "validation", "test", "train", "training", "eval", "evaluation", "dev",
        "holdout", "mean", "avg", "average", "macro", "micro", "weighted", "overall", "global",
        "total", "sum", "top", "at", "k", "per", "class", "epoch", "step", "best", "final",
        "last", "score", "rate", "metric", "value", "objective",
        # units: `latency_ms` is a latency whatever it is counted in
        "ms", "us", "ns", "s", "sec", "secs", "kb", "mb", "gb", "kib", "mib", "gib", "pct",
        "percent",
    }
)
# Words that turn a quantity around or make it relative: their direction is not the head's.
REVERSING = frozenset(
    {
        "neg", "negative", "minus", "inv", "inverse", "reciprocal", "drop", "gap", "delta",
        "diff", "difference", "change", "gain", "improvement", "reduction", "decrease",
        "increase", "ratio", "relative", "std", "var", "variance", "deviation",
    }
)
# fmt: on
# Two-word names whose second word alone is not a metric.
_PHRASES = {("cross", "entropy"): "crossentropy", ("f", "score"): "fscore"}

_CAMEL_RE = re.compile(r"[A-Z]+[a-z0-9]*|[a-z0-9]+")


@dataclass(frozen=True)
class Inference:
    """The direction the rule infers for a metric name, or why it cannot."""

    direction: Direction | None
    reason: str  # why (used in the refusal message)


def _words(metric: str) -> list[str]:
    known = MINIMIZE_WORDS | MAXIMIZE_WORDS | QUALIFIERS | REVERSING
    words: list[str] = []
    for raw in re.split(r"[^A-Za-z0-9]+", metric):
        if not raw:
            continue
        if raw.lower() in known or raw.lower().isdigit():
            words.append(raw.lower())
        else:
            words.extend(part.lower() for part in _CAMEL_RE.findall(raw))
    merged: list[str] = []
    for word in words:
        if merged and (merged[-1], word) in _PHRASES:
            merged[-1] = _PHRASES[(merged[-1], word)]
        else:
            merged.append(word)
    return merged


def _direction_of(word: str) -> Direction | None:
    for candidate in (word, word.rstrip("0123456789")):
        if candidate in MINIMIZE_WORDS:
            return "minimize"
        if candidate in MAXIMIZE_WORDS:
            return "maximize"
    return None


def _is_qualifier(word: str) -> bool:
    return word.isdigit() or word.rstrip("0123456789") in QUALIFIERS


def infer_direction(metric: str) -> Inference:
    """The direction of ``metric`` when its name leaves no doubt (see the module's rule)."""
    words = _words(metric)
    reversing = [w for w in words if w in REVERSING]
    if reversing:
        return Inference(None, f"{reversing[0]!r} may turn the quantity around")
    content = [w for w in words if not _is_qualifier(w)]
    if not content:
        return Inference(None, "no word of its name has a known direction")
    head = content[-1]
    direction = _direction_of(head)
    if direction is None:
        return Inference(None, f"its last word {head!r} has no known direction")
    for word in content[:-1]:
        other = _direction_of(word)
        if other is not None and other != direction:
            return Inference(None, f"{word!r} points to {other} but {head!r} to {direction}")
    better = "lower" if direction == "minimize" else "higher"
    return Inference(direction, f"{head!r}: {better} is better")


def describe_constraint(constraint: ConstraintSpec) -> str:
    """``n_params <= 5e+06``, ``0.5 <= recall`` or ``0 <= x <= 1``."""
    low = f"{constraint.min:g} <= " if constraint.min is not None else ""
    high = f" <= {constraint.max:g}" if constraint.max is not None else ""
    return f"{low}{constraint.metric}{high}"


def describe_objective(objective: ObjectiveSpec) -> str:
    """The objective as the start line of a run shows it: ``maximize macro_f1 (best of epochs)``;
    with several, ``maximize macro_f1, minimize latency_ms (the epoch best on macro_f1)``."""
    pairs = ", ".join(
        f"{d} {n}" for n, d in zip(objective.names, objective.directions, strict=True)
    )
    if not objective.is_multi:
        reduce = "best of epochs" if objective.reduce == "best" else "last epoch"
    elif objective.reduce == "best":
        reduce = f"the epoch best on {objective.names[0]}"
    else:
        reduce = "last epoch"
    text = f"{pairs} ({reduce})"
    if objective.constraints:
        text += ", subject to " + ", ".join(map(describe_constraint, objective.constraints))
    return text


def _direction(r: Reader, metric: str, key: Key, fix: str) -> Direction:
    inferred = infer_direction(metric)
    if inferred.direction is None:
        raise r.err(
            key,
            f"cannot tell whether {metric!r} is to be minimized or maximized "
            f"({inferred.reason}); set {fix}: minimize or maximize (a stored "
            "study's direction cannot be changed later)",
        )
    return inferred.direction


def _names_list(r: Reader, value: Any, key: Key, what: str, example: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise r.err(
            key, f"must be a non-empty list of {what} such as {example}, got {describe(value)}"
        )
    return value


def read_metrics(r: Reader, value: Any, key: Key) -> tuple[MetricSpec, ...]:
    """``objective.metrics``: unique names, each direction given or inferred from its name."""
    items = _names_list(
        r, value, key, "objectives", "[{name: macro_f1}, {name: latency_ms, direction: minimize}]"
    )
    metrics: list[MetricSpec] = []
    for i, item in enumerate(items):
        ikey = (*key, i)
        sec = r.section(MetricSpec, item, ikey, "an objective")
        name = sec["name"]
        if name in (m.name for m in metrics):
            raise r.err((*ikey, "name"), f"objective {name!r} is listed twice; names are unique")
        direction = sec.get("direction") or _direction(
            r, name, (*ikey, "name"), f"objective.metrics[{i}].direction"
        )
        metrics.append(MetricSpec(name=name, direction=direction))
    return tuple(metrics)


def read_constraints(r: Reader, value: Any, key: Key) -> tuple[ConstraintSpec, ...]:
    """``objective.constraints``: unique metrics, each with a ``max`` and/or ``min`` (finite:
    the schema engine refuses infinities)."""
    items = _names_list(r, value, key, "constraints", "[{metric: n_params, max: 5.0e6}]")
    constraints: list[ConstraintSpec] = []
    for i, item in enumerate(items):
        ikey = (*key, i)
        sec = r.section(ConstraintSpec, item, ikey, "a constraint")
        metric = sec["metric"]
        if metric in (c.metric for c in constraints):
            raise r.err(
                (*ikey, "metric"),
                f"metric {metric!r} has two constraints; give one with both max and min",
            )
        low, high = sec.get("min"), sec.get("max")
        if low is None and high is None:
            raise r.err(ikey, f"the constraint on {metric!r} needs max, min or both")
        if low is not None and high is not None and low > high:
            raise r.err(
                (*ikey, "min"),
                f"min {low:g} is greater than max {high:g}: no value of {metric!r} is feasible",
            )
        constraints.append(ConstraintSpec(metric=metric, max=high, min=low))
    return tuple(constraints)


def read_objective(r: Reader, root: Mapping[str, Any]) -> ObjectiveSpec:
    key: Key = ("objective",)
    sec = r.section(ObjectiveSpec, root.get("objective"), key, "section 'objective'")
    reduce = sec.get("reduce", "best")
    constraints = ()
    if sec.get("constraints") is not None:
        constraints = read_constraints(r, sec["constraints"], (*key, "constraints"))
    if sec.get("metrics") is not None:
        for other in ("metric", "direction"):
            if other in sec:
                raise r.err(
                    (*key, other),
                    f"objective.{other} and objective.metrics are mutually exclusive: list "
                    "every objective under metrics, each with its own name and direction",
                )
        metrics = read_metrics(r, sec["metrics"], (*key, "metrics"))
        first = metrics[0]
        assert first.direction is not None
        return ObjectiveSpec(
            metric=first.name,
            direction=first.direction,
            reduce=reduce,
            metrics=metrics,
            constraints=constraints,
        )
    metric = sec.get("metric", "loss")
    direction = sec.get("direction") or _direction(
        r, metric, (*key, "metric"), "objective.direction"
    )
    return ObjectiveSpec(
        metric=metric,
        direction=direction,
        reduce=reduce,
        metrics=(MetricSpec(metric, direction),),
        constraints=constraints,
    )
