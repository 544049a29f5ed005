"""Kill soak: workers SIGKILLed at random instants on one PostgreSQL study lose nothing.

    python benchmarks/reliability/kill_soak.py                          # 10 rounds, 4 workers, 16 trials
    python benchmarks/reliability/kill_soak.py --rounds 50 --seed 1
    python benchmarks/reliability/kill_soak.py --rounds 2 --trials 8 --workers 3 --kills 2   # CI
    python benchmarks/reliability/kill_soak.py --postgres postgresql://user@host/db
    python benchmarks/reliability/kill_soak.py --resume --kind both --rounds 40   # resumable trials

``--kind``: ``orchestrator`` SIGKILLs the worker process alone (its trial processes see their
control socket close and end themselves), ``node`` freezes the worker and every process it
started (SIGSTOP, its trials' own sessions included) then SIGKILLs them all, as a lost node
does; ``both`` alternates rounds. ``--resume``: ``trials.resume`` on, trials of ``--epochs``
epochs (``tests/entrypoints/resumable.py:counter``: its state saved after every epoch, the last
included, then a final step of ``--final-s``); each round also counts, from the trainer's own
log (``counter`` appends ``"<trial> <epoch>"`` once an epoch's work is done, whichever
orchestrator ran it), the epochs trained twice beyond the one in progress at a kill (per copy:
the epochs its chain's earlier attempts had trained, less one), the COMPLETE values that differ
from an uninterrupted run of the same params (the counter's value is a function of its param),
and, to show the issue-47 windows were hit, the copies that resumed past their last epoch (a
state saved after it: ``resumed_epochs`` equal to ``--epochs``) and the trials a sweep recorded
from their result after their worker died. A copy that silently restarted from epoch 0 trains
its chain's saved epochs again and fails the round.

Each round is what preemption, ``scancel`` or a lost node does to a study on a cluster:
``--workers`` ``dvt-hpo run`` processes (each in a session of its own, like separate jobs) share
one fresh study on PostgreSQL (heartbeat 1 s, grace 3 s); ``--kills`` times, at a random
instant, a random live worker is SIGKILLed and a replacement starts at once. When every worker
has exited, the round checks (``tests/lost_nothing.py``):

- the exact budget: exactly ``--trials`` trials count, every one COMPLETE;
- every failed attempt (a killed worker's trial) is retried by exactly one copy, with its
  params;
- nothing is left RUNNING or WAITING;
- every worker not killed exited 0, within ``--round-timeout-s``;
- no process is left: no worker, trial process or warm template of the round survives.

Trials sleep ``--trial-s`` (default 2 s) on ``benchmarks/overheads/noop_entrypoint.py`` and the kills
land at uniformly random instants within ``--kill-window-s`` (default 10 s, about the length
of a round's trials) of the first trial's start, so that they hit trials, recordings, sweeps,
replacements starting up and exits alike. Prints one row per round and exits 1 if any round
lost something. ``--max-retries`` (default 50) is far above what the kills can use up, so an
exhausted retry chain cannot pass for a loss.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(REPO_ROOT) not in sys.path:  # tests.lost_nothing, and dvt_hpo from a checkout
    sys.path.insert(0, str(REPO_ROOT))

import yaml  # noqa: E402

from dvt_hpo.process import tree as process_tree  # noqa: E402
from dvt_hpo.store.opening import StudyAt  # noqa: E402
from dvt_hpo.store.storage import redact_url, unreachable_reason  # noqa: E402
from tests.lost_nothing import problems  # noqa: E402

DEFAULT_POSTGRES = os.environ.get(
    "DVT_HPO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
# In the round's folder: ``counter``'s line per epoch trained (``"<trial> <epoch>"``).
EPOCH_LOG = "epochs.txt"


@dataclass
class Round:
    number: int
    started: int = 0
    killed: int = 0
    trials: int = 0
    failed: int = 0  # FAIL attempts (each must have its copy)
    over_budget: int = 0  # closed at once: asked past n_trials by a racing worker
    retried: int = 0
    counted: int = 0
    orphans: int = 0
    kind: str = "orchestrator"
    asked: int = 0  # n_trials
    # Epochs trained twice beyond the one in progress at a kill, from the trainer's log
    # (--resume).
    twice: int = 0
    differ: int = 0  # COMPLETE values unlike an uninterrupted run's (--resume)
    swept: int = 0  # trials recorded COMPLETE by a sweep after their worker died
    past: int = 0  # copies that resumed past their last epoch (--resume)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        """Trials asked less trials counted (a round whose study could not be read lost all)."""
        return max(0, self.asked - self.counted)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [
            str(HERE),
            str(HERE.parent / "overheads"),
            str(REPO_ROOT),
            *filter(None, [env.get("PYTHONPATH")]),
        ]
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("DVT_HPO_KILL_AT", None)  # the soak kills from outside, at random
    return env


def _study_file(folder: Path, url: str, args: argparse.Namespace) -> tuple[Path, str]:
    name = f"soak-{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "study": {
            "name": name,
            "storage": url,
            "n_trials": args.trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "none"},
            "heartbeat_interval_s": 1,
            "grace_period_s": args.grace_s,
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {
            "parallel": 1,
            "devices": "cpu",
            "runs_dir": str(folder / "runs"),
            "max_retries": args.max_retries,
            "stop_grace_s": 2,
        },
        "trainer": {"entrypoint": "noop_entrypoint:run", "config": {"sleep_s": args.trial_s}},
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.0, "high": 1.0}
        ],
    }
    if args.resume:
        doc["objective"]["reduce"] = "last"
        doc["trials"].update({"resume": True, "resume_every_s": 0, "warm": False})
        doc["trainer"] = {
            "entrypoint": "tests.entrypoints.resumable:counter",
            "config": {
                "epochs": args.epochs,
                "sleep_s": args.trial_s / args.epochs,
                "final_s": args.final_s,
                "epoch_log": str(folder / EPOCH_LOG),
            },
        }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, name


def _start(study: Path, folder: Path, n: int) -> subprocess.Popen[bytes]:
    log = open(folder / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed when it exits
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "dvt_hpo", "run", str(study)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(),
            cwd=folder,
            start_new_session=True,
        )
    finally:
        log.close()


def _processes_mentioning(marker: Path) -> list[int]:
    """Live processes whose command line holds ``marker`` (the round's folder: its workers'
    study file, its trials' payloads, its warm templates)."""
    needle = os.fsencode(str(marker))
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", name, "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and process_tree.pid_alive(int(name)):
            found.append(int(name))
    return found


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process it started, whatever their session (from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _kill(victim: subprocess.Popen[bytes], kind: str) -> None:
    """``orchestrator``: the worker alone; ``node``: it and everything it started, frozen
    first (nothing gets to clean up), then killed."""
    if kind == "orchestrator":
        victim.kill()
    else:
        tree = _descendants(victim.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    victim.wait()


def _expected(x: float, epochs: int) -> float:
    """The counter's value after ``epochs`` uninterrupted epochs (reduce: last)."""
    value = 0.0
    for _ in range(epochs):
        value = value * 0.5 + x
    return value


def trained_epochs(log: Path) -> dict[int, list[int]]:
    """The epochs each attempt trained, by trial number, as ``counter`` logged them (each line
    one appending write, so a kill leaves no half line to misread)."""
    trained: dict[int, list[int]] = {}
    if not log.exists():
        return trained
    for line in log.read_text(encoding="utf-8").splitlines():
        number, epoch = line.split()
        trained.setdefault(int(number), []).append(int(epoch))
    return trained


@dataclass
class Trained:
    """What the trainer's log says of a round's chains."""

    twice: int = 0  # epochs trained twice beyond the one a copy may redo
    problems: list[str] = field(default_factory=list)


def trained_twice(trials: list[Any], trained: dict[int, list[int]], epochs: int) -> Trained:
    """Per retry chain, in attempt order: the epochs an attempt trained that its chain had
    already trained, beyond the one a copy may redo (the epoch in progress at the kill:
    trained, not yet saved), and the epochs of a chain that completed that none of its
    attempts trained."""
    chains: dict[int, list[Any]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        history = t.system_attrs.get("retry_history") or []
        chains.setdefault(history[0] if history else t.number, []).append(t)
    found = Trained()
    for root, chain in sorted(chains.items()):
        seen: set[int] = set()
        for attempt in chain:
            mine = trained.get(attempt.number, [])
            # A copy may redo one epoch its chain trained before (the one in progress at the
            # kill); an epoch an attempt trained twice itself has no such excuse.
            redone = len(set(mine) & seen) - (1 if attempt.number != root else 0)
            beyond = len(mine) - len(set(mine)) + max(0, redone)
            if beyond > 0:
                found.twice += beyond
                found.problems.append(
                    f"trial {attempt.number} trained {beyond} epochs twice (chain {root}: "
                    f"epochs {sorted(seen)} trained before it, it trained {mine})"
                )
            seen.update(mine)
        never = sorted(set(range(epochs)) - seen)
        if never and any(t.state.name == "COMPLETE" for t in chain):
            found.problems.append(f"chain {root} completed, its epochs {never} never trained")
    return found


def _first_trial(runs: Path, *, deadline: float) -> float:
    """The instant the round's first trial folder appears (polled: a benchmark's own clock)."""
    while time.monotonic() < deadline:
        if runs.is_dir() and any(p.name.startswith("trial-") for p in runs.iterdir()):
            break
        time.sleep(0.05)
    return time.monotonic()


def run_round(
    number: int, url: str, args: argparse.Namespace, rng: random.Random, kind: str
) -> Round:
    result = Round(number, kind=kind, asked=args.trials)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dvt-hpo-soak-") as tmp:
        folder = Path(tmp).resolve()
        study, name = _study_file(folder, url, args)
        workers = [_start(study, folder, n) for n in range(args.workers)]
        killed: set[int] = set()
        result.started = len(workers)
        deadline = began + args.round_timeout_s
        # The window opens with the first trial (the workers' start-up takes seconds on a
        # loaded machine): kills then land in trials, recordings, sweeps and exits alike.
        first = _first_trial(folder / "runs", deadline=deadline)
        # Random instants, by design.
        for at in sorted(rng.uniform(0.0, args.kill_window_s) for _ in range(args.kills)):
            time.sleep(max(0.0, first + at - time.monotonic()))
            live = [w for w in workers if w.poll() is None]
            if not live:
                break
            victim = rng.choice(live)
            _kill(victim, kind)
            killed.add(victim.pid)
            result.killed += 1
            workers.append(_start(study, folder, len(workers)))
            result.started += 1
        for w in workers:
            try:
                w.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                result.problems.append(f"worker {w.pid} still running after the round's timeout")
                w.kill()
                w.wait()
        for n, w in enumerate(workers):
            if w.pid not in killed and w.returncode != 0:
                tail = (folder / f"worker-{n}.log").read_text(errors="replace")[-600:]
                result.problems.append(f"worker {n} exited {w.returncode}: {tail!r}")
        leftovers = _processes_mentioning(folder)
        if leftovers and not process_tree.wait_gone(leftovers, 10):
            result.orphans = len(leftovers)
            result.problems.append(f"orphan processes: {leftovers}")
            for pid in leftovers:
                os.kill(pid, signal.SIGKILL)
        try:
            loaded = StudyAt(url, name).load().study
        except Exception as exc:  # noqa: BLE001 - a round whose workers all failed at once
            result.problems.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            result.seconds = time.monotonic() - began
            return result
        trials = sorted(loaded.get_trials(deepcopy=False), key=lambda t: t.number)
        result.trials = len(trials)
        over = [bool(t.system_attrs.get("dvt_hpo:over_budget")) for t in trials]
        result.over_budget = sum(over)
        result.failed = sum(
            t.state.name == "FAIL" and not o for t, o in zip(trials, over, strict=True)
        )
        result.retried = sum(bool(t.system_attrs.get("retry_history")) for t in trials)
        superseded = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        result.counted = sum(
            not t.system_attrs.get("dvt_hpo:over_budget")
            and not (t.state.name == "FAIL" and t.number in superseded)
            for t in trials
        )
        result.problems += problems(trials, args.trials)
        if result.counted < args.trials:  # also in problems(); said here in its own words
            result.problems.append(f"{args.trials - result.counted} trials lost")
        result.swept = sum(t.user_attrs.get("recorded_by") == "sweep" for t in trials)
        if args.resume:
            # The trainer's own log, not the copies' ``redone_epochs``: an orchestrator that
            # restarted a copy from epoch 0 while saying it resumed would still be caught.
            trained = trained_twice(trials, trained_epochs(folder / EPOCH_LOG), args.epochs)
            result.twice = trained.twice
            result.problems += trained.problems
            result.past = sum(
                bool(t.system_attrs.get("retry_history"))
                and t.user_attrs.get("resumed_epochs") == args.epochs
                for t in trials
            )
            for t in trials:
                if t.state.name != "COMPLETE":
                    continue
                expected = _expected(float(t.params["x"]), args.epochs)
                if t.value != expected or len(t.intermediate_values) != args.epochs:
                    result.differ += 1
                    result.problems.append(
                        f"trial {t.number}: {t.value} over {len(t.intermediate_values)} "
                        f"epochs, uninterrupted {expected} over {args.epochs}"
                    )
        if not result.problems:
            import optuna

            optuna.delete_study(study_name=name, storage=loaded._storage)
        else:
            result.problems.append(f"study {name!r} kept for inspection")
    result.seconds = time.monotonic() - began
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--kills", type=int, default=3, help="workers SIGKILLed per round")
    parser.add_argument(
        "--kill-window-s",
        type=float,
        default=10.0,
        help="kills land at random instants within this many seconds of the first trial",
    )
    parser.add_argument("--trial-s", type=float, default=2.0, help="each trial's duration")
    parser.add_argument("--grace-s", type=int, default=3)
    parser.add_argument("--max-retries", type=int, default=50)
    parser.add_argument("--round-timeout-s", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument(
        "--kind",
        choices=("orchestrator", "node", "both"),
        default="orchestrator",
        help="kill the worker alone, or its whole tree (a lost node); both: alternate rounds",
    )
    parser.add_argument("--resume", action="store_true", help="trials.resume, resumable trials")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per trial (--resume)")
    parser.add_argument("--final-s", type=float, default=0.5, help="final step (--resume)")
    args = parser.parse_args(argv)
    why = unreachable_reason(args.postgres)
    if why is not None:
        print(f"PostgreSQL not reachable at {redact_url(args.postgres)}: {why}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    print(
        f"kill soak: {args.rounds} rounds of {args.workers} workers, {args.trials} trials, "
        f"{args.kills} SIGKILLs per round within {args.kill_window_s:g} s of the first trial, "
        "trials of "
        f"{args.trial_s:g} s (seed {args.seed}) on {redact_url(args.postgres)}, "
        f"kills: {args.kind}"
        + (
            f", trials.resume ({args.epochs} epochs, final step {args.final_s:g} s)"
            if args.resume
            else ""
        )
    )
    # lost: n_trials - counted; swept: recorded by a sweep after their worker died; past:
    # copies resumed past their last epoch; twice: epochs trained twice beyond the one in
    # progress at a kill (the trainer's log).
    header = (
        f"{'round':>5} {'started':>7} {'killed':>6} {'trials':>6} {'FAIL':>4} {'over':>4} "
        f"{'retries':>7} {'counted':>7} {'lost':>4} {'swept':>5} {'past':>4} {'twice':>5} "
        f"{'differ':>6} {'orphans':>7} {'kind':>12} {'seconds':>7}  result"
    )
    print(header)
    rounds = []
    for number in range(1, args.rounds + 1):
        kind = args.kind
        if kind == "both":
            kind = "node" if number % 2 else "orchestrator"
        r = run_round(number, args.postgres, args, rng, kind)
        rounds.append(r)
        print(
            f"{r.number:>5} {r.started:>7} {r.killed:>6} {r.trials:>6} {r.failed:>4} "
            f"{r.over_budget:>4} "
            f"{r.retried:>7} {r.counted:>7} {r.lost:>4} {r.swept:>5} {r.past:>4} {r.twice:>5} "
            f"{r.differ:>6} {r.orphans:>7} {r.kind:>12} {r.seconds:>7.1f}  "
            + ("ok" if not r.problems else "LOST: " + "; ".join(r.problems)),
            flush=True,
        )
    bad = [r for r in rounds if r.problems]
    kills = sum(r.killed for r in rounds)
    retries = sum(r.retried for r in rounds)
    print(
        f"{len(rounds) - len(bad)}/{len(rounds)} rounds lost nothing; {kills} workers killed, "
        f"{retries} retries run"
    )
    for kind in sorted({r.kind for r in rounds}):
        of = [r for r in rounds if r.kind == kind]
        print(
            f"  {kind}: {sum(not r.problems for r in of)}/{len(of)} rounds held, "
            f"{sum(r.killed for r in of)} kills, {sum(r.lost for r in of)} trials lost "
            f"({sum(r.asked for r in of)} asked), {sum(r.twice for r in of)} epochs trained "
            f"twice, {sum(r.differ for r in of)} values differing, "
            f"{sum(r.swept for r in of)} trials recorded by a sweep, "
            f"{sum(r.past for r in of)} copies resumed past their last epoch"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
