"""The ``dvt-hpo`` command line.

Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted, 141 its output's reader
closed the pipe (``| head``), as a tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dvt_hpo.exceptions import DvtHpoError, SpecError

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field of the file (VALUE is YAML), e.g. --set study.n_trials=20",
    )


def _version_line() -> str:
    """``dvt-hpo 0.1.0 (optuna 5.0.0, Python 3.11.7)``: what a bug report needs, read from the
    installed metadata (importing optuna would cost half a second)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from dvt_hpo import __version__

    try:
        optuna_version = version("optuna")
    except PackageNotFoundError:  # pragma: no cover - optuna is a dependency
        optuna_version = "not installed"
    return f"dvt-hpo {__version__} (optuna {optuna_version}, Python {platform.python_version()})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dvt-hpo",
        description="Hyperparameter optimization of PyTorch training, one process per trial.",
    )
    parser.add_argument("--version", action="version", version=_version_line())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run or resume the study of a study.yaml")
    run.add_argument("study", type=Path, help="the study file")
    _add_overrides(run)
    run.add_argument(
        "--allow-space-change",
        action="store_true",
        help="accept a search space that differs from the one stored in the study",
    )
    run.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        metavar="K",
        help="run K orchestrators of this study on this machine, the devices split among them",
    )
    run.add_argument(
        "--retry-failed",
        action="store_true",
        help="run each failed trial's params once more (counted within study.n_trials)",
    )

    submit = sub.add_parser(
        "submit", help="run the study's workers as a Slurm job array (section cluster)"
    )
    submit.add_argument("study", type=Path, help="the study file")
    _add_overrides(submit)
    submit.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="array tasks, each one worker (default: cluster.workers)",
    )
    submit.add_argument(
        "--allow-space-change",
        action="store_true",
        help="as for run: accept a search space that differs from the stored study's",
    )

    cancel = sub.add_parser(
        "cancel",
        help="cancel the study's Slurm jobs; their running trials are retried by the next run",
    )
    cancel.add_argument("study", type=Path, help="the study file")
    cancel.add_argument(
        "--discard-paused",
        action="store_true",
        help="no resume wanted: also delete every paused trial's state (trials.pause), once "
        "no trial runs",
    )
    _add_overrides(cancel)

    validate = sub.add_parser("validate", help="check a study.yaml without running anything")
    validate.add_argument("study", type=Path, help="the study file")
    _add_overrides(validate)
    validate.add_argument(
        "--allow-space-change",
        action="store_true",
        help="as for run: accept a search space that differs from the stored study's",
    )

    best = sub.add_parser(
        "best",
        help="show the best trial (several objectives: the Pareto front); optionally export one",
    )
    best.add_argument("study", type=Path, help="the study file")
    _add_overrides(best)
    best.add_argument(
        "--export",
        type=Path,
        metavar="FILE",
        help="write the best trial's (or --trial N's) full trainer config (checkpointing on) "
        "as YAML",
    )
    best.add_argument(
        "--trial",
        type=_non_negative_int,
        metavar="N",
        help="show (and --export) trial N, any complete trial; needed to export from a study "
        "with several objectives",
    )

    train = sub.add_parser(
        "train",
        help="train one trainer config (built-in trainer), or rerun a command trainer's "
        "best --export",
    )
    train.add_argument(
        "config", type=Path, help="a TrainerConfig YAML file, or a command trainer's export"
    )
    _add_overrides(train)

    status = sub.add_parser("status", help="counts, best, running trials and last failures")
    status.add_argument("study", type=Path, help="the study file")
    _add_overrides(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")

    report = sub.add_parser("report", help="write a self-contained HTML report of the study")
    report.add_argument("study", type=Path, help="the study file")
    _add_overrides(report)
    report.add_argument(
        "-o", "--output", type=Path, default=Path("report.html"), help="the HTML file to write"
    )

    dashboard = sub.add_parser("dashboard", help="serve optuna-dashboard on the study's storage")
    dashboard.add_argument("study", type=Path, help="the study file")
    _add_overrides(dashboard)
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    dashboard.add_argument("--port", type=int, default=8080, help="port to listen on")
    return parser


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an int >= ``minimum``, refused as ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    return parse


_non_negative_int = _int_at_least(0, "a trial number (>= 0)")
_positive_int = _int_at_least(1, "an integer >= 1")


def _cmd_run(args: argparse.Namespace) -> int:
    from dvt_hpo.run.preflight import load_runnable
    from dvt_hpo.run.runner import study_runner
    from dvt_hpo.store.compat import check_stored_study

    spec = load_runnable(args.study, args.overrides)
    # Before the storage is opened for writing: a refused run writes nothing.
    check_stored_study(spec, allow_space_change=args.allow_space_change)
    spec = _as_the_user_wrote_it(spec)
    if args.workers > 1:
        from dvt_hpo.study.seeding import warm_start_unless_seeded
        from dvt_hpo.study.workers import run_workers

        # Its refusals once here, as submit does, not once per worker ([wN] error: ...).
        warm_start_unless_seeded(spec)
        return run_workers(
            spec,
            args.overrides,
            args.workers,
            allow_space_change=args.allow_space_change,
            retry_failed=args.retry_failed,
        )
    study_runner(
        spec, allow_space_change=args.allow_space_change, retry_failed=args.retry_failed
    ).run()
    return EXIT_OK


def _cmd_submit(args: argparse.Namespace) -> int:
    from dvt_hpo.cluster.submit import submit_study, submitted_lines
    from dvt_hpo.run.preflight import load_runnable
    from dvt_hpo.store.compat import check_stored_study
    from dvt_hpo.study.seeding import warm_start_unless_seeded
    from dvt_hpo.studyfile import load_spec

    spec = load_spec(args.study, args.overrides)
    gpus = spec.cluster.gpus_per_worker if spec.cluster is not None else 0
    # What run checks beyond the file, here rather than in every worker's log; the GPUs are
    # the nodes', not this login node's.
    if not gpus:
        load_runnable(args.study, [*args.overrides, "trials.devices=cpu"])
    check_stored_study(spec, allow_space_change=args.allow_space_change)
    warm_start_unless_seeded(spec)  # its refusals here, not in every worker's log
    submitted = submit_study(
        spec, args.overrides, workers=args.workers, allow_space_change=args.allow_space_change
    )
    for line in submitted_lines(spec, submitted, args.overrides):
        print(line)
    return EXIT_OK


def _cmd_cancel(args: argparse.Namespace) -> int:
    from dvt_hpo.cluster.jobs import cancel_study
    from dvt_hpo.studyfile import load_spec

    cancel_study(
        load_spec(args.study, args.overrides), out=print, discard_paused=args.discard_paused
    )
    return EXIT_OK


def _as_the_user_wrote_it(spec: StudySpec) -> StudySpec:
    """A ``--workers`` worker's spec with the user's overrides for the commands it prints
    (not the device overrides its parent added)."""
    import dataclasses
    import json

    from dvt_hpo.study.workers import ENV_SHOWN_OVERRIDES

    shown = os.environ.get(ENV_SHOWN_OVERRIDES)
    if shown is None:
        return spec
    try:
        overrides = json.loads(shown)
    except ValueError:
        return spec
    if not (isinstance(overrides, list) and all(isinstance(o, str) for o in overrides)):
        return spec
    return dataclasses.replace(spec, overrides=tuple(overrides))


def _cmd_validate(args: argparse.Namespace) -> int:
    from dvt_hpo.run.preflight import find_entrypoint, load_runnable
    from dvt_hpo.study.messages import spec_algorithms_text
    from dvt_hpo.study.seeding import seeds_text, warm_start_unless_seeded
    from dvt_hpo.studyfile.objective import describe_objective

    spec = load_runnable(args.study, args.overrides)
    stored = _stored_comparison(spec, args.allow_space_change)
    seeds = warm_start_unless_seeded(spec)  # its refusals are run's
    dims = ", ".join(d.name for d in spec.search_space)
    n = spec.study.n_trials
    budget = f"{n} trial{'s' if n != 1 else ''}" if n is not None else "no trial limit"
    note = None
    if spec.trainer.command is not None:
        trainer = f"command {shlex.join(spec.trainer.command)}"
    else:
        entry = find_entrypoint(spec.trainer.entrypoint, spec.path.parent)
        trainer = f"entry point {spec.trainer.entrypoint} from {entry.origin}"
        note = entry.note
    print(
        f"{args.study}: ok — study {spec.study.name!r}, {budget}, "
        f"{describe_objective(spec.objective)}, search space: {dims}; "
        f"{spec_algorithms_text(spec)}; "
        f"{trainer}; {stored}" + _packing(spec)
    )
    if seeds is not None:
        print(seeds_text(spec, seeds))
    if note is not None:
        print(f"note: {note}")
    return EXIT_OK


def _packing(spec: StudySpec) -> str:
    """With ``trials.per_gpu``: how many trials each GPU runs (as the run's start line)."""
    from dvt_hpo.devices.slots import packing_text, split_devices

    trials = spec.trials
    if trials.per_gpu == 1:
        return ""
    slots = split_devices(
        trials.devices,
        trials.parallel,
        nproc_per_node=trials.nproc_per_node,
        per_gpu=trials.per_gpu,
    )
    return f"; {trials.parallel} trials at a time, {packing_text(slots, trials.per_gpu)}"


def _stored_comparison(spec: StudySpec, allow_space_change: bool) -> str:
    """What ``validate`` says of the stored study (printing the accepted changes and notes)."""
    from dvt_hpo.store.compat import check_stored_study

    stored, comparison = check_stored_study(spec, allow_space_change=allow_space_change)
    if stored is None or comparison is None:
        return "no stored study yet"
    if comparison.space_changes:
        print("search space changed: " + "; ".join(comparison.space_changes))
    for note in comparison.notes:
        print(f"note: {note}")
    trials = f"{stored.n_trials} trial{'s' if stored.n_trials != 1 else ''}"
    same = "same objective" + ("" if comparison.space_changes else " and search space")
    return f"stored study: {trials}, {same}"


def _cmd_best(args: argparse.Namespace) -> int:
    import optuna
    import yaml

    from dvt_hpo.atomic import write_text_atomic
    from dvt_hpo.spec.model import BUILTIN_ENTRYPOINT
    from dvt_hpo.store.opening import StudyAt
    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.best import best_config, show_best

    if args.export is not None:
        _check_export_path(args.export)
    spec = load_spec(args.study, args.overrides)
    opened = StudyAt.of(spec).load()
    study, storage = opened.study, opened.storage
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise DvtHpoError(f"study {spec.study.name!r} has no completed trial yet")
    best = show_best(
        spec, study, trial_number=args.trial, export=args.export is not None, out=print
    )
    if args.export is not None:
        config, as_ran = best_config(spec, study, storage, best)
        if spec.trainer.command is not None:
            from dvt_hpo.command.export import command_export

            # A command trainer has no config to train: its export is the trial's command.
            config = command_export(spec, best, config, args.export)
        elif spec.trainer.entrypoint != BUILTIN_ENTRYPOINT:
            from dvt_hpo.train.export import entrypoint_export

            # Another trainer's config means nothing without its entry point: name it.
            config = entrypoint_export(
                spec.study.name, best.number, spec.trainer.entrypoint, spec.path.parent, config
            )
        try:
            write_text_atomic(args.export, yaml.safe_dump(config, sort_keys=False))
        except OSError as exc:
            raise DvtHpoError(f"cannot write --export {args.export}: {exc.strerror}") from None
        print(f"wrote {args.export}; rerun the trial with: dvt-hpo train {args.export}")
        if not as_ran:
            print(
                f"note: trial {best.number} ran before dvt-hpo stored trial configs: its config "
                "is rebuilt from today's study file and --set overrides"
            )
    return EXIT_OK


def _check_export_path(path: Path) -> None:
    """A path ``--export`` can write, checked before the study is opened (bad input, exit 2).
    Its folder is not created: a mistyped folder is more likely than a wanted new one."""
    folder = path.parent
    problem = None
    if path.is_dir():
        problem = "is a folder; give a file name such as best.yaml"
    else:
        existing = next(p for p in (folder, *folder.parents) if p.exists() or p == p.parent)
        if not existing.is_dir():
            problem = f"{str(existing)!r} is not a folder"
        elif existing != folder:
            problem = f"folder {str(folder)!r} does not exist; create it first"
        elif not os.access(folder, os.W_OK):
            problem = f"folder {str(folder)!r} is not writable"
    if problem is not None:
        raise SpecError(problem, file=f"--export {path}")


def _cmd_train(args: argparse.Namespace) -> int:
    from dvt_hpo.command.export import read_command_export, run_command_export
    from dvt_hpo.train import train_file
    from dvt_hpo.train.export import read_entrypoint_export, run_export

    trained = read_entrypoint_export(args.config)
    if trained is not None:  # another entry point's `best --export`
        if args.overrides:
            raise SpecError(
                "an entry-point export takes no --set: edit its config in the file",
                file=f"--set {args.overrides[0]}",
            )
        run_export(trained)
        return EXIT_OK
    export = read_command_export(args.config)
    if export is not None:  # a command trainer's `best --export`
        if args.overrides:
            raise SpecError(
                "a command export takes no --set: edit its command in the file",
                file=f"--set {args.overrides[0]}",
            )
        run_command_export(export)
        return EXIT_OK
    train_file(args.config, args.overrides)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.status import show_status

    print(show_status(load_spec(args.study, args.overrides), as_json=args.json))
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.html_report import write_report

    write_report(load_spec(args.study, args.overrides), args.output)
    print(f"wrote {args.output}")
    return EXIT_OK


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.dashboard import serve

    serve(load_spec(args.study, args.overrides), host=args.host, port=args.port)
    return EXIT_OK


_COMMANDS = {
    "run": _cmd_run,
    "submit": _cmd_submit,
    "cancel": _cmd_cancel,
    "validate": _cmd_validate,
    "best": _cmd_best,
    "train": _cmd_train,
    "status": _cmd_status,
    "report": _cmd_report,
    "dashboard": _cmd_dashboard,
}


def main(argv: Sequence[str] | None = None) -> int:
    from dvt_hpo.study.library_warnings import said_once

    args = build_parser().parse_args(argv)
    try:
        # Libraries' warnings (Optuna's above all) as one line each, once per run.
        with said_once():
            return _COMMANDS[args.command](args)
    except SpecError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `dvt-hpo status --json | head`: the reader has what it wanted. End quietly as a tool
        # killed by SIGPIPE would, with nothing left to flush into the closed pipe at exit.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except DvtHpoError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - a runtime failure is one line, never a traceback
        print(f"error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE


def _one_line(exc: BaseException) -> str:
    """A runtime error as one line: whitespace folded, URLs' passwords redacted, bounded."""
    import re

    from dvt_hpo.text.redact import redact_url

    text = str(exc)
    # A DataLoader worker's error is re-raised as its own type around the worker's whole
    # traceback; its last line is the error itself.
    if "\nOriginal Traceback" in text:
        last = text.strip().splitlines()[-1]
        prefix = f"{type(exc).__module__}.{type(exc).__qualname__}: "
        text = last[len(prefix) :] if last.startswith(prefix) else last
    text = " ".join(text.split())
    text = re.sub(r"[A-Za-z][\w+.\-]*://\S+", lambda m: redact_url(m.group(0)), text)
    return text if len(text) <= 1000 else text[:1000] + " ..."


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
