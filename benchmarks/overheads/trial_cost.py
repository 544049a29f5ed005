"""A no-op trial's fixed cost, split by phase, against a bare ``python -c pass`` in the same run.

    nice -n 15 python benchmarks/overheads/trial_cost.py [--trials 30] [--rounds 3] [--passes 10]

Each round runs, in turns (the order alternates between rounds, as the machine's other load
comes and goes): ``--passes`` bare ``python -c pass`` and as many ``python -c "import
dvt_hpo.trial.main"``, one study of ``--trials`` trials started cold (``trials.warm: false``:
a fresh ``python -m dvt_hpo.trial`` per trial) and one started warm (forked from the template),
then the passes again. The studies are real ``run_study`` runs (SQLite, parallel 1, random
sampler, no pruner) of a torch-free trainer that reports once and returns
(:mod:`trial_cost_probe`), so a trial's start-to-start interval is all fixed cost.

Where the time goes is cut into phases that add up to the start-to-start interval exactly:
the orchestrator's from the study database (``datetime_start``: the ask, ``datetime_complete``:
the tell) and from its trial process's ``wait`` (wrapped here, in this process); the trial
process's from ``time.time()`` marks around the functions :func:`dvt_hpo.trial.main.main`
calls, taken by ``benchmarks/overheads/trial_cost_probe.py`` (imported at interpreter start through a
``sitecustomize.py`` written for the run). The first two trials of each study are left out
(the template's imports, the first ask). Medians over every trial of every round; the table
also gives the ``-X importtime`` self time of the trial process's heaviest imports (medians of
``--passes`` runs), and the load average before and after. Every process it starts caches
byte code in the run's folder (``PYTHONPYCACHEPREFIX``), as a user's interpreter does, even
where ``PYTHONDONTWRITEBYTECODE`` is set (then every import would compile its source).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SKIP = 2  # first trials of each study left out: the template's start, the first ask
ENV_DIR = "DVT_HPO_TRIAL_COST_DIR"
IMPORT = [sys.executable, "-c", "import dvt_hpo.trial.main"]

# (label, start mark, end mark): contiguous, from the ask to the next ask.
COLD = [
    ("orchestrator: ask -> launch (payload, control socket, attrs)", "ask", "launched"),
    ("interpreter start (exec -> site)", "launched", "site"),
    ("dvt_hpo imports (import dvt_hpo.trial.main)", "site", "imports:end"),
    ("runpy -> main()", "imports:end", "main:start"),
]
WARM = [
    ("orchestrator: ask -> launch (payload, control socket, attrs)", "ask", "launched"),
    ("fork from the template -> main()", "launched", "main:start"),
]
# The study database keeps times to the microsecond; each process reads the same clock.
CLOCK_S = 1e-5
TRIAL = [
    ("main(): memory limit, parent-death signal, signals", "main:start", "connect:start"),
    ("control connect + hello", "connect:start", "connect:end"),
    ("payload read", "connect:end", "payload:end"),
    ("GPU share, context", "payload:end", "context:end"),
    ("trainer import (resolve entry point)", "context:end", "import:end"),
    ("trainer call, without its report", "import:end", "report:start"),
    ("report -> answer round trip", "report:start", "report:end"),
    ("trainer return, result built and written", "report:end", "write:end"),
    ("close, main() returns", "write:end", "main:end"),
    ("process exit -> orchestrator's reap (group, strays)", "main:end", "reaped"),
    ("orchestrator: record (drain, result, attrs, tell)", "reaped", "told"),
    ("orchestrator: told -> next ask", "told", "next_ask"),
]


WARM_OR_COLD = {False: COLD + TRIAL, True: WARM + TRIAL}
for _phases in WARM_OR_COLD.values():  # contiguous: they add up to start-to-start
    assert all(a[2] == b[1] for a, b in zip(_phases, _phases[1:], strict=False)), _phases
    assert (_phases[0][1], _phases[-1][2]) == ("ask", "next_ask")


def _study(name: str, n_trials: int, warm: bool) -> dict[str, Any]:
    return {
        "study": {
            "name": name,
            "n_trials": n_trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "none"},
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {"warm": warm, "parallel": 1},
        "trainer": {"entrypoint": "trial_cost_probe:run", "config": {}},
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.0, "high": 1.0}
        ],
    }


def _time(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _watch_reaps(reaped: dict[int, float]) -> None:
    """Record when the orchestrator's wait on each trial process returned (it reaped it)."""
    from dvt_hpo.process.launch import Launcher

    start = Launcher.start

    def wrapped(self: Launcher, *args: Any, **kwargs: Any) -> Any:
        process = start(self, *args, **kwargs)
        wait = process.wait

        def timed_wait(timeout_s: float | None = None) -> int | None:
            code = wait(timeout_s)
            if code is not None:
                reaped.setdefault(process.pid, time.time())
            return code

        process.wait = timed_wait
        return process

    Launcher.start = wrapped  # type: ignore[method-assign]


