"""How a trial process ended, as its typed result and exit code: one pure function.

:func:`result_of` takes what the entry point's call left (the metrics it returned, or the
exception that ended it, and the step the study pruned it at, if any) and gives the
:class:`~dvt_hpo.wire.result.TrialResult` to write and the exit code
(:mod:`dvt_hpo.wire.protocol`). Every rule is tested as a table, without processes.
"""

from __future__ import annotations

import dataclasses
import signal
import traceback
from collections.abc import Mapping
from typing import Any

from dvt_hpo.batch.search import is_out_of_memory
from dvt_hpo.exceptions import BatchSizeError, CommandFailed, TrialPruned, TrialStopped
from dvt_hpo.wire.protocol import EXIT_ERROR, EXIT_OK, EXIT_PRUNED, EXIT_STOPPED
from dvt_hpo.wire.result import TrialResult

_MAX_MESSAGE_CHARS = 4000
_MAX_TRACEBACK_CHARS = 20000


def result_of(
    ended: BaseException | None,
    *,
    metrics: Mapping[str, float] | None = None,
    pruned_step: int | None = None,
    rank: int = 0,
) -> tuple[TrialResult, int]:
    """The result and exit code of a trial whose entry point returned ``metrics`` (``ended``
    is None) or raised ``ended``; ``pruned_step`` is where the study pruned it, if it did."""
    if ended is None:
        if pruned_step is not None:
            # The entry point swallowed TrialPruned: the study pruned it all the same.
            return TrialResult("pruned", step=pruned_step, rank=rank), EXIT_PRUNED
        return TrialResult("ok", metrics=dict(metrics or {}), rank=rank), EXIT_OK
    if isinstance(ended, TrialPruned):
        return TrialResult("pruned", step=ended.step, rank=rank), EXIT_PRUNED
    if isinstance(ended, (TrialStopped, KeyboardInterrupt)):
        if pruned_step is not None:
            # Stopped while cleaning up after the prune: the prune is what happened.
            return TrialResult("pruned", step=pruned_step, rank=rank), EXIT_PRUNED
        name = ended.signal_name if isinstance(ended, TrialStopped) else "SIGINT"
        code = EXIT_STOPPED if name == "SIGTERM" else 128 + int(signal.SIGINT)
        return TrialResult("stopped", signal=name, rank=rank), code
    if isinstance(ended, SystemExit):
        if ended.code in (None, 0):
            return TrialResult("ok", rank=rank), EXIT_OK
        code = ended.code if isinstance(ended.code, int) and 0 < ended.code < 256 else EXIT_ERROR
        return TrialResult(
            "error",
            rank=rank,
            exc_type="SystemExit",
            message=f"the entry point called sys.exit({ended.code!r})",
            traceback=_format_traceback(ended),
        ), code
    return error_result(ended, rank), EXIT_ERROR


def error_result(exc: BaseException, rank: int) -> TrialResult:
    """The error result of an exception, small enough to make after a MemoryError."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the error
        message = f"<unprintable {type(exc).__name__}>"
    try:
        oom = is_out_of_memory(exc) or _search_ran_out_of_memory(exc)
    except Exception:
        oom = isinstance(exc, MemoryError)
    if isinstance(exc, CommandFailed):
        # The script's own error is the reason, and its traceback is in stderr.log already:
        # this process's exception and frames would only hide it.
        return TrialResult(
            "error",
            rank=rank,
            exc_type=_type_name(exc),
            message=message[:_MAX_MESSAGE_CHARS],
            reason=message[:_MAX_MESSAGE_CHARS],
            out_of_memory=exc.out_of_memory,
        )
    return TrialResult(
        "error",
        rank=rank,
        exc_type=_type_name(exc),
        message=message[:_MAX_MESSAGE_CHARS],
        traceback=_format_traceback(exc),
        out_of_memory=oom,
    )


def import_failed(
    result: TrialResult, exc: BaseException, entrypoint: str, log: str | None
) -> TrialResult:
    """``result`` of an entry point whose import failed, with a reason that names where (the
    innermost frame of the user's code, not the import machinery's) and the log that holds the
    traceback: every trial would fail alike, and the reason is all the run prints."""
    where = _where(exc)
    text = f"{result.exc_type}: {result.message or ''}".strip()
    reason = f"importing the entry point {entrypoint!r} failed{where}: {text}"
    if log is not None:
        reason += f" (traceback in {log})"
    return dataclasses.replace(result, reason=reason[:_MAX_MESSAGE_CHARS])


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and "importlib" not in f.filename
    ]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def metrics_of(returned: Any) -> dict[str, float]:
    """The entry point's return value as metrics: a dict of numbers, or None for none."""
    if returned is None:
        return {}
    if not isinstance(returned, Mapping):
        raise TypeError(
            "the entry point must return a dict of metrics or None, got "
            f"{type(returned).__name__}: {returned!r:.200}"
        )
    metrics: dict[str, float] = {}
    for key, value in returned.items():
        try:
            metrics[str(key)] = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"the entry point returned metric {key!r}={value!r:.100} "
                f"({type(value).__name__}); metrics must be numbers"
            ) from None
    return metrics


def _format_traceback(exc: BaseException) -> str:
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except MemoryError:
        tb = "<traceback unavailable: out of memory>"
    return "...\n" + tb[-_MAX_TRACEBACK_CHARS:] if len(tb) > _MAX_TRACEBACK_CHARS else tb


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return (
        cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
    )


def _search_ran_out_of_memory(exc: BaseException) -> bool:
    """A batch-size search that found no size because its probes ran out of memory (the
    smallest size did not fit): the memory is the cause, as the probe records say."""
    return isinstance(exc, BatchSizeError) and any(
        getattr(record, "oom", False) for record in getattr(exc, "probes", ())
    )


__all__ = ["error_result", "import_failed", "metrics_of", "result_of"]
