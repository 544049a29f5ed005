"""Bounded trial logs: keep the beginning and the end of what a trial prints.

A trainer printing tens of megabytes per epoch must not fill the disk. Each trial's stdout and
stderr reach the orchestrator through a pipe; a :class:`LogPump` thread copies them into a
:class:`CappedLog`, which writes the first half of the budget straight to the file, keeps the
most recent half in memory, and rewrites the part after the head (a marker saying how much was
dropped, then the tail) at most every ``flush_s`` seconds, so ``tail -f`` still shows recent
output while the file never grows past the budget (plus one marker line).

Stdlib only (the orchestrator imports it).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections import deque
from pathlib import Path


class CappedLog:
    """A file that holds at most ``max_bytes`` of what was written to it (plus a marker)."""

    def __init__(
        self, path: str | os.PathLike[str], max_bytes: int | None, *, flush_s: float = 1.0
    ):
        if max_bytes is not None and max_bytes < 2:
            raise ValueError(f"max_bytes must be >= 2 or None, got {max_bytes}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not O_APPEND: the tail is rewritten in place after the head.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._file = os.fdopen(fd, "wb")
        self._file.seek(0, os.SEEK_END)
        self._head_end = self._file.tell()
        self._head_left = None if max_bytes is None else max_bytes // 2
        self._tail_max = 0 if max_bytes is None else max_bytes - max_bytes // 2
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.dropped_bytes = 0
        self.dropped_lines = 0
        self.written_bytes = 0
        self._flush_s = flush_s
        self._last_flush = time.monotonic()
        self._dirty = False
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            self.written_bytes += len(data)
            if self._head_left is None:
                self._file.write(data)
                self._file.flush()
                return
            if self._head_left > 0:
                head, data = data[: self._head_left], data[self._head_left :]
                self._file.write(head)
                self._file.flush()
                self._head_left -= len(head)
                self._head_end = self._file.tell()
                if not data:
                    return
            self._tail.append(data)
            self._tail_bytes += len(data)
            while self._tail_bytes > self._tail_max:
                oldest = self._tail[0]
                excess = self._tail_bytes - self._tail_max
                if len(oldest) <= excess:
                    self._tail.popleft()
                    cut = oldest
                else:
                    cut = oldest[:excess]
                    self._tail[0] = oldest[excess:]
                self._tail_bytes -= len(cut)
                self.dropped_bytes += len(cut)
                self.dropped_lines += cut.count(b"\n")
            self._dirty = True
            if time.monotonic() - self._last_flush >= self._flush_s:
                self._rewrite_tail()

    def _rewrite_tail(self) -> None:
        self._file.seek(self._head_end)
        if self.dropped_bytes:
            marker = (
                f"\n[dvt-hpo: {self.dropped_bytes} bytes ({self.dropped_lines} lines) dropped "
                "here: the log keeps its beginning and its end]\n"
            ).encode()
            self._file.write(marker)
        self._file.write(b"".join(self._tail))
        self._file.truncate()
        self._file.flush()
        self._last_flush = time.monotonic()
        self._dirty = False

    def close(self) -> None:
        with self._lock:
            if self._file.closed:
                return
            if self._dirty:
                self._rewrite_tail()
            self._file.close()


class LogPump:
    """Copies a pipe's read end into a :class:`CappedLog` on a thread, until end of file, or
    until :meth:`finish`: then what is buffered is copied and the pump stops (a process that
    outlived the trial and still holds the pipe must not keep it waiting)."""

    def __init__(self, fd: int, log: CappedLog, name: str) -> None:
        self.fd = fd
        self.log = log
        self._wake_r, wake_w = os.pipe()
        self._wake_w: int | None = wake_w
        self._wake_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    self._drain()
                    return
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return
                self.log.write(chunk)
        except OSError:
            pass
        finally:
            self._close_wake()
            for fd in (self.fd, self._wake_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.log.close()

    def _drain(self) -> None:
        """Copy what the pipe holds now, without waiting for more (bounded: a writer still
        printing cannot keep it going)."""
        os.set_blocking(self.fd, False)
        for _ in range(256):
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.log.write(chunk)

    def finish(self) -> None:
        """The writers that matter are gone: copy what is buffered and stop."""
        with self._wake_lock:
            if self._wake_w is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
        self._close_wake()

    def _close_wake(self) -> None:
        with self._wake_lock:
            fd, self._wake_w = self._wake_w, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until every writer closed the pipe (the trial and what it forked)."""
        self.thread.join(timeout_s)
        return not self.thread.is_alive()


def open_pumped(
    path: str | os.PathLike[str], max_bytes: int | None, name: str
) -> tuple[int, LogPump]:
    """A pipe whose write end (returned, for the child) is copied into a capped log."""
    read_fd, write_fd = os.pipe()
    return write_fd, LogPump(read_fd, CappedLog(path, max_bytes), name)


__all__ = ["CappedLog", "LogPump", "open_pumped"]
