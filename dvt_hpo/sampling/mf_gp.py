"""A Gaussian process over (config, epoch) that learns from stopped trials' curves, as MOBSTER does.

Optuna's TPE and GPSampler fit on complete trials only; under a pruner that stops most trials,
that is about ten trials a study here, and what the stopped ones showed is mostly lost. MOBSTER
(Klein et al. 2020, Syne Tune's model-based asynchronous successive halving) fits one GP on every
(config, epoch, value) a study observed, stopped and running trials included, and picks the next
config by expected improvement. :class:`MultiFidelityGPSampler` does that as an Optuna sampler,
with numpy and scipy only (no torch on the orchestrator's side): a Matérn 5/2 kernel with one
length scale per parameter and one for log(epoch), its hyperparameters fitted by maximum
marginal likelihood, expected improvement at the last epoch (the value a user keeps) over the
best the model predicts there for a config already tried, and configs proposed for trials still
running without a report counted at the value the model predicts for them ("kriging believer"),
so that several trials at a time do not get the same config. The pruner still decides when to
stop a trial.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from dvt_hpo.sampling.blas import single_thread_blas
from dvt_hpo.sampling.mf_gp_codec import Codec
from dvt_hpo.sampling.mf_gp_conditions import Conditions, Rule
from dvt_hpo.sampling.mf_gp_points import CurveCache, Points

__all__ = ["MultiFidelityGPSampler"]

_SQRT5 = math.sqrt(5.0)
_OBSERVED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
# Points the model holds at most (an ask factorizes a matrix of this side and solves it for
# every candidate: 0.07 s at 600 on one core), and points its hyperparameters are fitted on
# (about 50 factorizations: 0.8 s at 300, 20 s at 1,000). A study of 100-300 trials with its
# curves fits whole; past that, see dvt_hpo.sampling.mf_gp_points.
_MAX_POINTS = 600
_MAX_FIT_POINTS = 300
# Fitted hyperparameters are rounded to this many decimals (of their logs): a last-bit
# difference between two machines' arithmetic then rarely changes the model the next asks use.
_THETA_DECIMALS = 3
# CPU seconds (of the fitting thread; BLAS runs on it, sampling/blas.py) the hyperparameter fit
# may take. At _MAX_FIT_POINTS it takes about 1 s of one core, so the cap bounds only a fit gone
# far beyond that, which would hold the worker's ask (and idle its free slot). CPU time, not wall
# time: a loaded machine stretches the wall time, not this, so the same study still fits the same
# (replays stay identical under load). Past the cap the model keeps the last fitted values (the
# starting ones before any fit), never the optimizer's partial point; below it the fit is
# untouched, and so are the trials.
_FIT_CAP_S = 10.0


class MultiFidelityGPSampler(optuna.samplers.BaseSampler):
    """Expected improvement at the last epoch from a GP fitted on every trial's curve.

    ``n_startup_trials``: trials sampled at random before the model decides. ``refit_every``:
    trials between two fits of the kernel's hyperparameters (in between, the model takes the new
    data with the last ones). ``n_candidates``: configs the acquisition is evaluated on (half
    uniform, half near the best configs so far). ``model_conditional``: a parameter outside the
    space every trial shares, present exactly when a categorical one takes some of its choices
    (a ``when:`` on one choice), is modelled too (:mod:`dvt_hpo.sampling.mf_gp_conditions`);
    with False, and for any other conditional parameter, univariate TPE samples it."""

    def __init__(
        self,
        *,
        n_startup_trials: int = 10,
        refit_every: int = 5,
        n_candidates: int = 1000,
        model_conditional: bool = True,
        seed: int | None = None,
    ) -> None:
        for name, value, low in (
            ("n_startup_trials", n_startup_trials, 1),
            ("refit_every", refit_every, 1),
            ("n_candidates", n_candidates, 2),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(model_conditional, bool):
            raise ValueError(f"model_conditional must be true or false, got {model_conditional!r}")
        self._model_conditional = model_conditional
        self._n_startup = n_startup_trials
        self._refit_every = refit_every
        self._n_candidates = n_candidates
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        with warnings.catch_warnings():  # consider_endpoints: deprecated, kept by the default
            warnings.simplefilter("ignore")
            self._tpe = optuna.samplers.TPESampler(
                multivariate=False, consider_endpoints=True, n_startup_trials=0, seed=seed
            )
        self._conditions = Conditions()
        self._rules: dict[str, Rule] = {}  # the conditional parameters of the last space
        self._theta: np.ndarray | None = None  # log hyperparameters of the last fit
        self._fitted_at = -1  # observed trials when the hyperparameters were last fitted
        self._curves = CurveCache()
        # The pruner's hyperparameters before the first ask fits (gp_chance).
        self._startup_fit: tuple[tuple[int, int], np.ndarray] | None = None

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._random.reseed_rng()
        self._tpe.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if len(study.directions) != 1:
            raise ValueError("the multi-fidelity GP sampler takes one objective")
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        return self._space(study.study_name, finished)

    def _space(self, study_name: str, finished: list[FrozenTrial]) -> dict[str, BaseDistribution]:
        """The modelled space of ``finished``: one pass over them gives both the shared space and
        the conditions."""
        self._conditions.read(study_name, finished)
        space = self._conditions.shared()
        self._rules = self._conditions.rules() if self._model_conditional else {}
        space.update(self._conditions.distributions(self._rules))
        return space

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = [
            t
            for t in study.get_trials(deepcopy=False, states=_OBSERVED)
            if t.number != trial.number
        ]
        finished = [t for t in trials if t.state != TrialState.RUNNING]
        if len(finished) < self._n_startup:
            return {}
        codec = Codec(search_space, {n: r for n, r in self._rules.items() if n in search_space})
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        data = self._curves.points(
            study.study_name,
            trials,
            codec,
            sign,
            max_points=_MAX_POINTS,
            max_fit_points=_MAX_FIT_POINTS,
        )
        if data is None:
            return {}
        # BLAS on one thread: a thread count splits sums differently and changes the last bits
        # of a factorization, and with them, now and then, which candidate wins. The matrices
        # hold a few hundred rows: one core is as fast as several here, and an orchestrator's
        # threads would compete with its trials.
        with single_thread_blas():
            return self._decide(data, len(trials), codec)

    def _decide(self, data: Points, observed: int, codec: Codec) -> dict[str, Any]:
        x, pending = data.x, data.pending
        mean, scale = float(data.y.mean()), float(data.y.std()) or 1.0
        y = (data.y - mean) / scale
        # Hyperparameters settle as data grows: refit every refit_every trials, later every 10 %.
        due = max(self._refit_every, self._fitted_at // 10)
        # No fit yet, or one for other columns: the space every trial shares shrinks when a
        # trial lacks a parameter the earlier ones all had (a `when:` that held for every
        # startup trial), so the model refits now rather than at its schedule (_fit starts
        # afresh from hyperparameters of another width).
        unfitted = self._theta is None or len(self._theta) != x.shape[1] + 2
        if unfitted or observed - self._fitted_at >= due:
            fitted = _fit(data.fit_x, (data.fit_y - mean) / scale, self._theta)
            if fitted is not None:
                self._theta = np.round(fitted, _THETA_DECIMALS)
            elif unfitted:
                self._theta = np.round(_start_theta(x.shape[1]), _THETA_DECIMALS)
            # Also after a capped fit: the next one waits for the usual schedule, so a machine
            # that cannot fit within the cap pays it once per refit, not at every ask.
            self._fitted_at = observed
        model = _GP(x, y, self._theta)
        if len(pending):
            # Kriging believer: a trial running without a report counts as tried, at the final
            # value predicted for it, so the next trial is not proposed at the same config.
            top = _at_last_epoch(pending)
            model = _GP(np.vstack([x, top]), np.concatenate([y, model.mean(top)]), self._theta)
        tried = np.unique(np.vstack([x[:, :-1], pending]), axis=0)
        rated = model.mean(_at_last_epoch(tried))
        candidates = self._candidates(codec, tried[np.argsort(-rated, kind="stable")[:10]])
        mu, sd = model.predict(_at_last_epoch(candidates))
        ei = _expected_improvement(mu, sd, float(rated.max()))
        return codec.decode(candidates[int(np.argmax(ei))])

    def chance_to_lead(
        self, study: Study, trial: FrozenTrial, *, min_finished: int
    ) -> float | None:
        """The model's chance that ``trial`` (running, with reports) ends above the best final
        value it predicts for a finished config; None under ``min_finished`` finished trials or
        for a config outside the model's space. After the random start the hyperparameters are
        the last ask's; before it, the decision fits its own once per finished trial (never the
        sampler's), so it depends only on what the study holds."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if len(finished) < min_finished:
            return None
        space = self._space(study.study_name, finished)
        codec = Codec(space, {n: r for n, r in self._rules.items() if n in space})
        config = codec.encode(trial.params)
        if config is None:
            return None
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        data = self._curves.points(
            study.study_name,
            [*finished, trial],
            codec,
            sign,
            max_points=_MAX_POINTS,
            max_fit_points=_MAX_FIT_POINTS,
        )
        if data is None or trial.last_step is None or trial.last_step >= data.last_step:
            return None  # at the last epoch any trial reached, stopping saves nothing
        from scipy.special import ndtr

        with single_thread_blas():
            mean, scale = float(data.y.mean()), float(data.y.std()) or 1.0
            theta = self._theta
            if theta is None or len(theta) != data.x.shape[1] + 2:
                theta = self._startup_theta(data, len(finished), mean, scale)
            model = _GP(data.x, (data.y - mean) / scale, theta)
            done = np.unique(data.x[:, :-1], axis=0)
            done = done[np.any(done != config, axis=1)]  # the others, not the trial itself
            if not len(done):
                return None
            best = float(model.mean(_at_last_epoch(done)).max())
            mu, sd = model.predict(_at_last_epoch(config[None, :]))
            # The chance for the value it will report, so with the noise the model sees.
            spread = math.sqrt(float(sd[0]) ** 2 + math.exp(theta[-1]))
            return float(ndtr((float(mu[0]) - best) / spread))

    def _startup_theta(self, data: Points, finished: int, mean: float, scale: float) -> np.ndarray:
        """Hyperparameters for a decision before the sampler's first fit, refitted once each
        time another trial has finished."""
        key = (finished, data.x.shape[1])
        if self._startup_fit is None or self._startup_fit[0] != key:
            fitted = _fit(data.fit_x, (data.fit_y - mean) / scale, None)
            theta = fitted if fitted is not None else _start_theta(data.x.shape[1])
            self._startup_fit = (key, np.round(theta, _THETA_DECIMALS))
        return self._startup_fit[1]

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        # A parameter outside the space every trial shares that the model does not take (a
        # conditional one): at random while the model waits for its first trials, then by
        # univariate TPE, which fits each parameter on the trials that have it.
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        sampler = self._random if len(finished) < self._n_startup else self._tpe
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def _candidates(self, codec: Codec, leaders: np.ndarray) -> np.ndarray:
        """Uniform configs, and configs near ``leaders`` (the ones rated best at the last epoch)."""
        half = self._n_candidates // 2
        uniform = codec.random(self._rng, self._n_candidates - half)
        centres = leaders[self._rng.integers(0, len(leaders), half)]
        local = centres + self._rng.normal(0.0, 0.1, centres.shape)
        return codec.snap(np.vstack([uniform, local]))


