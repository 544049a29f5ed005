"""``dvt-hpo report``: one self-contained HTML file of a study, readable with no network.

The plots are Optuna's own (``optuna.visualization``, plotly); plotly's JavaScript is inlined
once, in the first plot, so the file opens offline (an air-gapped cluster, an e-mail
attachment). plotly is the ``report`` extra.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec

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


def _trial_table(trials: list[optuna.trial.FrozenTrial], metric: str) -> str:
    names: list[str] = []
    for t in trials:
        names.extend(n for n in t.params if n not in names)
    head = ["trial", "state", metric, *names, "duration s", "batch size", "epochs", "reason"]
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for t in trials:
        attrs = t.user_attrs
        cells = [
            t.number,
            t.state.name,
            t.value,
            *(t.params.get(n) for n in names),
            attrs.get("duration_s"),
            attrs.get("batch_size"),
            attrs.get("epochs_reported"),
            attrs.get("reason"),
        ]
        rows.append(
            f'<tr class="{t.state.name}">'
            + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in cells)
            + "</tr>"
        )
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _sections(study: optuna.Study) -> list[tuple[str, Callable[[], Any] | str]]:
    """(title, figure factory or a note saying why the plot is skipped)."""
    from optuna import visualization as vis
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    with_steps = any(t.intermediate_values for t in study.get_trials(deepcopy=False))
    none = "no complete trial yet"
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


def render_report(study: optuna.Study, spec: StudySpec) -> str:
    _require_plotly()
    from dvt_hpo.storage import redact_url

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
            f"{redact_url(spec.study.storage)} · {spec.objective.direction} "
            f"{spec.objective.metric} · "
            + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
            + f" · written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
        )
        + "</div>",
    ]
    js_included = False
    for heading, plot in _sections(study):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(plot, str):
            parts.append(f'<p class="note">skipped: {html.escape(plot)}</p>')
            continue
        try:
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
    parts.append(_trial_table(trials, spec.objective.metric))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(spec: StudySpec, output: Path) -> None:
    """Render the spec's study to ``output`` (written atomically; nothing when it fails)."""
    from dvt_hpo.atomic import write_text_atomic
    from dvt_hpo.study_reader import open_existing_study

    _require_plotly()
    study = open_existing_study(spec)
    text = render_report(study, spec)
    try:
        write_text_atomic(output, text)
    except OSError as exc:
        raise DvtHpoError(f"cannot write {output}: {exc.strerror or exc}") from None


__all__ = ["render_report", "write_report"]
