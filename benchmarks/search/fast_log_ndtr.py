"""Optuna's TPE ``_truncnorm._log_ndtr`` on whole arrays, bit for bit, for the replay engine.

Optuna computes the log of the normal CDF one element at a time in Python
(``np.frompyfunc(_log_ndtr_single)``, a series loop below -20); in the search-efficiency grid
that is half of a TPE study's time. :func:`log_ndtr` performs the same floating-point
operations in the same order on arrays: the branch tests, the ``+ - * /`` of the series (IEEE
arithmetic rounds the same in numpy), and the same libm calls (``math.erf``, ``math.erfc``,
``math.log`` and Python's ``**``, applied per element), so every result has Optuna's bits.

:func:`install` replaces Optuna's function only after checking that on a probe set covering
each branch and its edges; where it differs (another Optuna release, another libm) Optuna's
stays. ``search_efficiency.py --check`` still compares replays with ``dvt-hpo run``, which never
uses this module.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = ["install", "log_ndtr"]

# Optuna's constants, computed the way its module computes them.
_SQRT2 = 2**0.5
_X_LOW = -1 / 2**0.5
_X_HIGH = 1 / 2**0.5
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)
_log = np.frompyfunc(math.log, 1, 1)
_square = np.frompyfunc(lambda v: v**2, 1, 1)


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values).astype(float)


def _ndtr(a: np.ndarray) -> np.ndarray:
    """Optuna's ``_ndtr_single`` on an array."""
    x = a / _SQRT2
    y = np.empty_like(x)
    left = x < _X_LOW
    middle = ~left & (x < _X_HIGH)
    right = ~(left | middle)
    y[left] = 0.5 * _floats(_erfc(-x[left]))
    y[middle] = 0.5 + 0.5 * _floats(_erf(x[middle]))
    y[right] = 1.0 - 0.5 * _floats(_erfc(x[right]))
    return y


def _log_ndtr_below_20(a: np.ndarray) -> np.ndarray:
    """Optuna's asymptotic series for ``a <= -20``, each element stopping where its own loop
    would."""
    square = _floats(_square(a))
    log_lhs = -0.5 * square - _floats(_log(-a)) - _HALF_LOG_2PI
    last_total = np.zeros_like(a)
    right_hand_side = np.ones_like(a)
    denom_factor = np.ones_like(a)
    denom_cons = 1 / square
    numerator = 1.0
    sign = 1
    i = 0
    going = np.abs(last_total - right_hand_side) > sys.float_info.epsilon
    while going.any():
        i += 1
        sign = -sign
        numerator *= 2 * i - 1
        last_total = np.where(going, right_hand_side, last_total)
        denom_factor = np.where(going, denom_factor * denom_cons, denom_factor)
        right_hand_side = np.where(
            going, right_hand_side + sign * numerator * denom_factor, right_hand_side
        )
        going &= np.abs(last_total - right_hand_side) > sys.float_info.epsilon
    return log_lhs + _floats(_log(right_hand_side))


def log_ndtr(a: np.ndarray) -> np.ndarray:
    """``optuna.samplers._tpe._truncnorm._log_ndtr(a)``, computed on arrays."""
    a = np.asarray(a, dtype=float)
    flat = a.ravel()
    out = np.empty_like(flat)
    high = flat > 6
    middle = ~high & (flat > -20)
    low = ~(high | middle)
    out[high] = -_ndtr(-flat[high])
    out[middle] = _floats(_log(_ndtr(flat[middle])))
    if low.any():
        out[low] = _log_ndtr_below_20(flat[low])
    return out.reshape(a.shape)


def _probe() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = [-20.0, 6.0, 0.0, -1.0, 1.0, np.nextafter(-20.0, 0.0), np.nextafter(6.0, 7.0)]
    return np.concatenate(
        [
            rng.uniform(-40.0, 10.0, 20_000),
            -np.exp(rng.uniform(math.log(20.0), math.log(1e100), 5_000)),
            rng.normal(0.0, 1.0, 5_000),
            np.array(edges),
        ]
    )


_installed: bool | None = None


def install() -> bool:
    """Use :func:`log_ndtr` in Optuna's TPE if it gives Optuna's bits on the probe set (checked
    once per process)."""
    global _installed
    if _installed is None:
        _installed = _install()
    return _installed


def _install() -> bool:
    try:
        from optuna.samplers._tpe import _truncnorm
    except ImportError:
        return False
    original = getattr(_truncnorm, "_log_ndtr", None)
    if original is None:
        return False
    probe = _probe()
    if not np.array_equal(original(probe).view(np.int64), log_ndtr(probe).view(np.int64)):
        return False
    _truncnorm._log_ndtr = log_ndtr
    return True
