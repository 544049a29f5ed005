"""The study file as typed dataclasses: what :func:`dvt_hpo.studyfile.load_spec` returns.

Stdlib only (no optuna, no yaml). The ``batch_size`` section, :class:`BatchSizeSpec`, lives with
the batch size in :mod:`dvt_hpo.batch.spec` (the payload carries it) and is named here too.
Each section is described once: the plain fields carry their type, default and range
(:func:`dvt_hpo.config.schema.rule`) and are checked by the one schema engine; fields marked
:func:`dvt_hpo.config.schema.domain` are checked by the section's code (storage URLs, devices, Optuna
signatures, search paths). After loading, every default is filled in: the runtime never fills
one again.

Every field carries its sentence for the study.yaml reference (``doc=``, and ``accepts=`` where
the file writes something other than the field's type: a size, a kind or a mapping); the docs
site generates the reference from them (:mod:`dvt_hpo.studyfile.reference`). A new field gets
its ``doc=`` in the same line: ``tests/studyfile/test_reference.py`` fails without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.schema import domain, rule

__all__ = [
    "BUILTIN_ENTRYPOINT",
    "COMMAND_ENTRYPOINT",
    "BatchSizeSpec",
    "BudgetSpec",
    "ClusterSpec",
    "Condition",
    "ConstraintSpec",
    "Dimension",
    "MetricSpec",
    "MlflowSpec",
    "ObjectiveSpec",
    "PlateauSpec",
    "PrunerSpec",
    "SamplerSpec",
    "StudySection",
    "StudySpec",
    "TrackingSpec",
    "TrainerSpec",
    "TrialsSpec",
    "WarmStartSpec",
]

BUILTIN_ENTRYPOINT = "dvt_hpo.train:run"
# The entry point of a ``trainer.command`` study: it runs the command (dvt_hpo.command.script).
COMMAND_ENTRYPOINT = "dvt_hpo.command:run"


@dataclass(frozen=True)
class SamplerSpec:
    kind: str = "tpe"  # a kind of dvt_hpo.sampling.kinds.SAMPLERS
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the Optuna class (seed, ...)


@dataclass(frozen=True)
class PrunerSpec:
    kind: str = "median"  # a kind of dvt_hpo.sampling.kinds.PRUNERS
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlateauSpec:
    """``study.plateau``: stop launching once the last ``trials`` finished trials of a run did
    not improve the best value by more than ``min_delta`` (:mod:`dvt_hpo.stopping.plateau`)."""

    trials: int = rule(ge=1, doc="The window: this run's last N finished trials.")
    min_delta: float = rule(
        0.0, ge=0, doc="The improvement, in the metric's units, that counts as progress."
    )


@dataclass(frozen=True)
class BudgetSpec:
    """``study.budget``: limits in compute beside ``n_trials``, whichever comes first, for the
    whole study across workers and resumes (:mod:`dvt_hpo.budget.compute`)."""

    gpu_hours: float | None = rule(
        None, gt=0, doc="GPU-hours: each trial's GPUs (or its `per_gpu` share) times its duration."
    )
    cpu_hours: float | None = rule(
        None, gt=0, doc="CPU-hours: each CPU trial's threads times its duration."
    )
    epochs: int | None = rule(
        None, ge=1, doc="Epochs: the objective's reports, summed over every attempt."
    )
    hours: float | None = rule(
        None, gt=0, doc="Wall-clock hours since the study's first run (stored in the study)."
    )
    strict: bool = rule(
        False,
        doc="Stop the trials still running when a limit is spent and record them over budget "
        "(false: they finish).",
    )


@dataclass(frozen=True)
class WarmStartSpec:
    """``study.warm_start``: run the ``top`` best feasible configs of an earlier study first
    (:mod:`dvt_hpo.study.seeding`); ``copy_results`` adds its finished trials for the sampler."""

    study: str = rule(what="a study name", doc="The earlier study's name.")
    storage: str | None = domain(
        None,
        doc="The earlier study's storage URL (relative SQLite paths resolve against this file).",
        accepts="a storage URL or null",
        shown_default="this study's storage",
    )
    top: int = rule(5, ge=1, doc="How many of its best feasible configs run first.")
    copy_results: bool = rule(
        False,
        doc="Also add its finished trials for the sampler (same objective only; a new dataset "
        "changes the values).",
    )


@dataclass(frozen=True)
class StudySection:
    """Section ``study``: the study's name, where it is stored, its budget, the sampler and
    pruner, and how the workers sharing it watch each other."""

    name: str = rule(
        what="a non-empty string",
        accepts="letters, digits, `.`, `_` and `-`, starting with a letter or digit",
        doc="The study's name in its storage: workers with the same name and storage share one "
        "study, and `--set study.name=x` names another.",
    )
    # Resolved URL (relative sqlite/journal paths made absolute against the study file's folder).
    storage: str = domain(
        "",
        doc="Where the study lives: a SQLite or journal file for one machine, PostgreSQL for a "
        "team; relative file paths resolve against the study file's folder and `${VAR}` is "
        "read from the environment.",
        accepts="`sqlite:///file.db`, `journal:///file.log` or "
        "`postgresql://user:${DB_PASSWORD}@host:5432/db`",
        shown_default="`sqlite:///<name>.db` next to the study file",
    )
    n_trials: int | None = rule(
        None,
        ge=1,
        doc="Trials of the whole study, across workers and resumes; a run ends once the study "
        "has this many (null: no limit).",
    )  # total for the study, across workers and resumes
    timeout_s: float | None = rule(
        None, gt=0, doc="Seconds after which this run launches no new trial."
    )  # for this invocation
    # The loader always fills these. The kinds, the defaults and their texts in the generated
    # reference are the registry's (dvt_hpo.sampling.kinds), which this module sits below.
    sampler: SamplerSpec = domain(
        default_factory=SamplerSpec,
        doc="The Optuna sampler: a kind, or a mapping of `kind` and the Optuna class's keyword "
        "arguments (`{kind: tpe, seed: 0}`); arguments without a kind go over the default.",
        accepts="a kind or `{kind: ..., <argument>: ...}` (the reference lists the kinds)",
        shown_default="the default of the study's shape (the reference names it)",
    )
    pruner: PrunerSpec = domain(
        default_factory=PrunerSpec,
        doc="The Optuna pruner, written like the sampler; `null` or `none` switches pruning off.",
        accepts="a kind, `{kind: ..., <argument>: ...}` or null (the reference lists the kinds)",
        shown_default="the default of the study's shape (the reference names it)",
    )
    # A count (int >= 1) or a share of n_trials (0 < float < 1); the loader rejects a share
    # without n_trials.
    max_failures: int | float | None = domain(
        None,
        doc="Stop this run after this many failed trials, or after this share of `n_trials`; "
        "null stops it when its first 3 finished trials all failed alike.",
        accepts="an integer >= 1, a number between 0 and 1 (a share of `n_trials`), or null",
    )
    heartbeat_interval_s: int = rule(
        10, ge=1, doc="Seconds between a running trial's heartbeats in the study database."
    )
    grace_period_s: int = rule(
        20,
        ge=1,
        doc="A RUNNING trial whose last heartbeat is older than this is failed and retried by "
        "any worker.",
        shown_default="2 × `heartbeat_interval_s`",
    )  # default: 2 * heartbeat_interval_s
    # How long storage calls of a running study retry while the database is unreachable.
    # Long enough for a server restart or a fail-over before the run gives up.
    storage_retry_s: float = rule(
        120.0,
        ge=0,
        doc="Seconds a running study's storage calls retry while the database is unreachable, "
        "before the run ends with exit 1.",
    )
    plateau: PlateauSpec | None = domain(
        None,
        doc="Stop this run once its last `trials` finished trials did not improve the study's "
        "best value by more than `min_delta` (null: never).",
    )
    budget: BudgetSpec | None = domain(
        None,
        doc="Limits in compute beside `n_trials` (`gpu_hours`, `cpu_hours`, `epochs`, `hours`), "
        "shared by every worker and resume; whichever is spent first ends the study.",
        accepts="a mapping (see `study.budget.*`) or null",
    )  # read by dvt_hpo.studyfile.budget
    enqueue: tuple[dict[str, Any], ...] = domain(
        (),
        doc="Known configs (`{search_space name: value}`) run first, each once per study; a "
        "name left out is sampled.",
        accepts="a list of mappings of search_space names to values",
    )  # read by studyfile.seeding
    warm_start: WarmStartSpec | None = domain(
        None,
        doc="Run the `top` best feasible configs of an earlier study first (and, with "
        "`copy_results`, give the sampler its finished trials).",
        accepts="a mapping (see `study.warm_start.*`) or null",
    )


@dataclass(frozen=True)
class MetricSpec:
    """An item of ``objective.metrics``: one objective."""

    name: str = rule(what="a metric name", doc="A metric the trainer reports; names are unique.")
    direction: Literal["minimize", "maximize"] | None = rule(
        None,
        doc="Whether lower or higher is better; inferred only when the name leaves no doubt.",
        shown_default="inferred from the name",
    )  # filled from the name


@dataclass(frozen=True)
class ConstraintSpec:
    """An item of ``objective.constraints``: feasible when ``min <= value <= max`` (either bound
    optional)."""

    metric: str = rule(
        what="a metric name", doc="The reported metric the bound applies to (one per metric)."
    )
    max: float | None = rule(None, doc="Feasible only when the value is at most this.")
    min: float | None = rule(None, doc="Feasible only when the value is at least this.")


@dataclass(frozen=True)
class ObjectiveSpec:
    """Section ``objective``: what a trial's value is (one metric, or several for a Pareto
    front) and which trials are feasible."""

    # ``metric``/``direction`` are the first objective's; after loading ``metrics`` always
    # lists every objective (one item for a single-objective study).
    metric: str = rule(
        "loss",
        what="a metric name",
        doc="The reported metric the study optimizes (`loss` is the validation loss).",
    )
    direction: Literal["minimize", "maximize"] = rule(
        "minimize",
        doc="Whether lower or higher is better; inferred only when the metric's name leaves no "
        "doubt, else required.",
        shown_default="inferred from the metric's name",
    )  # default from the metric
    reduce: Literal["best", "last"] = rule(
        "best", doc="Which epoch of a trial's history gives its value: the best or the last."
    )
    metrics: tuple[MetricSpec, ...] = domain(
        (),
        doc="Several objectives instead of `metric`/`direction`: a multi-objective study whose "
        "`best` is the Pareto front.",
    )
    constraints: tuple[ConstraintSpec, ...] = domain(
        (),
        doc="Bounds on reported metrics; a trial outside them is infeasible and never shown as "
        "best.",
    )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics) if self.metrics else (self.metric,)

    @property
    def directions(self) -> tuple[str, ...]:
        if not self.metrics:
            return (self.direction,)
        return tuple(m.direction or self.direction for m in self.metrics)

    @property
    def is_multi(self) -> bool:
        return len(self.names) > 1


@dataclass(frozen=True)
class TrialsSpec:
    """Section ``trials``: how each trial process is launched, where it runs, and its limits."""

    launcher: Literal["process", "torchrun"] = rule(
        "process", doc="A trial is one Python process, or a `torchrun` job of DDP ranks."
    )
    nproc_per_node: int = rule(1, ge=1, doc="Ranks per trial under `launcher: torchrun`.")
    parallel: int = rule(
        1,
        ge=1,
        doc="Trials at once from this orchestrator, the devices split among them.",
        shown_default="1 (with `per_gpu`: every share)",
    )  # default with per_gpu > 1: every share (read_trials)
    per_gpu: int = rule(
        1, ge=1, doc="Trials packed on each GPU, each capped at 1/`per_gpu` of its memory."
    )  # trials packed on each GPU, each with 1/per_gpu of its memory
    # Canonical: "auto", "cpu", "cuda", an int (a GPU count) or a tuple of GPU ids.
    devices: Any = domain(
        "auto",
        doc="The devices the trials share, split into `parallel` slots (`CUDA_VISIBLE_DEVICES` "
        "and CPU threads per slot).",
        accepts='`auto`, `cpu`, a GPU count, `[0, 1]`, `"0,1"`, `"cuda:0,1"` or `"cuda:2"`',
    )
    timeout_s: float | None = rule(
        None,
        gt=0,
        doc='Seconds a trial may run before it is stopped and recorded FAIL "timed out".',
    )
    stop_grace_s: float = rule(
        10.0, ge=0, doc="Seconds between SIGTERM and SIGKILL when a trial is stopped."
    )
    max_retries: int = rule(
        1, ge=0, doc="Reruns of a trial whose orchestrator died or was interrupted."
    )
    memory_limit: int | None = domain(
        None,
        doc="The address-space limit of each trial process; a trial over it fails out of "
        "memory on its own.",
        accepts="a size (`4GiB`, `512MB`, bytes) or null",
    )  # bytes (parsed from "4GiB", "512MB", ints)
    report_timeout_s: float = rule(
        60.0, gt=0, doc="The longest a trial's report waits for the pruning decision."
    )  # bounded wait in ctx.report for a decision
    runs_dir: Path = domain(
        Path("runs"),
        doc="The folder of the per-trial folders (payload, logs, result), relative to the "
        "study file.",
        accepts="a folder path",
        shown_default="`runs/<name>`",
    )  # resolved; default <study file folder>/runs/<name>
    # Fork each trial from a template that imported the trainer once (launcher process only).
    warm: bool = domain(
        True,
        doc="Fork each trial from a template process that imported the trainer once "
        "(`launcher: process` only).",
        accepts="true, false or null",
    )
    preload: tuple[str, ...] = domain(
        (),
        doc="More modules the warm template imports, e.g. those `run()` imports inside.",
        accepts="a list of module names",
    )  # more modules the warm template imports
    log_limit: int | None = domain(
        10 * 1024**2,
        doc="Bytes kept per stream and trial, the beginning and the end (null: no cap).",
        accepts="a size (`10MiB`) or null",
        shown_default="`10MiB`",
    )  # bytes per stream and trial; None: no cap
    keep_logs: Literal["all", "failed", "none"] = rule(
        "all", doc="Which finished trials keep their folders."
    )  # logs of finished trials
    node_failures: int = rule(
        3,
        ge=0,
        doc="Trials in a row failed of the machine (CUDA, driver, NCCL, ECC, a cgroup OOM-kill) "
        "after which a worker stops and exits 1; they are retried elsewhere (0: off).",
    )
    resume: bool = rule(
        False,
        doc="Keep a latest-only resume state while a trial runs, so its retry copy after an "
        "interruption continues from the saved epoch; deleted when the trial ends.",
    )  # docs/resume.md
    resume_every_s: float = rule(
        60.0,
        ge=0,
        doc="At most one resume save per this many seconds, at the end of an epoch (0: every "
        "epoch).",
    )
    pause: bool = rule(
        False,
        doc="A trial the pruner stops before its last epoch is paused, its resume state kept, "
        "and continued when it ranks in the top of its step (asynchronous successive halving's "
        "promotion); needs `resume` (on by itself when left out).",
    )  # docs/pause.md
    paused_max: int | None = rule(
        None,
        ge=1,
        doc="At most this many paused states kept; past it the least promising is evicted "
        "(its trial stays pruned).",
        shown_default="no cap",
    )
    paused_max_gb: float | None = rule(
        None,
        gt=0,
        doc="At most this many GB of paused states; past it the least promising are evicted.",
        shown_default="no cap",
    )


@dataclass(frozen=True)
class TrainerSpec:
    """Section ``trainer``: what trains a trial, an entry point or a command, and the config
    the search writes into."""

    entrypoint: str = rule(
        BUILTIN_ENTRYPOINT,
        what="an entry point",
        doc="The `package.module:function` called as `run(config, ctx)` in each trial, found "
        "from the study file's folder first.",
        shown_default="`dvt_hpo.train:run` (the built-in trainer)",
    )
    config: dict[str, Any] = domain(
        default_factory=dict,
        doc="The trainer config every trial starts from; the search writes its values into a "
        "copy at their paths.",
        accepts="a mapping",
    )  # normalized full config (defaults filled)
    config_file: Path | None = domain(
        None,
        doc="The trainer config as a YAML file instead of `config`, relative to the study file.",
        accepts="a file path or null",
    )
    schema: str | None = rule(
        None,
        what="'module:Dataclass'",
        doc="The dataclass a custom trainer's config follows, so search paths and values are "
        "checked before a trial runs.",
        shown_default="the built-in trainer's `TrainerConfig`",
    )  # default TrainerConfig (built-in)
    # A training script run as the trainer: argv with {placeholders}; entrypoint is then
    # COMMAND_ENTRYPOINT.
    command: tuple[str, ...] | None = domain(
        None,
        doc="A training script's command line, run as the trainer with `{placeholders}` "
        "filled in (instead of `entrypoint`).",
        accepts="a list of strings",
    )
    metrics_pattern: str | None = domain(
        None,
        doc="A regex with a `step` group and one per metric, searched in each line the "
        "command prints: a match is a report.",
        accepts="a regular expression or null",
    )  # a regex over its stdout lines


@dataclass(frozen=True)
class Condition:
    """``when:`` of a dimension: every named earlier dimension has one of the listed values."""

    equals: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class Dimension:
    """An item of ``search_space``: one hyperparameter, its range and where it is written."""

    name: str = domain(
        doc="The parameter's name in the study (its params, `{name}` in commands); unique.",
        accepts="a name",
        shown_default="the path",
    )  # default: the path
    kind: Literal["float", "int", "categorical", "bool"] = rule(
        doc="The kind of value sampled; `bool` is a categorical of false and true."
    )
    path: str = domain(
        doc="The trainer config's field the value is written to, one the config has unless "
        "`new_key` is set.",
        accepts="a dotted path",
        shown_default="the name, for a `trainer.command` (its `{name}`); required otherwise",
    )
    new_key: bool = rule(
        False,
        doc="The path adds a key that a schema-less `trainer.config` lacks, on purpose (else "
        "it is refused as a typo: the trainer would never read the value; a `trainer.command` "
        "placeholder naming the dimension needs no flag).",
    )
    low: float | int | None = domain(
        None, doc="The smallest value (`float` and `int`).", accepts="a number"
    )
    high: float | int | None = domain(
        None, doc="The largest value (`float` and `int`).", accepts="a number"
    )
    step: float | int | None = domain(
        None,
        doc="Sample on a grid of this step; a float step disables `log`.",
        accepts="a number or null",
    )
    log: bool = rule(False, doc="Sample on a log scale (`float` and `int`).")
    choices: tuple[Any, ...] | None = domain(
        None, doc="The values of a `categorical` dimension.", accepts="a list"
    )
    when: Condition | None = domain(
        None,
        doc="Sample only when earlier dimensions have these values; otherwise the config's "
        "value stays.",
        accepts="a mapping of an earlier dimension's name to a value or a list of values",
    )


@dataclass(frozen=True)
class MlflowSpec:
    """``tracking.mlflow``: the study as a parent MLflow run, every trial a nested run."""

    tracking_uri: str | None = rule(
        None,
        what="a URI or folder",
        doc="The MLflow tracking store: `sqlite:///mlflow.db` or a server's `http(s)://` URI.",
        shown_default="`$MLFLOW_TRACKING_URI`, else MLflow's own",
    )
    experiment: str | None = rule(
        None, doc="The MLflow experiment of the runs.", shown_default="the study's name"
    )


@dataclass(frozen=True)
class TrackingSpec:
    """Section ``tracking``: where trials are logged beside the study database."""

    mlflow: MlflowSpec | None = domain(
        None, doc="Log the study and its trials to MLflow (`pip install 'dvt-hpo[mlflow]'`)."
    )


@dataclass(frozen=True)
class ClusterSpec:
    """Section ``cluster``: how ``dvt-hpo submit`` starts the study's workers on a scheduler."""

    kind: Literal["slurm"] = rule("slurm", doc="The scheduler the workers are submitted to.")
    workers: int = rule(
        1, ge=1, doc="Array tasks, each one `dvt-hpo run` of the study (`--workers N` overrides)."
    )  # array tasks, each one ``dvt-hpo run`` (an orchestrator)
    partition: str | None = rule(
        None, what="a partition name", doc="The Slurm partition (null: the cluster's default)."
    )
    time_limit: int = domain(
        60,
        doc="Each worker's time limit; a worker starts no trial that would not fit in what is "
        "left.",
        accepts='minutes, or Slurm\'s `"D-HH:MM:SS"` forms',
    )  # minutes (written as minutes or Slurm's "D-HH:MM:SS")
    cpus_per_worker: int | None = rule(
        None, ge=1, doc="CPUs per worker (null: Slurm's default)."
    )  # None: Slurm's default
    gpus_per_worker: int = rule(
        0, ge=0, doc="GPUs per worker, which become its `trials.devices` (0: `devices: cpu`)."
    )  # they become the worker's trials.devices
    memory_per_worker: int | None = domain(
        None, doc="Memory per worker (null: Slurm's default).", accepts="a size (`64GiB`) or null"
    )  # bytes (from "16GiB"); None: Slurm's default
    sbatch: dict[str, Any] = domain(
        default_factory=dict,
        doc="Any other sbatch option, without dashes: `{account: vision, qos: normal}`.",
        accepts="a mapping",
    )  # more sbatch options (account, qos)
    setup: tuple[str, ...] = domain(
        (),
        doc="Shell lines run before the worker (`module load`, `source .../activate`).",
        accepts="a list of strings",
    )  # shell lines run before the worker
    requeue: bool = rule(
        False, doc="A preempted worker goes back to the queue and retries its trials itself."
    )  # a preempted worker goes back to the queue
    logs: Path = domain(
        Path("runs/slurm"),
        doc="The folder of the workers' stdout and stderr.",
        accepts="a folder path",
        shown_default="`<trials.runs_dir>/slurm`",
    )  # resolved; default <trials.runs_dir>/slurm
    job_name: str | None = rule(
        None, what="a job name", doc="The Slurm job name.", shown_default="`dvt-hpo-<name>`"
    )  # default dvt-hpo-<study name>
    # SQLite or journal files on a cluster: refused for several workers unless set.
    allow_file_storage: bool = rule(
        False,
        doc="Allow several workers on a SQLite or journal file, when they all run on one node.",
    )


@dataclass(frozen=True)
class StudySpec:
    path: Path  # the study file (absolute)
    study: StudySection
    objective: ObjectiveSpec
    trials: TrialsSpec
    batch_size: BatchSizeSpec
    trainer: TrainerSpec
    search_space: tuple[Dimension, ...]
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    cluster: ClusterSpec | None = None  # None: no ``cluster`` section
    # Where each field was written: {"objective.metric": (file, line)}, so a check that runs
    # after loading (the stored study's comparison) can still name the line.
    locations: dict[str, tuple[str, int | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # The --set overrides it was loaded with, so that a printed follow-up command (retry,
    # dashboard) names the same study. Never stored (a value may hold a password).
    overrides: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def locate(self, dotted: str) -> tuple[str, int | None]:
        """The file and line of ``dotted`` (or of its nearest written ancestor)."""
        key = dotted
        while key not in self.locations:
            if not key:
                return (str(self.path), None)
            key = re.sub(r"(?:^|\.)[^.\[\]]*$|\[\d+\]$", "", key)
        return self.locations[key]
