"""dvt_hpo.batch.search: the out-of-memory table, and the search against synthetic ``fits``."""

from __future__ import annotations

import gc
import random
import re
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator

import pytest

from dvt_hpo.batch.search import (
    OOM_MESSAGE_PATTERNS,
    Probe,
    ProbeRecord,
    SearchResult,
    find_batch_size,
    is_out_of_memory,
    is_out_of_memory_line,
)
from dvt_hpo.exceptions import BatchSizeError


def fake_exception_class(
    module: str, name: str = "OutOfMemoryError", base: type = RuntimeError
) -> type:
    """A class that looks like ``module.name`` without importing ``module``."""
    return type(name, (base,), {"__module__": module})


FakeCudaOOM = fake_exception_class("torch.cuda")

# ---------------------------------------------------------------------------------------------
# is_out_of_memory
# ---------------------------------------------------------------------------------------------

# Messages as the libraries print them, each with the OOM_MESSAGE_PATTERNS row it exercises.
OOM_MESSAGES = [
    (
        "caching allocator (CUDA, HIP, XPU)",
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated)",
    ),
    (
        "caching allocator (CUDA, HIP, XPU)",
        "HIP out of memory. Tried to allocate 2.00 GiB (GPU 0; 63.98 GiB total capacity)",
    ),
    (
        "caching allocator (CUDA, HIP, XPU)",
        "XPU out of memory. Tried to allocate 1024.00 MiB (GPU 0; 15.11 GiB total capacity)",
    ),
    (
        "CUDA runtime",
        "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call",
    ),
    ("CUDA driver", "CUDA driver error: out of memory"),
    (
        "CUDA runtime (torch 1.x)",
        "cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
    ),
    (
        "NCCL",
        "NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'",
    ),
    (
        "MPS allocator",
        "MPS backend out of memory (MPS allocated: 18.04 GB, other allocations: 24.00 KB, max allowed: 18.13 GB). Tried to allocate 96.00 MB on private pool.",
    ),
    (
        "CPU allocator",
        "[enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4611686018427387904 bytes. Error code 12 (Cannot allocate memory)",
    ),
    (
        "CPU allocator",
        "[enforce fail at alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.",
    ),
    (
        "cuDNN workspace",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    ),
    (
        "cuDNN/cuBLAS/cuSOLVER/cuSPARSE",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ),
    ("cuDNN/cuBLAS/cuSOLVER/cuSPARSE", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    (
        "HPU",
        "[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::536870912 (512)MB",
    ),
    # Seen in a conv backward of a probe under trials.memory_limit (torch 2.x CPU).
    ("oneDNN (CPU)", "could not create a primitive"),
]

NEAR_MISSES = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"),
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("CUDA error: device-side assert triggered"),
    RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu"),
    RuntimeError("out of memory"),  # no device named: not a message any allocator prints
    RuntimeError(""),
    AssertionError(),
    AssertionError("CUDA out of memory"),  # only RuntimeError messages are read
    ValueError("pin_memory must be bool, got 'yes'"),
    # A lookup miss whose key happens to read like an OOM is a bug in the code, not a size.
    KeyError("out of memory"),
    KeyError("CUDA out of memory"),
    OSError(12, "Cannot allocate memory"),  # e.g. fork failing: not the step's tensors
    fake_exception_class("torchvision")("boom"),  # a module named torch-something
    fake_exception_class("mylib.torch")("boom"),
    fake_exception_class("torch", name="OutOfMemoryWarning")("boom"),
]


@pytest.mark.parametrize(
    ("row", "message"), OOM_MESSAGES, ids=[f"{r}: {m[:30]}" for r, m in OOM_MESSAGES]
)
def test_every_oom_message_counts(row: str, message: str) -> None:
    pattern = dict(OOM_MESSAGE_PATTERNS)[row]
    assert re.search(pattern, message, re.IGNORECASE), "the example must exercise its own row"
    assert is_out_of_memory(RuntimeError(message))
    # Subclasses of RuntimeError, like torch.AcceleratorError, carry these messages too.
    assert is_out_of_memory(fake_exception_class("torch", "AcceleratorError")(message))


