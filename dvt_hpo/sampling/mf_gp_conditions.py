"""What the multi-fidelity GP models, read from the study's finished trials: the parameters every
trial shares (as Optuna's ``IntersectionSearchSpace`` finds them), and the conditional ones it
can model too.

A parameter that some trials lack (a study file's ``when:``, or an objective that suggests it
only on some branch) is modelled when one categorical parameter that every finished trial has
decides whether it is there: the choices seen with it and the choices seen without it never
overlap, and together they are every choice. That is what ``when: {optimizer: SGD}`` makes, and
it tells for any candidate config whether the parameter applies. Where it does not, the GP gives
the parameter's columns a constant (:data:`ABSENT`), so the model compares configs with and
without it on what they share. A parameter no such rule explains (a condition on two
parameters, on a number, or on another conditional one) stays outside the model.

The rule is read from the trials, not from the study file, so that the sampler works for any
Optuna objective; a finished trial never changes, so each is read once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial

__all__ = ["ABSENT", "Conditions", "Rule"]

# The columns of a parameter a config does not have: the middle of the unit interval, as far from
# one end of a range as from the other, and for a categorical (one-hot) as far from every choice.
ABSENT = 0.5


@dataclass(frozen=True)
class Rule:
    """A conditional parameter is there exactly when ``parent`` (categorical, in every trial)
    takes one of the choices ``active`` (their indices)."""

    parent: str
    active: frozenset[int]

    def holds(self, parent_index: int) -> bool:
        return parent_index in self.active


class Conditions:
    """What the finished trials of one study showed: each parameter's distribution, and for
    each parameter and each categorical one, the categorical's choices seen with it and without
    it."""

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, study_name: str | None) -> None:
        self._study = study_name
        self._read: set[int] = set()
        self._dists: dict[str, BaseDistribution] = {}
        self._conflicting: set[str] = set()
        self._always: set[str] | None = None  # the parameters every trial read so far had
        self._choices: dict[str, set[int]] = {}  # categorical -> choices seen
        self._with: dict[str, dict[str, set[int]]] = {}  # param -> categorical -> choices
        self._without: dict[str, dict[str, set[int]]] = {}

    def read(self, study_name: str, trials: Iterable[FrozenTrial]) -> None:
        """Take in the finished ``trials`` not read yet (all of them for another study)."""
        if study_name != self._study:
            self._reset(study_name)
        for t in trials:
            if t.number not in self._read:
                self._read.add(t.number)
                self._take(t)

    def _take(self, t: FrozenTrial) -> None:
        names = set(t.distributions)
        for name, d in t.distributions.items():
            if name not in self._dists:
                self._dists[name] = d
                self._with[name] = {}
                # Every trial read before lacked it: each categorical's choices seen so far.
                self._without[name] = {p: set(seen) for p, seen in self._choices.items()}
            elif d != self._dists[name]:
                self._conflicting.add(name)
        chosen = {
            name: d.to_internal_repr(t.params[name])
            for name, d in t.distributions.items()
            if isinstance(d, CategoricalDistribution) and d == self._dists[name]
        }
        for name in self._dists:
            seen = self._with[name] if name in names else self._without[name]
            for parent, index in chosen.items():
                seen.setdefault(parent, set()).add(int(index))
        for parent, index in chosen.items():
            self._choices.setdefault(parent, set()).add(int(index))
        self._always = names if self._always is None else self._always & names

    def shared(self) -> dict[str, BaseDistribution]:
        """The parameters every trial read has, each with one distribution throughout, those
        with a single value left out (nothing to model)."""
        return {
            name: self._dists[name]
            for name in sorted(self._always or ())
            if name not in self._conflicting and not self._dists[name].single()
        }

    def rules(self) -> dict[str, Rule]:
        """Each conditional parameter the trials explain, by the first parent (by name) that
        does, with its distribution in :meth:`distributions`."""
        always = self._always or set()
        parents = [p for p, d in self.shared().items() if isinstance(d, CategoricalDistribution)]
        out: dict[str, Rule] = {}
        for name in sorted(set(self._dists) - always - self._conflicting):
            if self._dists[name].single():
                continue
            for parent in parents:
                present = self._with[name].get(parent, set())
                absent = self._without[name].get(parent, set())
                choices = len(self._dists[parent].choices)  # type: ignore[attr-defined]
                if present and not present & absent and len(present | absent) == choices:
                    out[name] = Rule(parent, frozenset(present))
                    break
        return out

    def distributions(self, names: Iterable[str]) -> dict[str, BaseDistribution]:
        return {name: self._dists[name] for name in names}
