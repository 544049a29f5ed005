"""Bounded trial logs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dvt_hpo.process.logcap import CappedLog, open_pumped


def test_small_output_is_kept_whole(tmp_path):
    log = CappedLog(tmp_path / "out.log", 1000)
    log.write(b"hello\n")
    log.write(b"world\n")
    log.close()
    assert (tmp_path / "out.log").read_bytes() == b"hello\nworld\n"


def test_large_output_keeps_head_and_tail_with_a_marker(tmp_path):
    log = CappedLog(tmp_path / "out.log", 1000, flush_s=0.0)
    lines = [f"line {i:05d}\n".encode() for i in range(10_000)]
    for line in lines:
        log.write(line)
    log.close()
    text = (tmp_path / "out.log").read_bytes()
    assert text.startswith(b"line 00000\n")
    assert text.endswith(b"line 09999\n")
    assert b"dropped here" in text
    assert len(text) <= 1000 + 200
    assert log.dropped_bytes == sum(map(len, lines)) - 1000


def test_unbounded_when_max_is_none(tmp_path):
    log = CappedLog(tmp_path / "out.log", None)
    for _ in range(100):
        log.write(b"x" * 1000)
    log.close()
    assert (tmp_path / "out.log").stat().st_size == 100_000


def test_tail_visible_while_running(tmp_path):
    log = CappedLog(tmp_path / "out.log", 100, flush_s=0.0)
    log.write(b"a" * 50)
    log.write(b"b" * 500)
    # Not closed yet: the file already ends with the most recent bytes.
    assert (tmp_path / "out.log").read_bytes().endswith(b"b" * 50)
    log.close()


@pytest.mark.processes
def test_pump_caps_a_chatty_process(tmp_path):
    write_fd, pump = open_pumped(tmp_path / "stdout.log", 64 * 1024, "pump")
    code = "import sys\nfor i in range(200000): print('x' * 50, i)\nprint('THE END')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=write_fd)
    os.close(write_fd)
    assert proc.wait(60) == 0
    assert pump.join(10)
    data = (tmp_path / "stdout.log").read_bytes()
    assert len(data) < 64 * 1024 + 200
    assert data.rstrip().endswith(b"THE END")
    assert pump.log.written_bytes > 10 * 1024**2
