"""benchmarks/search/fast_log_ndtr.py gives Optuna's TPE log normal CDF to the bit."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from optuna.samplers._tpe import _truncnorm

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "search"))

import fast_log_ndtr  # noqa: E402

# Optuna's own, kept before any test installs the array version.
OPTUNAS = _truncnorm._log_ndtr


def test_every_branch_has_optunas_bits() -> None:
    rng = np.random.default_rng(11)
    a = np.concatenate(
        [
            rng.uniform(-60.0, 12.0, 50_000),  # the series below -20, log(ndtr), -ndtr(-a) above 6
            -np.exp(rng.uniform(np.log(20.0), np.log(1e150), 10_000)),  # far tails
            np.linspace(-21.0, -19.0, 2_001),
            np.linspace(5.0, 7.0, 2_001),
            [-20.0, 6.0, 0.0, -0.0, np.nextafter(-20.0, 0.0), np.nextafter(6.0, 7.0)],
        ]
    )
    assert np.array_equal(OPTUNAS(a).view(np.int64), fast_log_ndtr.log_ndtr(a).view(np.int64))
    grid = a[:600].reshape(20, 30)  # Optuna calls it on 2-D arrays too
    assert np.array_equal(OPTUNAS(grid), fast_log_ndtr.log_ndtr(grid))
    assert fast_log_ndtr.log_ndtr(np.array([])).shape == (0,)


def test_install_swaps_optunas_function_after_checking_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_truncnorm, "_log_ndtr", OPTUNAS)
    monkeypatch.setattr(fast_log_ndtr, "_installed", None)
    assert fast_log_ndtr.install()
    assert _truncnorm._log_ndtr is fast_log_ndtr.log_ndtr


def test_a_function_that_differs_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_truncnorm, "_log_ndtr", lambda a: OPTUNAS(a) + 1e-15)
    monkeypatch.setattr(fast_log_ndtr, "_installed", None)
    assert not fast_log_ndtr.install()
    assert _truncnorm._log_ndtr is not fast_log_ndtr.log_ndtr
