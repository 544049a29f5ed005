"""Probes needed to find the largest batch size: dvt-hpo's search against Lightning's and
accelerate's, on the same synthetic ``fits``. Stdlib only; runs in a few seconds.

    python benchmarks/overheads/batch_size_search.py

A synthetic model fits a batch of ``n`` iff ``n <= N_max``. Its memory is linear,
``base + per_sample·n``, reaching the available memory half a sample above ``N_max``; the peak
it reports is noisy, ``base + per_sample·n·(1 + e)`` with ``e`` uniform in ±noise, fixed per
size (allocator rounding, workspaces and fragmentation make real figures imprecise). Only
dvt-hpo's "with memory figures" variant reads them; every other search sees a bool or an
out-of-memory exception. Every call of ``fits`` counts as one probe.

The re-implementations follow the sources (counting each ``fits`` call as a probe):

- PyTorch Lightning, ``src/lightning/pytorch/tuner/batch_size_scaling.py``
  (``_run_power_scaling``, ``_run_binary_scaling``, ``_adjust_batch_size``) with the
  ``BatchSizeFinder`` defaults ``init_val=2``, ``max_trials=25``, ``max_val=8192`` and, for
  "binsearch", the final ``int(size * (1 - margin))`` with ``margin=0.05`` (added by
  Lightning-AI/pytorch-lightning PR #21163); that last size is returned without being tried.
  ``steps_per_trial`` only changes the work inside one probe, not the probe count.
- Hugging Face accelerate, ``src/accelerate/utils/memory.py``
  (``find_executable_batch_size``): top-down from ``starting_batch_size``, multiplying by 0.9
  after each out-of-memory error (older versions halved). Started from the search's cap,
  since from 2 or 16 it never grows.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

try:
    from dvt_hpo.batch.search import Probe, find_batch_size, is_out_of_memory
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from dvt_hpo.batch.search import Probe, find_batch_size, is_out_of_memory

HIGH = 8192  # the cap every search gets (Lightning's default max_val)
TOLERANCE = 0.02
NOISE = 0.01
AVAILABLE = 16 * 2**30
BASE = 2 * 2**30  # weights, gradients and optimizer state


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError (matched by module and name, like the real one)."""


OutOfMemoryError.__module__ = "torch"


class Model:
    """The synthetic model: ``n`` fits iff ``n <= n_max``; counts probes."""

    def __init__(self, n_max: int, noise: float = NOISE, seed: int = 0) -> None:
        self.n_max = n_max
        self.noise = noise
        self.per_sample = (AVAILABLE - BASE) / (n_max + 0.5)
        self.rng = random.Random(seed * 1_000_003 + n_max)
        self.errors: dict[int, float] = {}
        self.probes = 0

    def fits(self, n: int) -> bool:
        self.probes += 1
        return n <= self.n_max

    def fits_with_memory(self, n: int) -> Probe:
        fit = self.fits(n)
        error = self.errors.setdefault(n, self.rng.uniform(-self.noise, self.noise))
        peak = int(BASE + self.per_sample * n * (1 + error)) if fit else None
        return Probe(fit, peak, AVAILABLE)

    def step(self, n: int) -> None:
        """A training step that raises out-of-memory, as accelerate and Lightning expect."""
        if not self.fits(n):
            raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} MiB")


# -- PyTorch Lightning ---------------------------------------------------------------------


def _lightning_adjust(size: int, factor: float = 1.0, value: int | None = None) -> tuple[int, bool]:
    # _adjust_batch_size; the dataset-length check is moot (the dataset is unbounded here)
    # and max_val caps the new size.
    new_size = value if value is not None else int(size * factor)
    new_size = min(new_size, HIGH)
    return new_size, new_size != size


def _lightning_try(model: Model, size: int) -> bool:
    try:
        model.step(size)
    except RuntimeError as exception:
        if is_out_of_memory(exception):
            return False
        raise
    return True


def lightning_power(model: Model, init_val: int = 2, max_trials: int = 25) -> int:
    """_run_power_scaling: double until the first OOM, then take half of the size that failed."""
    new_size, _ = _lightning_adjust(init_val, value=init_val)
    any_success = False
    for _ in range(max_trials):
        if _lightning_try(model, new_size):
            new_size, changed = _lightning_adjust(new_size, factor=2.0)
            if not changed:
                break
            any_success = True
        else:
            new_size, _ = _lightning_adjust(new_size, factor=0.5)
            if any_success:
                break
    return new_size


