"""The largest batch size that fits: a pure search over a ``fits(size)`` predicate.

The search is arithmetic only and imports no framework (never torch): the trainer supplies
``fits(size)``, which runs real steps at that batch size and returns whether they fit, and may
report the memory they used (:class:`Probe`). :func:`is_out_of_memory` is the one place that
decides whether an exception means "too big".

How :func:`find_batch_size` searches:

1. Grow: probe ``start`` (default ``low``) and double after each fit, up to ``high``.
2. If ``start`` does not fit, halve towards ``low`` until a size fits (``low`` failing raises
   :class:`~dvt_hpo.exceptions.BatchSizeError`).
3. Bisect between the largest size that fit and the smallest that failed until they are within
   ``tolerance`` of each other (relative to the fitting one) or adjacent multiples of
   ``multiple_of``.

With memory figures (``fits`` returns :class:`Probe` with ``peak_bytes`` and
``available_bytes``, as the built-in trainer does on CUDA), memory is modelled as
``peak ≈ a + b·size`` through the probes that fit, and the search jumps straight to the
predicted limit (slightly below it), then probes ``tolerance`` above the size that fit to close
the bracket. A wrong prediction only costs probes: every answer is a size that was tried and
fit, the bracket invariant (largest fit < smallest failure) always holds, and after two
mispredictions the model is dropped: the search then gallops away from where it missed (steps
of tolerance, doubling) until the outcome flips, and bisects.

Sizes tried are multiples of ``multiple_of`` where possible: the grid is ``low`` itself plus
the multiples of ``multiple_of`` in ``(low, high]``, so ``high`` is rounded down to a multiple
and a ``low`` that is not a multiple is only tried as the floor of the search. When no multiple
lies in ``[low, high]`` at all, ``multiple_of`` cannot be honoured and every integer is used.
"""

from __future__ import annotations

import gc
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dvt_hpo.exceptions import BatchSizeError

__all__ = [
    "OOM_MESSAGE_PATTERNS",
    "OOM_TYPE_NAMES",
    "Probe",
    "ProbeRecord",
    "SearchResult",
    "find_batch_size",
    "is_out_of_memory",
    "is_out_of_memory_line",
]

_logger = logging.getLogger(__name__)

# Exception classes that mean out-of-memory, as (module, class name): a class matches when a
# class of that name in that module, or in one of its submodules, is on its MRO. Matching by
# name keeps torch unimported here; torch.OutOfMemoryError is torch.cuda.OutOfMemoryError and
# lives in module "torch", torch.xpu and friends alias it or define their own.
OOM_TYPE_NAMES: tuple[tuple[str, str], ...] = (("torch", "OutOfMemoryError"),)

# Messages that mean out-of-memory, matched (case-insensitively) in the message of every
# RuntimeError along the exception chain: allocation failures do not all arrive as the
# dedicated OOM type. Each row is (what raises it, pattern).
OOM_MESSAGE_PATTERNS: tuple[tuple[str, str], ...] = (
    # CUDACachingAllocator and its HIP (ROCm) and XPU counterparts: "CUDA out of memory. Tried
    # to allocate 2.00 GiB ...".
    ("caching allocator (CUDA, HIP, XPU)", r"\b(?:CUDA|HIP|XPU) out of memory\b"),
    # cudaMalloc failing outside the caching allocator, and the driver API.
    ("CUDA runtime", r"\bCUDA error: out of memory\b"),
    ("CUDA driver", r"\bCUDA driver error: out of memory\b"),
    # torch 1.x spelling of the runtime error.
    ("CUDA runtime (torch 1.x)", r"\bcuda runtime error \(2\) ?: out of memory\b"),
    # NCCL under DDP surfaces a failed cudaMalloc as "Cuda failure 2 'out of memory'".
    ("NCCL", r"\bCuda failure (?:\d+ )?'out of memory'"),
    ("MPS allocator", r"\bMPS backend out of memory\b"),
    # CPU tensors, also when RLIMIT_AS (trials.memory_limit) is what refuses the allocation.
    ("CPU allocator", r"\bDefaultCPUAllocator: (?:can't allocate memory|not enough memory)"),
    # cuDNN reports a workspace it cannot allocate as "not supported". It also says so for a
    # few genuinely unsupported inputs; those then fail at every size and end the search with
    # BatchSizeError naming this message, so the mistake is visible, not silent.
    ("cuDNN workspace", r"\bCUDNN_STATUS_NOT_SUPPORTED\b"),
    ("cuDNN/cuBLAS/cuSOLVER/cuSPARSE", r"\bCU(?:DNN|BLAS|SOLVER|SPARSE)_STATUS_ALLOC_FAILED\b"),
    # Habana HPU: "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::...".
    ("HPU", r"\bAllocation failed\b"),
    # oneDNN (CPU convolutions) reports memory it cannot get, e.g. under RLIMIT_AS, only as
    # "could not create a primitive". It says so for unsupported inputs too; those fail at
    # every size and end the search with BatchSizeError naming this message.
    ("oneDNN (CPU)", r"\bcould not create a primitive\b"),
)