def test_every_table_row_has_an_example() -> None:
    assert {row for row, _ in OOM_MESSAGE_PATTERNS} == {row for row, _ in OOM_MESSAGES}


@pytest.mark.parametrize(
    ("line", "oom"),
    [
        ("MemoryError", True),
        ("MemoryError: Unable to allocate 8.00 GiB", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory.", True),
        (f"RuntimeError: {OOM_MESSAGES[0][1]}", True),
        ("RuntimeError: mat1 and mat2 shapes cannot be multiplied", False),
        ("ValueError: CUDA out of memory", False),  # only RuntimeError messages are read
        ("mylib.MemoryError: no", False),
        ("", False),
    ],
)
def test_the_last_line_of_a_traceback_tells_out_of_memory(line: str, oom: bool) -> None:
    # A trainer.command script leaves only its text.
    assert is_out_of_memory_line(line) is oom


@pytest.mark.parametrize("exc", NEAR_MISSES, ids=lambda e: f"{type(e).__name__}({e})"[:60])
def test_near_misses_do_not_count(exc: BaseException) -> None:
    assert not is_out_of_memory(exc)


@pytest.mark.parametrize("module", ["torch", "torch.cuda", "torch.xpu", "torch._C"])
def test_torch_oom_types_count_by_name_whatever_the_message(module: str) -> None:
    oom = fake_exception_class(module)
    assert is_out_of_memory(oom("no recognisable message"))
    # A subclass defined anywhere still has torch's class on its MRO.
    subclass = type("TrainerOOM", (oom,), {"__module__": "mylib"})
    assert is_out_of_memory(subclass("boom"))


def test_memory_error_counts() -> None:
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(type("ArenaFull", (MemoryError,), {})("arena"))


def test_real_torch_out_of_memory_error_counts() -> None:
    torch = pytest.importorskip("torch")
    assert is_out_of_memory(torch.OutOfMemoryError("allocation refused"))
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("allocation refused"))
    # A real allocation failure on the CPU: 4 EiB cannot be allocated anywhere.
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**62, dtype=torch.uint8)
    assert is_out_of_memory(info.value)
    shapes = torch.zeros(4, 3)
    with pytest.raises(RuntimeError) as info:
        shapes @ torch.zeros(5, 6)
    assert not is_out_of_memory(info.value)


def _raised(make: Callable[[], None]) -> BaseException:
    try:
        make()
    except BaseException as exc:  # noqa: BLE001 - the test wants whatever was raised
        return exc
    raise AssertionError("nothing was raised")


def test_oom_found_along_the_cause_and_context_chain() -> None:
    def caused() -> None:
        raise ValueError("step failed") from FakeCudaOOM("boom")

    def during_handling() -> None:
        try:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except RuntimeError:
            raise KeyError("cleanup failed")  # noqa: B904 - the implicit context is the point

    def suppressed() -> None:
        try:
            raise FakeCudaOOM("boom")
        except RuntimeError:
            raise ValueError("unrelated") from None

    assert is_out_of_memory(_raised(caused))
    assert is_out_of_memory(_raised(during_handling))
    # `from None` declares the context irrelevant.
    assert not is_out_of_memory(_raised(suppressed))


def test_chain_cycles_terminate() -> None:
    first, second = ValueError("a"), KeyError("b")
    first.__context__, second.__context__ = second, first
    assert not is_out_of_memory(first)
    third = RuntimeError("x")
    first.__cause__, third.__cause__ = third, FakeCudaOOM("boom")
    third.__cause__.__context__ = first
    assert is_out_of_memory(first)


def test_broken_str_does_not_crash() -> None:
    class Unprintable(RuntimeError):
        def __str__(self) -> str:
            raise TypeError("no")

    assert not is_out_of_memory(Unprintable())


