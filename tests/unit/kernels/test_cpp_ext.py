"""Builds of a C++ extension take turns, and a build killed halfway blocks nobody.

Torch's ``cpp_extension.load`` marks a build in progress with a file ``lock`` and waits, forever,
for that file to go; a builder that was killed (a test's SIGKILL, a preempted job) leaves it
behind. treernn's builders hold an ``flock`` instead, which dies with its process.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from treernn.kernels import cpp_ext


def test_a_killed_builders_marker_is_removed(tmp_path) -> None:
    (tmp_path / "lock").touch()  # what a killed torch build leaves
    with cpp_ext.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_a_live_build_is_waited_for_and_its_marker_kept(tmp_path) -> None:
    holding, release = threading.Event(), threading.Event()
    entered: list[bool] = []

    def builder() -> None:
        with cpp_ext.build_lock(tmp_path):
            (tmp_path / "lock").touch()  # torch's marker of this live build
            holding.set()
            release.wait(30)
            (tmp_path / "lock").unlink()  # torch removes it when its build is done

    def second() -> None:
        with cpp_ext.build_lock(tmp_path):
            entered.append((tmp_path / "lock").exists())

    first = threading.Thread(target=builder)
    first.start()
    assert holding.wait(30)
    waiting = threading.Thread(target=second)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and (tmp_path / "lock").exists()  # the live build's marker stays
    release.set()
    first.join(30)
    waiting.join(30)
    assert entered == [False]


def test_the_lock_of_a_killed_process_is_free(tmp_path) -> None:
    code = (
        "import fcntl, os, sys; handle = open(sys.argv[1], 'a'); "
        "fcntl.flock(handle, fcntl.LOCK_EX); open(sys.argv[2], 'w').close(); os._exit(9)"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "build.lock"), str(tmp_path / "lock")],
        check=False,
        timeout=60,
    )
    assert (tmp_path / "lock").exists()
    done = threading.Event()

    def enter() -> None:
        with cpp_ext.build_lock(tmp_path):
            done.set()

    threading.Thread(target=enter, daemon=True).start()
    assert done.wait(30)  # not blocked by the dead process, nor by its marker
    assert not (tmp_path / "lock").exists()