def _watch_database(statements: list[float], writes: list[float], commits: list[float]) -> None:
    """Record when this process (the orchestrator) runs each SQL statement, each one that
    writes, and each commit of a transaction that wrote (SQLite in WAL mode: an fsync of the
    log each)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        now = time.time()
        statements.append(now)
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            writes.append(now)
            conn.info["wrote"] = True

    def commit(conn: Any) -> None:
        if conn.info.pop("wrote", False):
            commits.append(time.time())

    event.listen(Engine, "before_cursor_execute", before)
    event.listen(Engine, "commit", commit)


def _per_trial(times: list[float], begin: float, end: float, n: int) -> float:
    return sum(1 for t in times if begin <= t < end) / n


def _run_study(
    folder: Path,
    name: str,
    n_trials: int,
    warm: bool,
    reaped: dict[int, float],
    database: tuple[list[float], list[float], list[float]],
) -> dict[str, list[float]]:
    from dvt_hpo import run_study

    cost_dir = folder / f"{name}-marks"
    cost_dir.mkdir()
    os.environ[ENV_DIR] = str(cost_dir)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(_study(name, n_trials, warm)))
    study = run_study(path, out=lambda line: None)
    os.environ.pop(ENV_DIR)
    records = {}
    for file in cost_dir.glob("*.json"):
        record = json.loads(file.read_text())
        records[record["trial"]] = record
    trials = sorted(study.trials, key=lambda t: t.datetime_start)
    phases: dict[str, list[float]] = defaultdict(list)
    for trial, following in zip(trials[SKIP:], trials[SKIP + 1 :], strict=False):
        record = records.get(trial.number)
        if record is None or trial.state.name != "COMPLETE":
            raise SystemExit(f"trial {trial.number} of {name}: {trial.state.name}, no marks")
        marks: dict[str, float] = {}
        for mark, at in record["marks"]:
            marks.setdefault(mark, at)
        marks.update(
            ask=trial.datetime_start.timestamp(),
            launched=record["launched"],
            reaped=reaped[record["pid"]],
            told=trial.datetime_complete.timestamp(),
            next_ask=following.datetime_start.timestamp(),
        )
        steps = [(label, marks[end] - marks[begin]) for label, begin, end in WARM_OR_COLD[warm]]
        if min(seconds for _, seconds in steps) < -CLOCK_S:
            raise SystemExit(f"trial {trial.number} of {name}: phases out of order: {steps}")
        for label, seconds in steps:
            phases[label].append(seconds)
        phases["start-to-start"].append(marks["next_ask"] - marks["ask"])
    timed = trials[SKIP:]
    begin, end = timed[0].datetime_start.timestamp(), timed[-1].datetime_start.timestamp()
    for label, times in zip(("SQL statements", "writes", "commits"), database, strict=True):
        phases[f"orchestrator's {label} per trial"].append(
            _per_trial(times, begin, end, len(timed) - 1)
        )
    return phases


def _importtime(env: dict[str, str]) -> dict[str, float]:
    """Self time (s) of each module ``import dvt_hpo.trial.main`` imports, from one run."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *IMPORT[1:]],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    times = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            times[match.group(4)] = int(match.group(1)) / 1e6
    return times


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}" if values else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30, help="trials per study (30)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--passes", type=int, default=10, help="python -c pass per turn (10)")
    args = parser.parse_args()
    base_env = dict(os.environ)
    # Byte-code caching as a user has it (some shells and CI images turn it off: every import
    # would compile its source), kept in the run's own folder, not beside the sources.
    base_env.pop("PYTHONDONTWRITEBYTECODE", None)
    base_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), base_env.get("PYTHONPATH", "")) if p
    )
    sys.path.insert(0, str(REPO))
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    load_before = os.getloadavg()
    bare: list[float] = []
    imports: list[float] = []
    modules: dict[str, list[float]] = defaultdict(list)
    results: dict[bool, dict[str, list[float]]] = {
        False: defaultdict(list),
        True: defaultdict(list),
    }
    reaped: dict[int, float] = {}
    _watch_reaps(reaped)
    database: tuple[list[float], list[float], list[float]] = ([], [], [])
    _watch_database(*database)
    with tempfile.TemporaryDirectory(prefix="dvt-hpo-trial-cost-") as tmp:
        folder = Path(tmp)
        base_env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = base_env["PYTHONPYCACHEPREFIX"]
        probe_dir = folder / "site"
        probe_dir.mkdir()
        (probe_dir / "sitecustomize.py").write_text("import trial_cost_probe  # noqa: F401\n")
        # The studies' processes (this one's children) see the probe; the bare runs do not.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(probe_dir), str(HERE), base_env["PYTHONPATH"]]
        )

        # Fills the byte-code cache (the first run of each compiles), untimed.
        _time([*IMPORT[:2], "import dvt_hpo.trial.main, trial_cost_probe"], dict(os.environ))

        def passes() -> None:
            for _ in range(args.passes):
                bare.append(_time([sys.executable, "-c", "pass"], base_env))
                imports.append(_time(IMPORT, base_env))
                for module, seconds in _importtime(base_env).items():
                    modules[module].append(seconds)

        for round_ in range(args.rounds):
            passes()
            for warm in (False, True) if round_ % 2 == 0 else (True, False):
                name = f"{'warm' if warm else 'cold'}-{round_}"
                for label, values in _run_study(
                    folder, name, args.trials, warm, reaped, database
                ).items():
                    results[warm][label].extend(values)
                print(f"round {round_ + 1}: {name} done", file=sys.stderr, flush=True)
            passes()
    load_after = os.getloadavg()
    _print(bare, imports, modules, results, load_before, load_after, args)


