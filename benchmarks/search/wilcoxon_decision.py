"""How long one Wilcoxon pruning decision takes: Optuna's pruner against dvt-hpo's.

    python benchmarks/search/wilcoxon_decision.py            # epochs 2..16 and 30, 52
    python benchmarks/search/wilcoxon_decision.py --repeats 5

dvt-hpo decides a report under its study lock, so a slow decision holds up every trial's report
and the next ask. A study is built in memory: a best trial of 52 epochs and a trial at epoch
n, both accuracies on a validation set of 200 images (multiples of 0.005: ties and zeros, as
real accuracies have). For each n, both pruners decide on the same trial; the table gives the
median wall time of each and whether the p-values and the decisions agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import optuna
import scipy.stats as ss
from optuna.trial import FrozenTrial

try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dvt_hpo.sampling.wilcoxon import WilcoxonPruner, signed_rank_pvalue  # noqa: E402

VAL_SAMPLES = 200
EPOCHS = 52


def curve(level: float, rng: np.random.Generator) -> list[float]:
    steps = np.arange(1, EPOCHS + 1)
    raw = level - 0.3 * np.exp(-steps / 8) + rng.normal(0, 0.01, EPOCHS)
    return [float(v) for v in np.round(raw * VAL_SAMPLES) / VAL_SAMPLES]


def timed(
    pruner: optuna.pruners.BasePruner, study: optuna.Study, trial: FrozenTrial, repeats: int
) -> tuple[float, bool]:
    times, result = [], False
    for _ in range(repeats):
        start = time.perf_counter()
        result = pruner.prune(study, trial)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    rng = np.random.default_rng(0)
    optunas, ours = optuna.pruners.WilcoxonPruner(), WilcoxonPruner()
    study = optuna.create_study(direction="maximize", pruner=optunas)
    best = study.ask()
    for step, value in enumerate(curve(0.85, rng), 1):
        best.report(value, step)
    study.tell(best, 0.85)
    trial = study.ask()
    values = curve(0.83, rng)
    best_values = study.best_trial.intermediate_values
    print("| epochs | Optuna's decision | dvt-hpo's | same p-value | same decision |")
    print("| --- | --- | --- | --- | --- |")
    total = [0.0, 0.0]
    for n in range(1, EPOCHS + 1):
        trial.report(values[n - 1], n)
        if n < 2 or n > 16 and n not in (30, EPOCHS):
            continue
        frozen = study._storage.get_trial(trial._trial_id)
        t_optuna, d_optuna = timed(optunas, study, frozen, args.repeats)
        t_ours, d_ours = timed(ours, study, frozen, args.repeats)
        diffs = np.array(values[:n]) - np.array([best_values[s] for s in range(1, n + 1)])
        p_scipy = ss.wilcoxon(diffs, alternative="less", zero_method="zsplit").pvalue
        same_p = float(p_scipy) == signed_rank_pvalue(diffs, "less")
        total[0] += t_optuna
        total[1] += t_ours
        print(
            f"| {n} | {t_optuna * 1000:.1f} ms | {t_ours * 1000:.1f} ms | "
            f"{'yes' if same_p else 'NO'} | {'yes' if d_optuna == d_ours else 'NO'} |"
        )
    print(f"| sum | {total[0]:.2f} s | {total[1]:.3f} s | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