def lightning_binsearch(
    model: Model, init_val: int = 2, max_trials: int = 25, margin: float = 0.05
) -> tuple[int, int]:
    """_run_binary_scaling: double until the first OOM, then bisect to adjacent sizes.

    Returns the size found and the size Lightning finally sets (after the margin).
    """
    new_size, _ = _lightning_adjust(init_val, value=init_val)
    low, high, count = 1, None, 0
    while True:
        if _lightning_try(model, new_size):
            count += 1
            if count > max_trials:
                break
            low = new_size
            if high:
                if high - low <= 1:
                    break
                new_size, changed = _lightning_adjust(new_size, value=(high + low) // 2)
            else:
                new_size, changed = _lightning_adjust(new_size, factor=2.0)
            if not changed:
                break
        else:
            high = new_size
            new_size, _ = _lightning_adjust(new_size, value=(high + low) // 2)
            if high - low <= 1:
                break
    return new_size, int(new_size * (1 - margin))


# -- Hugging Face accelerate ----------------------------------------------------------------


def accelerate_find(model: Model, starting_batch_size: int = HIGH) -> int:
    """find_executable_batch_size with its default reduce_batch_size_fn (×0.9)."""
    batch_size = starting_batch_size
    while True:
        if batch_size == 0:
            raise RuntimeError("No executable batch size found, reached zero.")
        try:
            model.step(batch_size)
            return batch_size
        except Exception as e:
            if is_out_of_memory(e):
                batch_size = int(batch_size * 0.9)
            else:
                raise


# -- dvt-hpo --------------------------------------------------------------------------------


def ours(model: Model, start: int, memory: bool) -> int:
    fits: Callable[[int], bool | Probe] = model.fits_with_memory if memory else model.fits
    return find_batch_size(fits, low=1, high=HIGH, start=start, tolerance=TOLERANCE).size


def run(
    search: Callable[[Model], int | tuple[int, int]], n_max: int, **model_args
) -> tuple[int, str]:
    model = Model(n_max, **model_args)
    size = search(model)
    if isinstance(size, tuple):  # Lightning binsearch: found -> set after the margin
        return model.probes, f"{size[0]}->{size[1]}"
    return model.probes, str(size)


def main() -> None:
    began = time.perf_counter()
    print(
        f"Probes (calls of fits) and resulting batch size; cap {HIGH}, tolerance ±{TOLERANCE:.0%}, "
        f"memory-figure noise ±{NOISE:.0%}.\n"
    )
    header = (
        f"{'N_max':>6} {'start':>5} | {'ours':>10} | {'ours+memory':>11} | {'PL power':>10} | "
        f"{'PL binsearch':>16} | {'accelerate':>10}"
    )
    print(header)
    print("-" * len(header))
    goal: dict[str, int] = {}
    for n_max in (37, 300, 1000, 4000):
        for start in (2, 16):
            cells = [
                run(lambda m, s=start: ours(m, s, memory=False), n_max),
                run(lambda m, s=start: ours(m, s, memory=True), n_max),
                run(lambda m, s=start: lightning_power(m, init_val=s), n_max),
                run(lambda m, s=start: lightning_binsearch(m, init_val=s), n_max),
                # accelerate ignores the start: it goes down from the cap.
                run(accelerate_find, n_max),
            ]
            if n_max == 300 and start == 2:
                goal = {"ours": cells[0][0], "ours+memory": cells[1][0]}
            widths = (10, 11, 10, 16, 10)
            row = " | ".join(
                f"{f'{p} / {s}':>{w}}" for (p, s), w in zip(cells, widths, strict=True)
            )
            print(f"{n_max:>6} {start:>5} | {row}")
    print(
        "\ncells: probes / size found. PL binsearch: found -> after its 5% margin (not probed). "
        "accelerate: from the cap, ×0.9 per OOM."
    )

    print("\nGoal, N_max=300 from 2 at ±2%:")
    print(
        f"  ours without memory figures: {goal['ours']} probes (goal <= 15: {'met' if goal['ours'] <= 15 else 'MISSED'})"
    )
    print(
        f"  ours with memory figures:    {goal['ours+memory']} probes "
        f"(goal <= 6: {'met' if goal['ours+memory'] <= 6 else 'MISSED'})"
    )

    print("\nOver 400 random N_max in [10, 5000], start 2 (mean / max probes; worst size error):")
    rng = random.Random(0)
    limits = [rng.randint(10, 5000) for _ in range(400)]
    rows: list[tuple[str, Callable[[Model], int | tuple[int, int]], dict]] = [
        ("ours", lambda m: ours(m, 2, memory=False), {}),
        *[
            (
                f"ours+memory, noise ±{noise:.0%}",
                lambda m: ours(m, 2, memory=True),
                {"noise": noise},
            )
            for noise in (0.0, 0.01, 0.02, 0.05, 0.10)
        ],
        ("PL power", lambda m: lightning_power(m), {}),
        ("PL binsearch (found)", lambda m: lightning_binsearch(m)[0], {}),
        ("accelerate", accelerate_find, {}),
    ]
    for name, search, model_args in rows:
        counts, errors = [], []
        for seed, n_max in enumerate(limits):
            model = Model(n_max, seed=seed, **model_args)
            size = search(model)
            assert isinstance(size, int) and size <= n_max, (name, n_max, size)
            counts.append(model.probes)
            errors.append((n_max - size) / n_max)
        print(
            f"  {name:<26} {statistics.mean(counts):5.2f} / {max(counts):2d}   "
            f"size within {max(errors):.1%} of N_max"
        )
    print(f"\n({time.perf_counter() - began:.2f} s)")


if __name__ == "__main__":
    main()