_OOM_MESSAGE_RE = re.compile(
    "|".join(f"(?:{pattern})" for _, pattern in OOM_MESSAGE_PATTERNS), re.IGNORECASE
)

# Probes aim this fraction of the tolerance below the predicted limit: a slightly low guess
# still closes the bracket with one probe above it, while the linear model, fit to peaks that
# ignore allocator fragmentation, tends to predict slightly high.
_AIM_BELOW = 0.5
# Mispredictions (a model-chosen size that failed, or a closing probe above a fit that fit
# too) after which the memory model is no longer trusted.
_MAX_MODEL_MISSES = 2
# Smallest relative gallop step, so that tolerance=0 still gallops rather than crawls.
_MIN_GALLOP = 0.01


@dataclass(frozen=True)
class Probe:
    """What ``fits(size)`` may return instead of a bool: the outcome and the memory figures.

    ``peak_bytes`` is the peak memory the probe used (e.g. ``torch.cuda.max_memory_allocated``
    after resetting the peak); ``available_bytes`` the memory available to the process or
    device in total. Both are optional; with both, the search predicts the limit.
    """

    fits: bool
    peak_bytes: int | None = None
    available_bytes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fits, bool):
            raise TypeError(f"Probe.fits must be a bool, got {self.fits!r}")
        for name in ("peak_bytes", "available_bytes"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Probe.{name} must be a non-negative int or None, got {value!r}")


@dataclass(frozen=True)
class ProbeRecord:
    """One call of ``fits``: the size, the outcome, and how long it took."""

    size: int
    fits: bool
    peak_bytes: int | None
    seconds: float
    oom: bool  # an out-of-memory exception was raised (and caught) during the probe


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`find_batch_size`."""

    size: int  # largest size tried that fit
    probes: tuple[ProbeRecord, ...]  # in the order tried
    seconds: float  # wall time of the whole search

    @property
    def n_probes(self) -> int:
        return len(self.probes)


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its causes and contexts (depth first), each once even in a cycle."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        # `raise X from None` says the context is irrelevant; honour it.
        if current.__context__ is not None and not current.__suppress_context__:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)


def _is_oom_type(cls: type) -> bool:
    if issubclass(cls, MemoryError):
        return True
    for klass in cls.__mro__:
        module = getattr(klass, "__module__", "") or ""
        for oom_module, oom_name in OOM_TYPE_NAMES:
            if klass.__name__ == oom_name and (
                module == oom_module or module.startswith(oom_module + ".")
            ):
                return True
    return False


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not turn an OOM check into a crash
        return ""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` means the step ran out of memory (so the batch size is too big).

    True when ``exc`` or an exception in its chain (``__cause__``, ``__context__``) is a
    ``MemoryError`` or torch's ``OutOfMemoryError`` (``torch.OutOfMemoryError`` is
    ``torch.cuda.OutOfMemoryError``; subclasses count, recognised by name without importing
    torch), or is a ``RuntimeError`` whose message matches one of
    :data:`OOM_MESSAGE_PATTERNS` (cuDNN and cuBLAS workspaces, the CPU allocator, MPS, HPU,
    NCCL and older torch versions raise plain ``RuntimeError``). Anything else, such as a
    shape mismatch, an ``AssertionError`` or a ``KeyError('out of memory')``, is not.
    """
    for current in _exception_chain(exc):
        if _is_oom_type(type(current)):
            return True
        if isinstance(current, RuntimeError) and _OOM_MESSAGE_RE.search(_message(current)):
            return True
    return False


def is_out_of_memory_line(line: str) -> bool:
    """Whether the last line of a Python traceback (``"MemoryError"``,
    ``"torch.OutOfMemoryError: CUDA out of memory..."``, ``"RuntimeError: ..."``) names an
    out-of-memory error by the rules of :func:`is_out_of_memory` (a script run as a process
    leaves only its text)."""
    kind, _, message = line.strip().partition(":")
    module, _, name = kind.rpartition(".")
    if name == "MemoryError" and module in ("", "builtins"):
        return True
    if any(name == n and (module == m or module.startswith(m + ".")) for m, n in OOM_TYPE_NAMES):
        return True
    return name == "RuntimeError" and bool(_OOM_MESSAGE_RE.search(message))


def _drop_tracebacks(exc: BaseException) -> None:
    """Cut the frames an exception chain keeps alive (they hold the probe's tensors)."""
    for current in _exception_chain(exc):
        current.__traceback__ = None


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


class _Grid:
    """The sizes the search may try: ``low`` plus multiples of ``step`` in ``(low, top]``."""

    def __init__(self, low: int, high: int, multiple_of: int) -> None:
        step = multiple_of
        if -(-low // step) * step > high:  # no multiple in [low, high]: cannot be honoured
            step = 1
        self.low = low
        self.step = step
        self.top = max(low, high // step * step)

    def floor(self, x: float) -> int:
        """Largest size ``<= x`` (at least ``low``)."""
        if x >= self.top:
            return self.top
        k = math.floor(x) // self.step * self.step
        return k if k > self.low else self.low

    def ceil(self, x: float) -> int:
        """Smallest size ``>= x`` (at most ``top``)."""
        if x <= self.low:
            return self.low
        return min(-(-math.ceil(x) // self.step) * self.step, self.top)

    def above(self, size: int) -> int | None:
        return None if size >= self.top else self.ceil(size + 1)

    def below(self, size: int) -> int | None:
        return None if size <= self.low else self.floor(size - 1)


class _Search:
    def __init__(
        self,
        fits: Callable[[int], bool | Probe],
        grid: _Grid,
        start: int,
        tolerance: float,
        use_memory: bool,
    ) -> None:
        self.fits = fits
        self.grid = grid
        self.start = start
        self.tolerance = tolerance
        self.use_memory = use_memory
        self.records: list[ProbeRecord] = []
        self.largest_fit: int | None = None
        self.smallest_fail: int | None = None
        self.reasons: dict[int, str] = {}  # why each failing size failed
        self.points: dict[int, int] = {}  # size -> peak bytes, probes that fit
        self.available: int | None = None
        self.model_misses = 0
        # After the model is dropped: (direction, step) of a gallop away from the bracket edge
        # where it missed, in steps of tolerance·step (step doubling while the outcome repeats).
        self.gallop: tuple[int, int] | None = None

    # -- probing ----------------------------------------------------------------------------

    def probe(self, size: int) -> bool:
        assert size not in self.reasons and size not in self.points, f"size {size} probed twice"
        peak = available = None
        oom = False
        began = time.perf_counter()
        try:
            outcome = self.fits(size)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            oom = True
            reason = f"fits({size}) ran out of memory: {type(exc).__name__}: "
            reason += _first_line(_message(exc))
            # The traceback's frames keep the probe's tensors alive, even while something else
            # holds on to the exception; cut them so the next probe starts with that memory.
            _drop_tracebacks(exc)
            del exc
            fit = False
        else:
            if isinstance(outcome, Probe):
                fit, peak, available = outcome.fits, outcome.peak_bytes, outcome.available_bytes
            elif isinstance(outcome, bool):
                fit = outcome
            else:
                raise TypeError(
                    f"fits({size}) returned {outcome!r} ({type(outcome).__name__}); it must "
                    "return a bool or a dvt_hpo.batch.search.Probe"
                )
            reason = f"fits({size}) returned {outcome!r}"
        if oom:
            # Outside the except block, where the exception being handled is gone: the probe's
            # objects that sit in reference cycles are only freed by a collection.
            gc.collect()
        seconds = time.perf_counter() - began
        self.records.append(ProbeRecord(size, fit, peak, seconds, oom))
        if available is not None:
            self.available = available
        if fit:
            if peak is not None:
                self.points[size] = peak
            if self.largest_fit is None or size > self.largest_fit:
                self.largest_fit = size
        else:
            self.reasons[size] = reason
            if self.smallest_fail is None or size < self.smallest_fail:
                self.smallest_fail = size
        _logger.debug(
            "batch size %d %s in %.2fs%s",
            size,
            "fits" if fit else "does not fit",
            seconds,
            f" (peak {peak} of {self.available} bytes)" if peak is not None else "",
        )
        return fit

    # -- the memory model -------------------------------------------------------------------

    def predicted_limit(self) -> tuple[float, bool] | None:
        """The size where memory runs out, and whether it comes from a fitted line.

        With one fitting size, ``size · available / peak`` is a lower bound of the limit (as
        the intercept is not negative); with two or more, a least-squares line gives it.
        """
        if not self.use_memory or self.available is None or not self.points:
            return None
        if self.model_misses >= _MAX_MODEL_MISSES:
            return None
        sizes = list(self.points)
        if len(sizes) == 1:
            size, peak = sizes[0], self.points[sizes[0]]
            return (size * self.available / peak, False) if peak > 0 else None
        mean_x = sum(sizes) / len(sizes)
        mean_y = sum(self.points.values()) / len(sizes)
        sxx = sum((x - mean_x) ** 2 for x in sizes)
        sxy = sum((x - mean_x) * (y - mean_y) for x, y in self.points.items())
        slope = sxy / sxx
        if slope <= 0:  # memory does not grow with the batch: nothing to extrapolate
            return None
        limit = (self.available - (mean_y - slope * mean_x)) / slope
        return (limit, True) if math.isfinite(limit) else None

    # -- choosing the next size -------------------------------------------------------------

    def closed(self) -> bool:
        low, high = self.largest_fit, self.smallest_fail
        assert low is not None
        if low >= self.grid.top:
            return True
        if high is None:
            return False
        step_up = self.grid.above(low)
        return step_up is None or step_up >= high or high - low <= self.tolerance * low

    def next_size(self) -> tuple[int, str] | None:
        """The next size to probe and why, or None when the search is over."""
        grid, low, high = self.grid, self.largest_fit, self.smallest_fail
        if low is None:
            if high is None:
                return self.start, "start"
            if high <= grid.low:
                return None  # low failed
            return min(grid.floor(high / 2), grid.below(high) or grid.low), "halve"
        if self.closed():
            return None
        step_up = grid.above(low)
        assert step_up is not None
        prediction = self.predicted_limit()
        if prediction is not None:
            limit, from_line = prediction
            if not from_line:
                # A lower bound: below it probes are wasted, above it doubling still applies.
                if high is None:
                    return max(grid.floor(max(2 * low, limit)), step_up), "grow (memory bound)"
            else:
                closing = max(grid.floor(low * (1 + self.tolerance)), step_up)
                aim = limit * (1 - _AIM_BELOW * self.tolerance)
                if high is not None and aim >= high:
                    # The model puts the limit above a size that failed: probe the smallest
                    # size that would close the bracket from below instead.
                    below = grid.ceil(high / (1 + self.tolerance))
                    return min(max(below, step_up), grid.below(high) or low), "model (below)"
                if aim <= closing:
                    size = closing if high is None else min(closing, grid.below(high) or low)
                    return size, "model (close)"
                size = grid.floor(aim)
                if high is not None:
                    size = min(size, grid.below(high) or low)
                return max(size, step_up), "model (jump)"
        if self.gallop is not None:
            direction, step = self.gallop
            factor = 1 + max(self.tolerance, _MIN_GALLOP) * step
            if direction > 0:
                size = max(grid.floor(low * factor), step_up)
                return (size if high is None else min(size, grid.below(high) or low)), "gallop"
            if high is not None:
                size = min(grid.ceil(high / factor), grid.below(high) or low)
                return max(size, step_up), "gallop"
        if high is None:
            return max(grid.floor(2 * low), step_up), "double"
        # Bisect; geometrically when the bracket spans more than a doubling (after a wrong
        # prediction), so an unknown scale costs log-log rather than log probes.
        middle = math.sqrt(low * high) if high > 2 * low else (low + high) / 2
        size = grid.floor(middle)
        if size <= low:
            size = step_up
        return min(size, grid.below(high) or low), "bisect"

    def run(self) -> int:
        while True:
            choice = self.next_size()
            if choice is None:
                break
            size, why = choice
            fit = self.probe(size)
            if why == "model (close)" and fit or why.startswith("model") and not fit:
                self.model_misses += 1
                if self.model_misses >= _MAX_MODEL_MISSES:
                    # The limit is near where the model missed: walk away from there in
                    # growing steps rather than restart doubling or bisecting from afar.
                    self.gallop = (1 if fit else -1, 2)
            elif why == "gallop" and self.gallop is not None:
                direction, step = self.gallop
                self.gallop = (direction, 2 * step) if fit == (direction > 0) else None
        if self.largest_fit is None:
            tried = ", ".join(str(r.size) for r in self.records)
            raise BatchSizeError(
                f"batch size low={self.grid.low} does not fit: {self.reasons[self.grid.low]} "
                f"(sizes tried: {tried})"
            )
        return self.largest_fit


def _int_arg(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def find_batch_size(
    fits: Callable[[int], bool | Probe],
    *,
    low: int = 1,
    high: int = 1024,
    start: int | None = None,
    multiple_of: int = 1,
    tolerance: float = 0.02,
    use_memory: bool = True,
) -> SearchResult:
    """The largest batch size in ``[low, high]`` for which ``fits`` succeeds.

    ``fits(size)`` runs real steps at ``size`` and returns a bool or a :class:`Probe`. An
    exception for which :func:`is_out_of_memory` is true counts as "does not fit" (its
    traceback is dropped and ``gc.collect()`` runs, so the probe's tensors are freed; emptying
    a device cache is ``fits``'s job); any other exception propagates unchanged.

    The answer is always a size that was tried and fit; no size is probed twice, none above
    ``high`` nor below ``low``. The true limit ``N`` (the largest size on the grid that fits)
    satisfies ``size <= N < size · (1 + tolerance)`` unless ``size`` is the top of the grid;
    ``tolerance=0`` finds it exactly. ``start`` (default ``low``, rounded down to the grid) is
    where growth begins; if it does not fit, the search halves towards ``low``. With ``use_memory`` and memory figures in
    the probes, the limit is predicted from them (see the module's docstring).

    Raises :class:`~dvt_hpo.exceptions.BatchSizeError` when ``low`` does not fit (its
    ``probes`` attribute holds the :class:`ProbeRecord` of every call), ``TypeError``
    when ``fits`` returns something else than a bool or a Probe, and ``ValueError``/``TypeError``
    on invalid arguments.
    """
    low = _int_arg("low", low, 1)
    high = _int_arg("high", high, 1)
    if high < low:
        raise ValueError(f"high must be at least low={low}, got high={high}")
    multiple_of = _int_arg("multiple_of", multiple_of, 1)
    if start is None:
        start = low
    start = _int_arg("start", start, 1)
    if not low <= start <= high:
        raise ValueError(f"start must lie in [low={low}, high={high}], got start={start}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
        raise TypeError(f"tolerance must be a number, got {tolerance!r}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1) (a relative gap), got {tolerance!r}")
    if not callable(fits):
        raise TypeError(f"fits must be callable, got {fits!r}")

    grid = _Grid(low, high, multiple_of)
    began = time.perf_counter()
    search = _Search(fits, grid, grid.floor(start), float(tolerance), bool(use_memory))
    try:
        size = search.run()
    except BatchSizeError as error:
        error.probes = tuple(search.records)  # type: ignore[attr-defined]
        raise
    return SearchResult(size, tuple(search.records), time.perf_counter() - began)
