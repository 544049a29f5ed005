"""``dvt-hpo report``: one self-contained HTML file of a study, readable with no network.

The plots are Optuna's own (``optuna.visualization``, plotly); plotly's JavaScript is inlined
once, in the first plot, so the file opens offline (an air-gapped cluster, an e-mail
attachment). plotly is the ``report`` extra.
"""

from __future__ import annotations

import html
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.optuna_api.private import storage_of, study_id_of
from dvt_hpo.results.front import no_feasible_message, select_best
from dvt_hpo.results.outcome import reason_of
from dvt_hpo.sampling.constraints import constraints_of, feasible
from dvt_hpo.studyfile.objective import describe_objective

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { margin-bottom: 0.2em; }
.meta { color: #555; margin-bottom: 1.5em; }
.note { color: #8a5a00; background: #fff6e0; padding: 0.6em 1em; border-radius: 4px; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; }
tr.FAIL td { color: #a00; }
tr.PRUNED td { color: #777; }
"""


def _require_plotly() -> None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise DvtHpoError("dvt-hpo report needs plotly: pip install 'dvt-hpo[report]'") from None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else str(value)


def _trial_table(
    trials: list[optuna.trial.FrozenTrial], metrics: list[str], constrained: bool = False
) -> str:
    names: list[str] = []
    for t in trials:
        names.extend(n for n in t.params if n not in names)
    feasible_column = ["feasible"] if constrained else []
    head = [
        "trial",
        "state",
        *metrics,
        *feasible_column,
        *names,
        "duration s",
        "batch size",
        "epochs",
        "reason",
    ]
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for t in trials:
        attrs = t.user_attrs
        values = list(t.values) if t.values is not None else []
        values += [None] * (len(metrics) - len(values))
        stored = constraints_of(t.system_attrs)
        cells = [
            t.number,
            t.state.name,
            *values[: len(metrics)],
            *(([_feasible_cell(stored)]) if constrained else []),
            *(t.params.get(n) for n in names),
            attrs.get("duration_s"),
            attrs.get("batch_size"),
            attrs.get("epochs_reported"),
            reason_of(t.state.name, attrs),
        ]
        rows.append(
            f'<tr class="{t.state.name}">'
            + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in cells)
            + "</tr>"
        )
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _feasible_cell(values: tuple[float, ...] | None) -> str | None:
    if values is None:
        return None  # failed, or running: nothing to judge
    return "yes" if feasible(values) else "no"


def _sections(
    study: optuna.Study, metrics: list[str] | None = None, constrained: bool = False
) -> list[tuple[str, Callable[[], Any] | str]]:
    """(title, figure factory or a note saying why the plot is skipped). With several
    objectives: the Pareto front (infeasible trials marked), then each objective's history."""
    from optuna import visualization as vis
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    with_steps = any(t.intermediate_values for t in study.get_trials(deepcopy=False))
    none = "no complete trial yet"
    metrics = metrics or ["value"]
    if len(metrics) > 1:
        # Infeasible trials are marked from their stored constraint values (Optuna >= 4).
        kwargs: dict[str, Any] = {"target_names": metrics}
        sections: list[tuple[str, Callable[[], Any] | str]] = [
            ("Pareto front", (lambda: vis.plot_pareto_front(study, **kwargs)) if complete else none)
        ]
        for i, name in enumerate(metrics):
            sections.append(
                (
                    f"Optimization history: {name}",
                    (
                        lambda i=i, name=name: vis.plot_optimization_history(
                            study, target=lambda t: t.values[i], target_name=name
                        )
                    )
                    if complete
                    else none,
                )
            )
        sections.append(
            (
                f"Parameter importances for {metrics[0]}",
                (
                    lambda: vis.plot_param_importances(
                        study, target=lambda t: t.values[0], target_name=metrics[0]
                    )
                )
                if len(complete) >= 2
                else "needs at least 2 complete trials",
            )
        )
        return sections
    return [
        (
            "Optimization history",
            (lambda: vis.plot_optimization_history(study)) if complete else none,
        ),
        (
            "Parameter importances",
            (lambda: vis.plot_param_importances(study))
            if len(complete) >= 2
            else "needs at least 2 complete trials",
        ),
        (
            "Parallel coordinates",
            (lambda: vis.plot_parallel_coordinate(study)) if complete else none,
        ),
        (
            "Intermediate values (learning curves; pruned trials included)",
            (lambda: vis.plot_intermediate_values(study))
            if with_steps
            else "no trial reported an epoch yet",
        ),
    ]


def _best_text(study: optuna.Study, spec: StudySpec) -> str:
    """The best feasible trial, the front's trial numbers, or that none is feasible."""
    objective = spec.objective
    best = select_best(study.get_trials(deepcopy=False), objective.directions)
    if best.none_feasible:
        return no_feasible_message(best, spec.study.name, [c.metric for c in objective.constraints])
    if not best.trials:
        return "no complete trial yet"
    if objective.is_multi:
        return f"Pareto front (feasible): trials {', '.join(str(t.number) for t in best.trials)}"
    top = best.trials[0]
    return f"best trial {top.number}: {objective.metric}={top.values[0]:.6g}"


def render_report(study: optuna.Study, spec: StudySpec) -> str:
    _require_plotly()
    from dvt_hpo.budget.compute import status_line
    from dvt_hpo.text.redact import redact_url

    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    title = f"dvt-hpo study {spec.study.name}"
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<div class="meta">'
        + html.escape(
            f"{redact_url(spec.study.storage)} · {describe_objective(spec.objective)} · "
            + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
            + f" · written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
        )
        + "</div>",
        f"<p>{html.escape(_best_text(study, spec))}</p>",
    ]
    budget = status_line(storage_of(study), study_id_of(study), spec)
    if budget is not None:
        parts.append(f'<p class="budget">budget: {html.escape(budget)}</p>')
    js_included = False
    constrained = bool(spec.objective.constraints)
    for heading, plot in _sections(study, list(spec.objective.names), constrained):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(plot, str):
            parts.append(f'<p class="note">skipped: {html.escape(plot)}</p>')
            continue
        try:
            with warnings.catch_warnings():
                # Optuna's notes on custom targets and experimental plots are not the reader's.
                warnings.simplefilter("ignore")
                figure = plot()
        except Exception as exc:  # noqa: BLE001 - e.g. the importance evaluator on odd data
            parts.append(
                f'<p class="note">skipped: {html.escape(type(exc).__name__)}: '
                f"{html.escape(str(exc))}</p>"
            )
            continue
        # The JS once, inline: the file must open without a network.
        parts.append(figure.to_html(full_html=False, include_plotlyjs=not js_included))
        js_included = True
    parts.append(f"<h2>Trials ({len(trials)})</h2>")
    parts.append(_trial_table(trials, list(spec.objective.names), constrained))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(spec: StudySpec, output: Path) -> None:
    """Render the spec's study to ``output`` (written atomically; nothing when it fails)."""
    from dvt_hpo.atomic import write_text_atomic
    from dvt_hpo.store.opening import StudyAt

    _require_plotly()
    study = StudyAt.of(spec).load().study
    text = render_report(study, spec)
    try:
        write_text_atomic(output, text)
    except OSError as exc:
        raise DvtHpoError(f"cannot write {output}: {exc.strerror or exc}") from None


__all__ = ["render_report", "write_report"]
