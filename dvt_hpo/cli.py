"""The ``dvt-hpo`` command line.

Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dvt_hpo.exceptions import DvtHpoError, SpecError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field of the file (VALUE is YAML), e.g. --set study.n_trials=20",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dvt-hpo",
        description="Hyperparameter optimization of PyTorch training, one process per trial.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run or resume the study of a study.yaml")
    run.add_argument("study", type=Path, help="the study file")
    _add_overrides(run)
    run.add_argument(
        "--allow-space-change",
        action="store_true",
        help="accept a search space that differs from the one stored in the study",
    )

    validate = sub.add_parser("validate", help="check a study.yaml without running anything")
    validate.add_argument("study", type=Path)
    _add_overrides(validate)

    best = sub.add_parser("best", help="show the best trial; optionally export its config")
    best.add_argument("study", type=Path)
    _add_overrides(best)
    best.add_argument(
        "--export",
        type=Path,
        metavar="FILE",
        help="write the best trial's full trainer config (checkpointing on) as YAML",
    )

    train = sub.add_parser("train", help="train one trainer config (built-in trainer)")
    train.add_argument("config", type=Path, help="a TrainerConfig YAML file")
    _add_overrides(train)

    status = sub.add_parser("status", help="counts, best, running trials and last failures")
    status.add_argument("study", type=Path)
    _add_overrides(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")

    report = sub.add_parser("report", help="write a self-contained HTML report of the study")
    report.add_argument("study", type=Path)
    _add_overrides(report)
    report.add_argument(
        "-o", "--output", type=Path, default=Path("report.html"), help="default: report.html"
    )

    dashboard = sub.add_parser("dashboard", help="serve optuna-dashboard on the study's storage")
    dashboard.add_argument("study", type=Path)
    _add_overrides(dashboard)
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    dashboard.add_argument("--port", type=int, default=8080, help="default: 8080")
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from dvt_hpo.spec import load_spec
    from dvt_hpo.study_loop import StudyRunner

    spec = load_spec(args.study, args.overrides, check_runnable=True)
    StudyRunner(spec, allow_space_change=args.allow_space_change).run()
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from dvt_hpo.spec import load_spec
    from dvt_hpo.spec.load import entrypoint_origin

    spec = load_spec(args.study, args.overrides, check_runnable=True)
    origin = entrypoint_origin(spec.trainer.entrypoint, spec.path.parent)
    dims = ", ".join(d.name for d in spec.search_space)
    n = spec.study.n_trials
    budget = f"{n} trial{'s' if n != 1 else ''}" if n is not None else "no trial limit"
    print(
        f"{args.study}: ok — study {spec.study.name!r}, {budget}, "
        f"{spec.objective.direction} {spec.objective.metric} ({spec.objective.reduce}), "
        f"search space: {dims}; entry point {spec.trainer.entrypoint} from {origin}"
    )
    return EXIT_OK


def _cmd_best(args: argparse.Namespace) -> int:
    import optuna
    import yaml

    from dvt_hpo.best import best_config
    from dvt_hpo.spec import load_spec
    from dvt_hpo.study_reader import open_existing_study

    spec = load_spec(args.study, args.overrides)
    study = open_existing_study(spec)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise DvtHpoError(f"study {spec.study.name!r} has no completed trial yet")
    best = study.best_trial
    print(f"best trial {best.number}: {spec.objective.metric}={best.value:.6g}")
    for name, value in best.params.items():
        print(f"  {name}: {value}")
    if "batch_size" in best.user_attrs:
        print(f"  batch size found: {best.user_attrs['batch_size']}")
    if args.export is not None:
        config = best_config(spec, study)
        args.export.write_text(yaml.safe_dump(config, sort_keys=False))
        print(f"wrote {args.export}")
    return EXIT_OK


def _cmd_train(args: argparse.Namespace) -> int:
    from dvt_hpo.train import train_file

    train_file(args.config, args.overrides)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from dvt_hpo.spec import load_spec
    from dvt_hpo.status import show_status

    print(show_status(load_spec(args.study, args.overrides), as_json=args.json))
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from dvt_hpo.html_report import write_report
    from dvt_hpo.spec import load_spec

    write_report(load_spec(args.study, args.overrides), args.output)
    print(f"wrote {args.output}")
    return EXIT_OK


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from dvt_hpo.dashboard import serve
    from dvt_hpo.spec import load_spec

    serve(load_spec(args.study, args.overrides), host=args.host, port=args.port)
    return EXIT_OK


_COMMANDS = {
    "run": _cmd_run,
    "validate": _cmd_validate,
    "best": _cmd_best,
    "train": _cmd_train,
    "status": _cmd_status,
    "report": _cmd_report,
    "dashboard": _cmd_dashboard,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DvtHpoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
