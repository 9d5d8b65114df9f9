"""Tests that do to pytest's own process what real suites do: patch `os.write` to return 0
(a zero-length write), `os.read`, the clocks, `signal.signal`, `open`, `subprocess`,
`threading`, `select`, `socket`, `json`; clear the environment, chdir, close or dup2 the
standard descriptors, handle SIGUSR2 themselves, set SIGPIPE to its default, fork, end a
child with os._exit, leave a thread running. Each patch is a fixture, so it is in place
while the plugin's hooks run (the call's start and the teardown's start). They pass with
and without --hang-watch; then a real deadlock shows that hang-watch still works after
all of them (run with --hang-watch only: without it, it would hang)."""

import builtins
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest


@pytest.fixture
def zero_write(monkeypatch):
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    yield real


def test_zero_length_write(zero_write):
    # what the suite's own test checks: a writer that gets 0 back must not spin
    assert os.write(1, b"never written") == 0
    assert zero_write(1, b"") == 0


@pytest.fixture
def empty_read(monkeypatch):
    monkeypatch.setattr(os, "read", lambda fd, n: b"")


def test_read_returns_nothing(empty_read):
    r, w = os.pipe()
    try:
        assert os.read(r, 10) == b""
    finally:
        os.close(r)
        os.close(w)


@pytest.fixture
def frozen_clocks(monkeypatch):
    monkeypatch.setattr(time, "monotonic", lambda: 1000.0)
    monkeypatch.setattr(time, "time", lambda: 0.0)
    monkeypatch.setattr(time, "clock_gettime", lambda clock: 0.0)


def test_clocks_stand_still(frozen_clocks):
    assert time.monotonic() == time.monotonic() == 1000.0
    assert time.time() == 0.0


@pytest.fixture
def no_signals(monkeypatch):
    def refuse(*args):
        raise OSError("signal() refused by the test")

    monkeypatch.setattr(signal, "signal", refuse)
    monkeypatch.setattr(signal, "getsignal", refuse)
    monkeypatch.setattr(signal, "pthread_kill", refuse)
    monkeypatch.setattr(signal, "setitimer", refuse)


def test_signal_functions_refuse(no_signals):
    with pytest.raises(OSError):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)


@pytest.fixture
def no_io(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("refused by the test")

    for module, name in (
        (select, "select"),
        (select, "poll"),
        (socket, "socket"),
        (socket, "socketpair"),
        (subprocess, "Popen"),
        (os, "posix_spawn"),
        (os, "listdir"),
        (os, "fstat"),
        (json, "dumps"),
        (json, "loads"),
        (threading, "enumerate"),
        (threading, "Lock"),
        (threading, "Event"),
    ):
        monkeypatch.setattr(module, name, refuse)


def test_io_and_threading_refuse(no_io):
    with pytest.raises(OSError):
        select.select([], [], [], 0)
    with pytest.raises(OSError):
        threading.Lock()


@pytest.fixture
def mocked_open():
    with mock.patch("builtins.open", mock.mock_open(read_data="not a stat file")):
        yield


def test_open_is_a_mock(mocked_open):
    with builtins.open("/proc/self/stat") as f:
        assert f.read() == "not a stat file"


@pytest.fixture
def empty_environ(monkeypatch):
    for key in list(os.environ):
        monkeypatch.delenv(key)
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")


def test_environment_is_empty(empty_environ):
    # pytest itself sets PYTEST_CURRENT_TEST
    assert "PATH" not in os.environ and os.environ["PYTHONPATH"] == "/nonexistent"


def test_chdir_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert os.getcwd() == str(tmp_path)


@pytest.fixture
def std_moved(tmp_path):
    saved = [os.dup(0), os.dup(2)]
    sink = os.open(tmp_path / "stderr", os.O_WRONLY | os.O_CREAT)
    os.close(0)
    os.dup2(sink, 2)
    yield
    os.dup2(saved[0], 0)
    os.dup2(saved[1], 2)
    for fd in (*saved, sink):
        os.close(fd)


def test_stdin_closed_stderr_redirected(std_moved):
    with pytest.raises(OSError):
        os.fstat(0)


@pytest.fixture
def own_sigusr2():
    got = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
    yield got
    signal.signal(signal.SIGUSR2, previous)


def test_own_sigusr2_handler(own_sigusr2):
    os.kill(os.getpid(), signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while not own_sigusr2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert own_sigusr2 == [signal.SIGUSR2]


@pytest.fixture
def sigpipe_default():
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGPIPE, previous)


def test_sigpipe_at_its_default(sigpipe_default):
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL


def test_fork_and_exit_in_the_child():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_thread_outlives_the_test():
    # a daemon that waits for ever on an event nobody sets: still there when the session
    # ends, not waited for (one in a timed wait, a sleep, would keep every later test from
    # being quiescent: the rule of docs/pytest.md)
    threading.Thread(target=threading.Event().wait, daemon=True).start()


def test_after_all_that():
    assert sys.getrecursionlimit() > 0


def test_deadlock_after_all_that():
    """A lock-order deadlock (run only with --hang-watch): two threads, two locks."""
    a, b = threading.Lock(), threading.Lock()
    both = threading.Barrier(2)

    def take(first, second):
        with first:
            both.wait()
            with second:
                pass

    one = threading.Thread(target=take, args=(a, b), daemon=True)
    two = threading.Thread(target=take, args=(b, a), daemon=True)
    one.start()
    two.start()
    one.join()