def test_no_torch_import() -> None:
    code = (
        "import sys\n"
        "from dvt_hpo.batch.search import find_batch_size, is_out_of_memory\n"
        "is_out_of_memory(RuntimeError('CUDA out of memory'))\n"
        "find_batch_size(lambda n: n <= 100)\n"
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------------------------------------
# find_batch_size
# ---------------------------------------------------------------------------------------------


class Limit:
    """A ``fits`` whose true limit is ``limit``, recording every call; optional memory figures."""

    def __init__(
        self,
        limit: int,
        *,
        raise_oom: bool = False,
        memory_noise: float | None = None,
        seed: int = 0,
        base_fraction: float = 0.125,
    ) -> None:
        self.limit = limit
        self.raise_oom = raise_oom
        self.memory_noise = memory_noise
        self.calls: list[int] = []
        self.available = 16 * 2**30
        self.base = int(self.available * base_fraction)
        # Linear memory that crosses the available memory half a sample above the limit.
        self.per_sample = (self.available - self.base) / (limit + 0.5)
        self.rng = random.Random(seed)

    def __call__(self, size: int) -> bool | Probe:
        assert isinstance(size, int)
        self.calls.append(size)
        fit = size <= self.limit
        if not fit and self.raise_oom:
            raise FakeCudaOOM(f"CUDA out of memory. Tried to allocate {size} MiB")
        if self.memory_noise is None:
            return fit
        noise = self.rng.uniform(-self.memory_noise, self.memory_noise)
        peak = int(self.base + self.per_sample * size * (1 + noise)) if fit else None
        return Probe(fit, peak, self.available)


def grid_limit(limit: int, low: int, high: int, multiple_of: int) -> int:
    """The largest size the search may answer: the true limit on the search's grid."""
    step = multiple_of if -(-low // multiple_of) * multiple_of <= high else 1
    candidates = [n for n in range(low, min(limit, high) + 1) if n == low or n % step == 0]
    return max(candidates)


def check_search(
    result: SearchResult,
    fits: Limit,
    *,
    low: int = 1,
    high: int = 1024,
    multiple_of: int = 1,
    tolerance: float = 0.02,
) -> None:
    sizes = [p.size for p in result.probes]
    assert sizes == fits.calls
    assert len(set(sizes)) == len(sizes), f"a size was probed twice: {sizes}"
    assert all(low <= n <= high for n in sizes), sizes
    step = multiple_of if -(-low // multiple_of) * multiple_of <= high else 1
    assert all(n == low or n % step == 0 for n in sizes), sizes
    fitting = [p.size for p in result.probes if p.fits]
    failing = [p.size for p in result.probes if not p.fits]
    assert result.size == max(fitting)
    assert all(p.fits == (p.size <= fits.limit) for p in result.probes)
    assert not failing or max(fitting) < min(failing)
    true_limit = grid_limit(fits.limit, low, high, multiple_of)
    assert result.size <= true_limit
    assert true_limit - result.size <= tolerance * result.size, (result.size, true_limit, sizes)
    top = grid_limit(10**12, low, high, multiple_of)
    if result.size != top:  # the size just above was seen failing, within tolerance
        next_up = min(n for n in range(result.size + 1, top + 1) if n % step == 0)
        assert failing and (min(failing) <= max(next_up, result.size * (1 + tolerance))), sizes


def test_doubling_then_bisection_without_memory_figures() -> None:
    fits = Limit(300)
    result = find_batch_size(fits, low=2, high=1024)
    assert [p.size for p in result.probes][:9] == [2, 4, 8, 16, 32, 64, 128, 256, 512]
    check_search(result, fits, low=2)
    assert result.n_probes == len(result.probes) <= 15
    assert result.seconds >= sum(p.seconds for p in result.probes) >= 0
    assert all(
        isinstance(p, ProbeRecord) and p.peak_bytes is None and not p.oom for p in result.probes
    )


@pytest.mark.parametrize("tolerance", [0.0, 0.02, 0.1])
@pytest.mark.parametrize("multiple_of", [1, 8])
def test_search_finds_every_limit(tolerance: float, multiple_of: int) -> None:
    rng = random.Random(7)
    limits = list(range(1, 70)) + [rng.randint(70, 3000) for _ in range(60)]
    for limit in limits:
        for low, start, high in ((1, None, 2048), (1, 16, 2048), (3, 3, 1000), (8, 512, 2048)):
            if limit < low:  # low does not fit: covered by the BatchSizeError tests
                continue
            fits = Limit(limit)
            result = find_batch_size(
                fits, low=low, high=high, start=start, multiple_of=multiple_of, tolerance=tolerance
            )
            check_search(
                result, fits, low=low, high=high, multiple_of=multiple_of, tolerance=tolerance
            )


@pytest.mark.parametrize("multiple_of", [1, 8, 64])
def test_limit_above_high_answers_the_top_of_the_grid(multiple_of: int) -> None:
    fits = Limit(10**9)
    result = find_batch_size(fits, low=1, high=1000, multiple_of=multiple_of)
    assert result.size == 1000 // multiple_of * multiple_of
    check_search(result, fits, high=1000, multiple_of=multiple_of)


def test_start_that_does_not_fit_halves_towards_low() -> None:
    fits = Limit(20)
    result = find_batch_size(fits, low=1, high=1024, start=128, tolerance=0.0)
    assert [p.size for p in result.probes][:4] == [128, 64, 32, 16]
    assert result.size == 20
    check_search(result, fits, tolerance=0.0)


def test_multiple_of_with_a_low_that_is_not_a_multiple() -> None:
    fits = Limit(100)
    result = find_batch_size(fits, low=5, high=1000, multiple_of=8, tolerance=0.0)
    assert result.size == 96
    assert all(p.size == 5 or p.size % 8 == 0 for p in result.probes)
    # Only low fits: low is the answer although it is no multiple.
    assert find_batch_size(Limit(7), low=5, high=1000, multiple_of=8).size == 5


def test_multiple_of_impossible_in_range_is_ignored() -> None:
    fits = Limit(6)
    result = find_batch_size(fits, low=5, high=7, multiple_of=8, tolerance=0.0)
    assert result.size == 6
    check_search(result, fits, low=5, high=7, multiple_of=8, tolerance=0.0)


def test_out_of_memory_exceptions_count_as_too_big() -> None:
    fits = Limit(300, raise_oom=True)
    result = find_batch_size(fits, low=1, high=1024)
    check_search(result, fits)
    assert all(p.oom == (not p.fits) for p in result.probes)
    assert any(p.oom for p in result.probes)


class Payload:
    """Stands for the tensors a probe allocates."""

    cycle: Payload | None = None


def _search_without_automatic_gc(
    make_fits: Callable[[list[weakref.ref[Payload]]], Callable[[int], bool]],
) -> None:
    """Search with a fits that checks, at every probe, that failed probes' payloads are gone."""
    alive: list[weakref.ref[Payload]] = []
    inner = make_fits(alive)

    def fits(size: int) -> bool:
        leaked = [ref for ref in alive if ref() is not None]
        assert not leaked, f"{len(leaked)} payloads of failed probes still alive at probe {size}"
        return inner(size)

    was_enabled = gc.isenabled()
    gc.disable()  # only the search's own collection may free cycles
    try:
        assert find_batch_size(fits, high=1024, tolerance=0.0).size == 40
    finally:
        if was_enabled:
            gc.enable()
    assert alive


def test_oom_frames_are_released_before_the_next_probe() -> None:
    def make_fits(alive: list[weakref.ref[Payload]]) -> Callable[[int], bool]:
        def fits(size: int) -> bool:
            payload = Payload()
            if size > 40:
                alive.append(weakref.ref(payload))
                error = FakeCudaOOM("CUDA out of memory")
                raise error  # `error` in this frame, the frame in its traceback: a cycle
            return True

        return fits

    _search_without_automatic_gc(make_fits)


def test_oom_frames_are_released_while_the_exception_is_kept() -> None:
    kept: list[BaseException] = []  # e.g. a logging handler holding the last error

    def make_fits(alive: list[weakref.ref[Payload]]) -> Callable[[int], bool]:
        def fits(size: int) -> bool:
            payload = Payload()
            if size > 40:
                alive.append(weakref.ref(payload))
                try:
                    raise FakeCudaOOM("CUDA out of memory")
                except RuntimeError as error:
                    kept.append(error)
                    raise
            return True

        return fits

    _search_without_automatic_gc(make_fits)
    assert kept and all(error.__traceback__ is None for error in kept)


def test_oom_payload_cycles_are_collected() -> None:
    def make_fits(alive: list[weakref.ref[Payload]]) -> Callable[[int], bool]:
        def fits(size: int) -> bool:
            payload = Payload()
            if size > 40:
                payload.cycle = payload  # module graphs and hooks form such cycles
                alive.append(weakref.ref(payload))
                raise FakeCudaOOM("CUDA out of memory")
            return True

        return fits

    _search_without_automatic_gc(make_fits)


def test_other_exceptions_propagate_unchanged() -> None:
    for error in (
        ValueError("bad config"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"),
        AssertionError("invariant"),
        KeyError("out of memory"),
    ):

        def fits(size: int, error: Exception = error) -> bool:
            if size >= 16:
                raise error
            return True

        with pytest.raises(type(error)) as info:
            find_batch_size(fits, high=1024)
        assert info.value is error


def test_keyboard_interrupt_propagates() -> None:
    def fits(size: int) -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        find_batch_size(fits)


def test_low_that_does_not_fit_raises_batch_size_error() -> None:
    with pytest.raises(
        BatchSizeError,
        match=r"^batch size low=8 does not fit: fits\(8\) returned False \(sizes tried: 8\)$",
    ):
        find_batch_size(lambda size: False, low=8, high=64)
    fits = Limit(3, raise_oom=True)
    with pytest.raises(BatchSizeError) as info:
        find_batch_size(fits, low=8, high=1024, start=64)
    message = str(info.value)
    assert message.startswith("batch size low=8 does not fit: fits(8) ran out of memory: ")
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 8 MiB" in message
    assert message.endswith("(sizes tried: 64, 32, 16, 8)")
    assert [p.size for p in info.value.probes] == [64, 32, 16, 8]


def test_bad_return_value_is_a_type_error() -> None:
    with pytest.raises(
        TypeError,
        match=r"fits\(1\) returned None \(NoneType\); it must return a bool or a dvt_hpo.batch.search.Probe",
    ):
        find_batch_size(lambda size: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"low": 0}, ValueError, "low must be at least 1, got 0"),
        ({"low": 10, "high": 5}, ValueError, "high must be at least low=10, got high=5"),
        ({"start": 2000}, ValueError, r"start must lie in \[low=1, high=1024\], got start=2000"),
        (
            {"low": 8, "start": 4},
            ValueError,
            r"start must lie in \[low=8, high=1024\], got start=4",
        ),
        ({"multiple_of": 0}, ValueError, "multiple_of must be at least 1, got 0"),
        ({"tolerance": 1.0}, ValueError, r"tolerance must be in \[0, 1\)"),
        ({"tolerance": -0.1}, ValueError, r"tolerance must be in \[0, 1\)"),
        ({"high": 10.5}, TypeError, "high must be an int, got 10.5"),
        ({"low": True}, TypeError, "low must be an int, got True"),
    ],
)
def test_invalid_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        find_batch_size(lambda size: True, **kwargs)


def test_probe_validates_its_figures() -> None:
    with pytest.raises(TypeError, match="Probe.fits must be a bool"):
        Probe(1)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="Probe.peak_bytes must be a non-negative int or None, got -1"
    ):
        Probe(True, peak_bytes=-1)
    with pytest.raises(ValueError, match="Probe.available_bytes"):
        Probe(True, available_bytes=1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# find_batch_size with memory figures
# ---------------------------------------------------------------------------------------------


def _limits(seed: int, count: int) -> Iterator[int]:
    rng = random.Random(seed)
    for _ in range(count):
        yield rng.randint(10, 5000)


def test_memory_figures_cut_the_probes() -> None:
    plain, with_memory = [], []
    for i, limit in enumerate(_limits(3, 150)):
        for start in (2, 16):
            fits = Limit(limit)
            result = find_batch_size(fits, low=1, high=8192, start=start)
            check_search(result, fits, high=8192)
            plain.append(result.n_probes)
            fits = Limit(limit, memory_noise=0.01, seed=i)
            result = find_batch_size(fits, low=1, high=8192, start=start)
            check_search(result, fits, high=8192)
            assert all(p.peak_bytes is not None for p in result.probes if p.fits)
            with_memory.append(result.n_probes)
    assert sum(with_memory) / len(with_memory) <= 0.45 * sum(plain) / len(plain)
    assert max(with_memory) <= 8


def test_goal_for_300_from_2() -> None:
    fits = Limit(300)
    assert find_batch_size(fits, low=2, high=1024, start=2).n_probes <= 15
    for seed in range(50):
        fits = Limit(300, memory_noise=0.01, seed=seed)
        result = find_batch_size(fits, low=2, high=1024, start=2)
        check_search(result, fits, low=2)
        assert result.n_probes <= 6, [p.size for p in result.probes]


def test_use_memory_false_ignores_figures() -> None:
    plain = find_batch_size(Limit(777), high=4096)
    ignored = find_batch_size(Limit(777, memory_noise=0.01), high=4096, use_memory=False)
    assert [p.size for p in ignored.probes] == [p.size for p in plain.probes]


@pytest.mark.parametrize("multiple_of", [1, 8])
def test_wrong_memory_figures_cost_probes_never_the_answer(multiple_of: int) -> None:
    """Peaks that lie (random, flat, shrinking, wildly off) must not change correctness."""
    rng = random.Random(11)
    liars: list[Callable[[int], int]] = [
        lambda size: rng.randint(1, 2**34),
        lambda size: 2**30,
        lambda size: max(1, 2**34 - size * 2**20),
        lambda size: size * 2**10,  # predicts a limit far above the real one
        lambda size: 2**33 + size * 2**28,  # predicts a limit far below it
        lambda size: int(2**30 + 2**22 * size**1.5),  # superlinear memory
    ]
    for liar in liars:
        for limit in list(_limits(5, 25)) + [1, 2, 9]:
            truth = Limit(limit)

            def fits(size: int, truth: Limit = truth, liar: Callable[[int], int] = liar) -> Probe:
                fit = truth(size)
                return Probe(bool(fit), liar(size), 2**34)

            result = find_batch_size(fits, low=1, high=8192, multiple_of=multiple_of)
            check_search(result, truth, high=8192, multiple_of=multiple_of)
            assert result.n_probes <= 30, [p.size for p in result.probes]


def test_memory_figures_with_oom_exceptions() -> None:
    for seed, limit in enumerate(_limits(9, 15)):
        fits = Limit(limit, memory_noise=0.02, seed=seed)
        real_call = fits.__call__

        def raising(size: int, fits: Limit = fits, real_call=real_call) -> bool | Probe:
            outcome = real_call(size)
            if isinstance(outcome, Probe) and not outcome.fits:
                raise FakeCudaOOM("CUDA out of memory")
            return outcome

        result = find_batch_size(raising, low=1, high=8192, start=16)
        check_search(result, fits, high=8192)
        assert result.n_probes <= 8
