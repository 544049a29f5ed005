"""The search suite: every cell on every family's tasks, in one process (the replay) or through
``dvt-hpo run``, results in one compressed JSON-lines file per grid.

    python benchmarks/search/suite.py --quick     # CI: 4 families x 3 cells, through dvt-hpo run
    python benchmarks/search/suite.py --grid screen --half selection --cells screen \\
        --tasks 4 --seeds 2 --jobs 2 --check 4
    python benchmarks/search/suite.py --grid final --half report --cells final --seeds 5
    python benchmarks/search/suite_report.py benchmarks/search/results/final.jsonl.gz

A study runs ``trainer.entrypoint: suite_trainer:run`` on one task of one family until its budget
(``--budget`` full trainings' worth of steps, 30 by default) is spent. ``--engine replay`` (the
default) replays the same study file in this process (``search_replay.replay_curves``: the
sampler and pruner built and seeded by dvt-hpo's own code, one trial at a time); the first
``--check`` studies also run through ``dvt-hpo run`` and the grid stops unless both give the
same trials (params, state, steps, value). Every line of the results records the family, task,
half, cell, seed, the sampler and pruner the study file resolved to (``default`` included), the
engine and the commit; a rerun skips the studies already there.

A cell ``sampler+pruner+pause`` sets ``trials.pause`` (``--cells pause``: the six pause cells,
their stopping twins, ``tpe+none`` and ``default``): a paused trial's state is ``PAUSED``, a
continuation's row adds the number of the paused trial it continues and counts only the steps it
trained, and every line records ``epochs`` (steps trained) and ``continuations``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # a checkout without the package installed
    sys.path.insert(0, str(REPO_ROOT))

import yaml  # noqa: E402
from cells import PAUSE_GROUP, SCREEN, algorithms, check_cell, trials_section  # noqa: E402
from families import FAMILIES, VARIANTS, family, halves_of  # noqa: E402
from result_files import read_rows as read_results  # noqa: E402
from spend import run_until_spent, scratch  # noqa: E402
from split import read_split  # noqa: E402

RESULTS = HERE / "results"
FULL_BUDGET = 30  # full trainings' worth of steps per study
CELL_GROUPS: dict[str, tuple[str, ...]] = {"screen": SCREEN, "pause": PAUSE_GROUP}
# --quick: the first report task of every family, one seed, the default and its two baselines,
# 10 full trainings' worth, every study through dvt-hpo run and checked against its replay.
QUICK_CELLS = ("tpe+none", "tpe+median", "default")
QUICK_BUDGET = 10


def study_document(fam: str, task: str, cell: str, seed: int, budget: int, folder: Path) -> dict:
    f = family(fam)
    return {
        "study": {
            "name": "suite",
            "storage": "journal:///study.log",
            "n_trials": 100_000,  # the budget of steps ends the run
            "max_failures": 1,
            **algorithms(cell, seed),
        },
        "objective": {"metric": "value", "direction": "maximize", "reduce": "last"},
        "trials": {
            "parallel": 1,
            "devices": "cpu",
            "keep_logs": "none",
            "timeout_s": 600,
            **trials_section(cell),
        },
        "trainer": {
            "entrypoint": "suite_trainer:run",
            "config": {
                "family": fam,
                "task": task,
                "epochs": f.steps,
                "budget_epochs": budget,
                "epochs_file": str(folder / "epochs"),
                "hp": f.trainer_defaults(),
            },
        },
        "search_space": f.search_space(),
    }


def resolved(doc: dict[str, Any]) -> dict[str, Any]:
    """The sampler and pruner the study file resolves to (what ``default`` means today)."""
    from dvt_hpo.studyfile import load_spec

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        path.write_text(yaml.safe_dump(doc))
        spec = load_spec(path)
    s, p = spec.study.sampler, spec.study.pruner
    return {"sampler": {"kind": s.kind, **s.kwargs}, "pruner": {"kind": p.kind, **p.kwargs}}


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("-dirty" if dirty else "")


def replay(fam: str, task: str, cell: str, seed: int, budget: int) -> dict[str, Any]:
    """The study replayed in this process."""
    from search_replay import replay_curves

    f = family(fam)
    doc = study_document(fam, task, cell, seed, budget, Path(tempfile.gettempdir()))
    rows, wall_s = replay_curves(doc, budget, lambda p: (p, f.curve(task, p)))
    trials = [trial_row(r.number, r.state, r.epochs, r.value, r.continues) for r in rows]
    params = {r.number: r.params for r in rows}
    return {
        "engine": "replay",
        "wall_s": round(wall_s, 2),
        **spent(trials),
        **resolved(doc),
        "_params": params,
    }


def trial_row(
    number: int, state: str, epochs: int, value: float | None, continues: int | None
) -> list[Any]:
    """A trial as a results line records it: number, state (``PAUSED``: told PRUNED and kept
    to continue, ``trials.pause``), the steps it trained, its value if COMPLETE; a
    continuation adds the number of the paused trial it continues (its steps are those it
    trained after the pause, the chain's earlier ones not counted again)."""
    row = [number, state, epochs, value]
    return row if continues is None else [*row, continues]


def spent(trials: list[list[Any]]) -> dict[str, Any]:
    """The trials, and what a study spent: the steps trained and the continuations made."""
    return {
        "trials": trials,
        "epochs": sum(t[2] for t in trials),
        "continuations": sum(1 for t in trials if len(t) > 4),
    }


def run_dvt(fam: str, task: str, cell: str, seed: int, budget: int) -> dict[str, Any]:
    """The study through ``dvt-hpo run``, read back from its journal."""
    from dvt_hpo.store.opening import StudyAt

    folder = scratch("dvt-suite-")
    try:
        doc = study_document(fam, task, cell, seed, budget, folder)
        env = dict(os.environ, SUITE_FAMILY=fam)
        wall_s, _ = run_until_spent(
            doc,
            folder,
            paths=[HERE, HERE.parent, REPO_ROOT],
            what=f"{fam} {task} {cell} seed {seed}",
            env=env,
        )
        study = StudyAt(f"journal:///{folder / 'study.log'}", "suite").load().study
        stored = study.get_trials(deepcopy=False)
        return {
            "engine": "dvt",
            "wall_s": round(wall_s, 2),
            **spent(journal_trials(stored)),
            **resolved(doc),
            "_params": {t.number: strip_hp(t.params) for t in stored},
            "_curves": {t.number: dict(t.intermediate_values) for t in stored},
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def journal_trials(frozen: list[Any]) -> list[list[Any]]:
    """The rows of :func:`trial_row` from a study's stored trials: a continuation is a copy
    whose predecessor was paused, its steps those after the predecessor's last report."""
    from dvt_hpo.recovery.retries import is_paused, retry_history

    by_number = {t.number: t for t in frozen}
    trials = []
    for t in sorted(frozen, key=lambda t: t.number):
        history = retry_history(t)
        before = by_number.get(history[-1]) if history else None
        continues = before.number if before is not None and is_paused(before) else None
        after = max(before.intermediate_values, default=0) if continues is not None else 0
        steps = sum(1 for step in t.intermediate_values if step > after)
        if steps:  # not the trial that found the budget spent
            value = t.value if t.state.name == "COMPLETE" else None
            state = "PAUSED" if is_paused(t) else t.state.name
            trials.append(trial_row(t.number, state, steps, value, continues))
    return trials


def strip_hp(params: dict[str, Any]) -> dict[str, Any]:
    return {k.removeprefix("hp."): v for k, v in params.items()}


def first_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The first trial where ``dvt-hpo run`` (``a``) and the replay (``b``) part, in words."""
    ta, tb = a["trials"], b["trials"]
    for i in range(max(len(ta), len(tb))):
        ra = ta[i] if i < len(ta) else None
        rb = tb[i] if i < len(tb) else None
        if ra == rb:
            continue
        lines = [f"first difference at row {i} (number, state, steps trained, value[, continues]):"]
        for name, row, result in (("dvt-hpo run", ra, a), ("replay", rb, b)):
            if row is None:
                lines.append(f"  {name}: no such row ({len(result['trials'])} rows)")
                continue
            n = row[0]
            params = result.get("_params", {}).get(n)
            lines.append(f"  {name}: {row}; params {params}")
            curve = result.get("_curves", {}).get(n)
            if curve is not None:
                lines.append(f"    stored steps {sorted(curve)}")
        prev = ta[max(i - 3, 0) : i]
        lines.append(f"  the rows before (equal): {prev}")
        return "\n".join(lines)
    return "no difference"


def checked(fam: str, task: str, cell: str, seed: int, budget: int) -> dict[str, Any]:
    """Through ``dvt-hpo run``, after checking that the replay is the same search."""
    a, b = run_dvt(fam, task, cell, seed, budget), replay(fam, task, cell, seed, budget)
    if a["trials"] != b["trials"]:
        raise RuntimeError(
            f"{fam} {task} {cell} seed {seed}: the replay differs from dvt-hpo run\n"
            + first_difference(a, b)
        )
    return a


def _key(row: dict[str, Any]) -> tuple[str, str, str, int]:
    return row["family"], row["task"], row["cell"], row["seed"]


def run_grid(
    path: Path,
    families: list[str],
    half: str,
    ntasks: int | None,
    cells: list[str],
    seeds: int,
    budget_x: int,
    jobs: int,
    check: int,
    out: Any = print,
) -> None:
    split = read_split()
    done = {_key(r) for r in read_results(path)}
    todo = []
    for seed in range(seeds):  # seeds outermost: a grid cut short is still comparable
        for fam in families:
            halves = ("selection", "report") if half == "both" else (half,)
            for h in halves:
                for task in split[halves_of(fam)][h][:ntasks]:
                    for cell in cells:
                        if (fam, task, cell, seed) not in done:
                            todo.append((fam, task, h, cell, seed))
    out(f"{len(todo)} studies to run ({jobs} at a time), results in {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    sha, start = commit(), time.perf_counter()

    def keep(item: tuple[str, str, str, str, int], result: dict[str, Any]) -> None:
        fam, task, h, cell, seed = item
        row = {"family": fam, "task": task, "half": h, "cell": cell, "seed": seed}
        row |= {"budget": budget_x * family(fam).steps, "fidelity": family(fam).fidelity}
        row |= {"commit": sha, **{k: v for k, v in result.items() if not k.startswith("_")}}
        # One gzip member per study: a stop mid-write loses that study only.
        with gzip.open(path, "at") as fh:
            fh.write(json.dumps(row) + "\n")

    failed = 0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for i, item in enumerate(todo):
            fam, task, _, cell, seed = item
            fn = checked if i < check else replay
            futures[pool.submit(fn, fam, task, cell, seed, budget_x * family(fam).steps)] = item
        for n, future in enumerate(as_completed(futures), 1):
            item = futures[future]
            try:
                result = future.result()
            except RuntimeError as exc:  # said, the others kept: a rerun retries it
                failed += 1
                out(f"  failed: {exc}")
                continue
            keep(item, result)
            if n % 10 == 0 or n == len(todo) or result["engine"] == "dvt":
                out(
                    f"  {n}/{len(todo)}, {time.perf_counter() - start:.0f} s; {item}: "
                    f"{len(result['trials'])} trials in {result['wall_s']:.1f} s ({result['engine']})"
                )
    if failed:
        raise RuntimeError(f"{failed} of {len(todo)} studies failed (above); rerun to retry them")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI: 1 report task per family, 1 seed, 3 cells, each through dvt-hpo run and replay",
    )
    p.add_argument("--grid", help="results file name (results/<grid>.jsonl.gz)")
    p.add_argument("--results", type=Path, help="the results file instead")
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated")
    p.add_argument("--half", choices=("selection", "report", "both"), default="selection")
    p.add_argument("--tasks", type=int, help="the first N tasks of each half (split.json order)")
    p.add_argument(
        "--cells", default="screen", help=f"comma-separated cells or {list(CELL_GROUPS)}"
    )
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--budget", type=int, default=FULL_BUDGET, help="full trainings' worth")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--check", type=int, default=0, help="N studies also through dvt-hpo run")
    args = p.parse_args(argv)
    if args.quick:
        args.cells, args.half, args.tasks, args.seeds = ",".join(QUICK_CELLS), "report", 1, 1
        args.budget = QUICK_BUDGET
        args.check = len(FAMILIES) * len(QUICK_CELLS)
        args.results = (
            args.results or Path(tempfile.mkdtemp(prefix="suite-quick-")) / "quick.jsonl.gz"
        )
    elif not args.grid and not args.results:
        p.error("--grid NAME or --results FILE (or --quick)")
    cells = [c for name in args.cells.split(",") for c in CELL_GROUPS.get(name, (name,))]
    for cell in cells:
        try:
            check_cell(cell)
        except ValueError as exc:
            p.error(str(exc))
    families = args.families.split(",")
    for fam in families:
        if fam not in FAMILIES and fam not in VARIANTS:
            p.error(f"unknown family {fam!r}; known: {', '.join([*FAMILIES, *VARIANTS])}")
    path = args.results or RESULTS / f"{args.grid}.jsonl.gz"
    run_grid(
        path, families, args.half, args.tasks, cells, args.seeds, args.budget, args.jobs, args.check
    )
    if args.quick:
        import suite_report

        print(suite_report.render(list(read_results(path)), "report"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