def _print(
    bare: list[float],
    imports: list[float],
    modules: dict[str, list[float]],
    results: dict[bool, dict[str, list[float]]],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    args: argparse.Namespace,
) -> None:
    floor = statistics.median(bare)
    n = {warm: len(results[warm]["start-to-start"]) for warm in (False, True)}
    print(
        f"\n{args.rounds} rounds x {args.trials} trials per study ({n[False]} cold and "
        f"{n[True]} warm trials timed), {len(bare)} python -c pass; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after\n"
    )
    print("| phase | cold ms | warm ms |")
    print("| --- | --- | --- |")
    print(f"| `python -c pass` (the floor) | {floor * 1000:.1f} | |")
    print(f"| `python -c 'import dvt_hpo.trial.main'` | {_ms(imports)} | |")
    labels = list(dict.fromkeys(label for label, _, _ in COLD + WARM + TRIAL))
    for label in labels:
        cold, warm = results[False].get(label, []), results[True].get(label, [])
        print(f"| {label} | {_ms(cold)} | {_ms(warm)} |")
    total = {w: statistics.median(results[w]["start-to-start"]) for w in (False, True)}
    print(
        f"| **start-to-start (the marginal cost of a trial)** | **{total[False] * 1000:.1f}** "
        f"| **{total[True] * 1000:.1f}** |"
    )
    print(
        f"| start-to-start / `python -c pass` | {total[False] / floor:.2f}x "
        f"| {total[True] / floor:.2f}x |"
    )
    counts = [
        f"{label}: {statistics.median(results[False][label]):.1f} cold, "
        f"{statistics.median(results[True][label]):.1f} warm"
        for label in (
            "orchestrator's SQL statements per trial",
            "orchestrator's writes per trial",
            "orchestrator's commits per trial",
        )
    ]
    print("\nphases: medians of each phase (they need not add up to the median total)")
    print(
        "; ".join(counts)
        + " (writes: INSERT, UPDATE, DELETE; commits: of a transaction that wrote)"
    )
    ours = {m: statistics.median(v) for m, v in modules.items() if m.startswith("dvt_hpo")}
    others = sum(statistics.median(v) for m, v in modules.items() if not m.startswith("dvt_hpo"))
    heavy = sorted(ours.items(), key=lambda kv: -kv[1])[:8]
    print(
        f"\n-X importtime of import dvt_hpo.trial.main ({len(ours)} dvt_hpo modules, "
        f"{sum(ours.values()) * 1000:.1f} ms self; {len(modules) - len(ours)} other modules "
        f"{others * 1000:.1f} ms, site's included): the heaviest, self ms: "
        + ", ".join(f"{m} {s * 1000:.1f}" for m, s in heavy)
    )


if __name__ == "__main__":
    main()
