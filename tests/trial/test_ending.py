"""How a trial process ended -> its typed result and exit code: the pure rule, as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from dvt_hpo.exceptions import CommandFailed, TrialPruned, TrialStopped
from dvt_hpo.trial.ending import metrics_of, result_of
from dvt_hpo.wire.protocol import EXIT_ERROR, EXIT_OK, EXIT_PRUNED, EXIT_STOPPED
from dvt_hpo.wire.result import TrialResult

CASES = [
    # (ended, pruned_step, status, step/signal, exit code)
    (None, None, "ok", None, EXIT_OK),
    (None, 4, "pruned", 4, EXIT_PRUNED),  # TrialPruned swallowed by the entry point
    (TrialPruned(2), None, "pruned", 2, EXIT_PRUNED),
    (TrialStopped("SIGTERM"), None, "stopped", "SIGTERM", EXIT_STOPPED),
    (TrialStopped("SIGTERM"), 3, "pruned", 3, EXIT_PRUNED),  # stopped while cleaning up a prune
    (KeyboardInterrupt(), None, "stopped", "SIGINT", 130),
    (SystemExit(0), None, "ok", None, EXIT_OK),
    (SystemExit(None), None, "ok", None, EXIT_OK),
    (SystemExit(7), None, "error", None, 7),
    (SystemExit("text"), None, "error", None, EXIT_ERROR),
    (ValueError("bad lr 0.3"), None, "error", None, EXIT_ERROR),
]


@pytest.mark.parametrize(("ended", "pruned", "status", "detail", "code"), CASES)
def test_every_ending_has_one_result_and_code(
    ended: BaseException | None, pruned: int | None, status: str, detail: object, code: int
) -> None:
    result, exit_code = result_of(ended, metrics={"f1": 0.5}, pruned_step=pruned, rank=1)
    assert (result.status, exit_code, result.rank) == (status, code, 1)
    if status == "pruned":
        assert result.step == detail
    if status == "stopped":
        assert result.signal == detail
    assert result.failed == (status == "error")
    # Each result survives its trip through the file as the same typed value.
    assert TrialResult.from_json(result.to_json()) == result


def test_an_ok_result_carries_the_returned_metrics_only_when_the_entry_point_returned() -> None:
    assert result_of(None, metrics={"f1": 0.5})[0].metrics == {"f1": 0.5}
    assert result_of(SystemExit(0), metrics={"f1": 0.5})[0].metrics == {}


def test_an_error_names_its_type_message_and_traceback() -> None:
    try:
        raise ValueError("bad lr 0.3")
    except ValueError as exc:
        result, _ = result_of(exc)
    assert (result.exc_type, result.message) == ("ValueError", "bad lr 0.3")
    assert result.traceback and "ValueError: bad lr 0.3" in result.traceback
    assert result.out_of_memory is False


def test_out_of_memory_is_classified_on_the_live_exception() -> None:
    assert result_of(MemoryError())[0].out_of_memory is True
    assert result_of(RuntimeError("CUDA out of memory. Tried to allocate"))[0].out_of_memory


def test_a_failed_command_is_its_own_reason_without_our_traceback() -> None:
    result, code = result_of(CommandFailed("command exited with 3: X", out_of_memory=True))
    assert (result.reason, result.traceback, result.out_of_memory, code) == (
        "command exited with 3: X",
        None,
        True,
        EXIT_ERROR,
    )


def test_a_sys_exit_names_its_code() -> None:
    result, code = result_of(SystemExit(7))
    assert (result.exc_type, result.message, code) == (
        "SystemExit",
        "the entry point called sys.exit(7)",
        7,
    )


def test_an_unprintable_exception_still_gives_a_result() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert result_of(Broken())[0].message == "<unprintable Broken>"


@pytest.mark.parametrize(
    ("returned", "error"),
    [([1], "must return a dict of metrics or None"), ({"f1": "x"}, "metrics must be numbers")],
)
def test_metrics_of_refuses_what_is_not_a_dict_of_numbers(returned: object, error: str) -> None:
    with pytest.raises(TypeError, match=error):
        metrics_of(returned)
    assert metrics_of({"f1": 1}) == {"f1": 1.0} and metrics_of(None) == {}


@pytest.mark.parametrize(
    ("source", "line", "says"),
    [
        ("import math\nx = undefined_name + 1\n", 2, "NameError: name 'undefined_name'"),
        ("def run(config, ctx:\n    pass\n", 1, "SyntaxError: "),
    ],
)
def test_an_entry_point_that_fails_at_import_names_its_file_line_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, line: int, says: str
) -> None:
    """Every trial fails alike and the reason is all the run prints: it says where."""
    import importlib

    from dvt_hpo.trial.ending import import_failed

    (tmp_path / "brokentrainer.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Exception) as info:
        importlib.import_module("brokentrainer")
    result, _ = result_of(info.value)
    log = str(tmp_path / "trial-0000" / "stderr.log")
    reason = import_failed(result, info.value, "brokentrainer:run", log).reason
    assert reason is not None
    assert reason.startswith(
        f"importing the entry point 'brokentrainer:run' failed at "
        f"{tmp_path / 'brokentrainer.py'}:{line}: "
    ), reason
    assert says in reason and reason.endswith(f"(traceback in {log})")
    # A payload rerun by hand prints the traceback on the terminal: no log to name.
    assert "traceback in" not in (import_failed(result, info.value, "m:run", None).reason or "")
