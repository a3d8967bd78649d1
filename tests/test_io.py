"""Atomic writes and line decoding."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from transduce.errors import DataError
from transduce.io import atomic_write_text
from transduce.lines import decode_lines


def test_atomic_write_replaces_a_regular_file(tmp_path: Path):
    path = tmp_path / "report.json"
    path.write_text("old", encoding="utf-8")
    atomic_write_text(path, "new\n")
    assert path.read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_atomic_write_into_a_pipe_keeps_the_pipe(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")))
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == ["through the pipe\n"]
    assert fifo.is_fifo()


def test_invalid_bytes_after_a_byte_order_mark_are_located():
    data = b"\xef\xbb\xbfabc\tx\nab\xffc\ty\n"
    with pytest.raises(DataError, match=r"f:2: invalid utf-8 \(byte b'\\xff'\)"):
        decode_lines(data, "f")
    lines, bad = decode_lines(data, "f", keep_bad=True)
    assert lines == ["abc\tx", None] and bad[0].line == 2


def test_a_ctrl_c_during_an_atomic_write_is_handled_once_the_file_is_in_place(tmp_path: Path):
    import os
    import signal

    from transduce.io import atomic_binary

    target = tmp_path / "out.bin"
    reached = []
    with pytest.raises(KeyboardInterrupt), atomic_binary(target) as handle:
        handle.write(b"first half ")
        os.kill(os.getpid(), signal.SIGINT)  # Python's handler: KeyboardInterrupt
        for _ in range(1000):  # the handler would run here, between bytecodes
            pass
        handle.write(b"second half")
        reached.append(True)
    assert reached and target.read_bytes() == b"first half second half"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temporary left
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
