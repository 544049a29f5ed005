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
    run.add_argument(
        "--retry-failed",
        action="store_true",
        help="run each failed trial's params once more (counted within study.n_trials)",
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
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from dvt_hpo.spec import load_spec
    from dvt_hpo.study_loop import StudyRunner

    spec = load_spec(args.study, args.overrides, check_runnable=True)
    StudyRunner(
        spec, allow_space_change=args.allow_space_change, retry_failed=args.retry_failed
    ).run()
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

    from dvt_hpo.atomic import write_text_atomic
    from dvt_hpo.best import best_config
    from dvt_hpo.spec import load_spec
    from dvt_hpo.storage import journal_path, open_storage, redact_url, sqlite_path

    spec = load_spec(args.study, args.overrides)
    if args.export is not None and not args.export.parent.is_dir():
        # Checked before the storage is opened: bad input writes nothing anywhere.
        raise SpecError(
            f"folder {str(args.export.parent)!r} does not exist (or is not a folder); "
            "create it first",
            field="--export",
        )
    # Opening a missing SQLite file or journal would create it.
    db = sqlite_path(spec.study.storage) or journal_path(spec.study.storage)
    if db is not None and not db.exists():
        raise DvtHpoError(f"no study yet: {db} does not exist; run `dvt-hpo run {args.study}`")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(spec.study.storage)
    except Exception as exc:  # noqa: BLE001 - unreachable server, missing database, ...
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DvtHpoError(
            f"cannot open study.storage {redact_url(spec.study.storage)}: "
            f"{type(exc).__name__}: {first}"
        ) from None
    try:
        study = optuna.load_study(study_name=spec.study.name, storage=storage)
    except KeyError:
        raise DvtHpoError(
            f"study {spec.study.name!r} is not in {redact_url(spec.study.storage)}"
        ) from None
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
        config, as_ran = best_config(spec, study, storage)
        try:
            write_text_atomic(args.export, yaml.safe_dump(config, sort_keys=False))
        except OSError as exc:
            raise DvtHpoError(f"cannot write --export {args.export}: {exc.strerror}") from None
        print(f"wrote {args.export}")
        if not as_ran:
            print(
                f"note: trial {best.number} ran before dvt-hpo stored trial configs: its config "
                "is rebuilt from today's study file and --set overrides"
            )
    return EXIT_OK


def _cmd_train(args: argparse.Namespace) -> int:
    from dvt_hpo.train import train_file

    train_file(args.config, args.overrides)
    return EXIT_OK


_COMMANDS = {
    "run": _cmd_run,
    "validate": _cmd_validate,
    "best": _cmd_best,
    "train": _cmd_train,
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
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - a runtime failure is one line, never a traceback
        print(f"error: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILURE


def _one_line(message: str) -> str:
    """A runtime error as one line: whitespace folded, URLs' passwords redacted, bounded."""
    import re

    from dvt_hpo.storage import redact_url

    message = " ".join(message.split())
    message = re.sub(r"[A-Za-z][\w+.\-]*://\S+", lambda m: redact_url(m.group(0)), message)
    return message if len(message) <= 1000 else message[:1000] + " ..."


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