def _at_last_epoch(configs: np.ndarray) -> np.ndarray:
    return np.hstack([configs, np.ones((len(configs), 1))])


def _expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    from scipy.special import ndtr

    z = (mu - best) / sd
    return sd * (z * ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))


@dataclass
class _Kernel:
    """Matérn 5/2 with one length scale per input; theta = log(scales..., signal, noise)."""

    theta: np.ndarray

    @property
    def scales(self) -> np.ndarray:
        return np.exp(self.theta[:-2])

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        r = np.sqrt(_sq_dist(a / self.scales, b / self.scales))
        return math.exp(self.theta[-2]) * (1 + _SQRT5 * r + 5.0 / 3.0 * r * r) * np.exp(-_SQRT5 * r)


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


class _GP:
    def __init__(self, x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> None:
        from scipy.linalg import cho_factor, cho_solve

        self.x, self.kernel = x, _Kernel(theta)
        k = self.kernel(x, x)
        for jitter in (1e-8, 1e-6, 1e-4, 1e-2):  # more only where rounding breaks the factorization
            try:
                self.chol = cho_factor(
                    k + (math.exp(theta[-1]) + jitter) * np.eye(len(x)), lower=True
                )
                break
            except np.linalg.LinAlgError:
                continue
        else:
            raise np.linalg.LinAlgError("the GP's kernel matrix is not positive definite")
        self.alpha = cho_solve(self.chol, y)

    def mean(self, x: np.ndarray) -> np.ndarray:
        return self.kernel(x, self.x) @ self.alpha

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from scipy.linalg import solve_triangular

        ks = self.kernel(x, self.x)
        v = solve_triangular(self.chol[0], ks.T, lower=True)
        var = math.exp(self.kernel.theta[-2]) - (v * v).sum(0)
        return ks @ self.alpha, np.sqrt(np.maximum(var, 1e-12))


def _neg_log_likelihood(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Minus the log marginal likelihood (with a weak prior keeping length scales near 1 and the
    noise above 1e-4) and its gradient in theta."""
    from scipy.linalg import cho_factor, cho_solve

    n = len(x)
    scaled = x / np.exp(theta[:-2])
    r2 = _sq_dist(scaled, scaled)
    r = np.sqrt(r2)
    signal, noise = math.exp(theta[-2]), math.exp(theta[-1])
    decay = np.exp(-_SQRT5 * r)
    k = signal * (1 + _SQRT5 * r + 5.0 / 3.0 * r2) * decay
    try:
        chol = cho_factor(k + (noise + 1e-8) * np.eye(n), lower=True)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    alpha = cho_solve(chol, y)
    inverse = cho_solve(chol, np.eye(n))
    nll = 0.5 * y @ alpha + np.log(np.diag(chol[0])).sum() + 0.5 * n * math.log(2 * math.pi)
    w = np.outer(alpha, alpha) - inverse  # d(log likelihood) = 0.5 tr(w dK)
    grad = np.empty_like(theta)
    # d(nll)/d(log scale j) = -0.5 sum_ab w_ab c_ab (s_aj - s_bj)^2, expanded as matrix products.
    wc = w * (signal * 5.0 / 3.0 * (1 + _SQRT5 * r) * decay)
    grad[:-2] = -(scaled**2 * wc.sum(1)[:, None]).sum(0) + np.einsum(
        "ij,ij->j", scaled, wc @ scaled
    )
    grad[-2] = -0.5 * (w * k).sum()
    grad[-1] = -0.5 * noise * np.trace(w)
    prior = 0.5 * (theta[:-2] ** 2).sum() / 4.0  # log length scales ~ N(0, 2^2)
    grad[:-2] += theta[:-2] / 4.0
    return float(nll + prior), grad


def _start_theta(dims: int) -> np.ndarray:
    return np.array([math.log(0.5)] * dims + [0.0, math.log(0.01)])


class _CapReached(Exception):
    """The hyperparameter fit ran past ``_FIT_CAP_S``."""


def _fit(x: np.ndarray, y: np.ndarray, start: np.ndarray | None) -> np.ndarray | None:
    """The fitted log hyperparameters, or None when the fit ran past ``_FIT_CAP_S``."""
    from scipy.optimize import minimize

    dims = x.shape[1]
    bounds = [(math.log(0.01), math.log(20.0))] * dims + [
        (math.log(0.05), math.log(20.0)),
        (math.log(1e-4), math.log(1.0)),
    ]
    if start is None or len(start) != dims + 2:
        start = _start_theta(dims)
    deadline = time.thread_time() + _FIT_CAP_S

    def capped(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        # Checked before each evaluation (one factorization): the cap is overrun by one at most,
        # and below it the optimizer sees exactly the values it saw without a cap.
        if time.thread_time() > deadline:
            raise _CapReached
        return _neg_log_likelihood(theta, x, y)

    try:
        result = minimize(
            capped,
            start,
            args=(x, y),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 50},
        )
    except _CapReached:
        return None
    return np.asarray(result.x)
