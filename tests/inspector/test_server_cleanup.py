"""Nothing left behind (issue 34): a real server (``python app.py`` in a child process, its
temporary folder a test's own) removes its uploads and its job cache on SIGTERM and SIGINT;
after a ``kill -9`` the next server removes what the killed one left, and never a folder of a
live process (inspector/state/cleanup.py)."""
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from benchmarks import load_test as lt
from inspector.state import cleanup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUARD = 240          # seconds: hang guards on a busy machine, never targets


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path):
    port = _free_port()
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--no-prebuild", "--model-root", ROOT],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % port
    end = time.monotonic() + GUARD
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError("the server ended: %s" % proc.stderr.read().decode()[-2000:])
        try:
            if lt.http().get(url + "/_dash-layout", timeout=5).status_code == 200:
                return proc, url
        except Exception:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("the server did not answer")


def ours(folder, pid):
    return sorted(n for n in os.listdir(folder) if n.startswith(("inspector-%d-" % pid,
                                                                 "caffe-inspector-jobs-%d-" % pid)))


def open_tab_and_upload(url, expect):
    import concurrent.futures as cf
    pool = cf.ThreadPoolExecutor(4)
    try:
        tab = lt.Tab(url, lt.Dependencies.fetch(url), lt.Stats(), pool, expect, random.Random(0), "cleanup")
        tab.open()
        with tab.lock:
            tab.props["upload-model.filename"] = "three.prototxt"
        tab.trigger("upload-model.contents", lt.data_url(
            'name: "Three"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 } } }\n'))
        assert "Three" in lt._text(tab.props.get("load-status.children"))
    finally:
        pool.shutdown()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_uploads_and_the_job_cache_go_on_sigterm_and_sigint(tmp_path, expect, sig):
    proc, url = start_server(tmp_path)
    try:
        open_tab_and_upload(url, expect)
        left = ours(tmp_path, proc.pid)
        assert any(n.startswith("inspector-") for n in left) and any(n.startswith("caffe-inspector-jobs-")
                                                                     for n in left)
        assert any(os.listdir(tmp_path / n / "model") for n in left if n.startswith("inspector-"))
        proc.send_signal(sig)
        proc.wait(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ours(tmp_path, proc.pid) == []


def test_what_a_killed_server_left_goes_at_the_next_start_and_nothing_else(tmp_path, expect):
    proc, url = start_server(tmp_path)
    try:
        open_tab_and_upload(url, expect)
    finally:
        proc.kill()                                   # kill -9: it removes nothing
        proc.wait()
    left = ours(tmp_path, proc.pid)
    assert len(left) == 2
    alive = tmp_path / ("inspector-%d-live" % os.getpid())        # a live process's folder (this test's)
    alive.mkdir()
    (alive / cleanup.OWNER_FILE).write_text("%d %r\n" % (os.getpid(), cleanup._start_time(os.getpid())))
    unmarked = tmp_path / ("inspector-%d-unmarked" % proc.pid)      # no .owner: not known to be ours
    unmarked.mkdir()
    other = tmp_path / "inspector-of-another-program"
    other.mkdir()
    again, url = start_server(tmp_path)               # its start sweeps
    try:
        assert ours(tmp_path, proc.pid) == ["inspector-%d-unmarked" % proc.pid]
        assert alive.is_dir() and other.is_dir()
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=GUARD)
    assert ours(tmp_path, again.pid) == []


def test_a_pid_reused_by_another_process_is_not_the_owner(tmp_path):
    folder = tmp_path / ("inspector-%d-x" % os.getpid())
    folder.mkdir()
    (folder / cleanup.OWNER_FILE).write_text("%d %r\n" % (os.getpid(), cleanup._start_time(os.getpid()) - 100))
    other = tmp_path / "inspector-1-y"                # pid 1 lives (init): never removed while it does
    other.mkdir()
    (other / cleanup.OWNER_FILE).write_text("1 %r\n" % cleanup._start_time(1))
    assert cleanup.sweep(str(tmp_path)) == [str(folder)]      # the same pid, started later: its owner is gone
    assert not folder.exists() and other.is_dir()


STUCK = r'''
import sys, threading, time
sys.path.insert(0, %r)
from inspector import cli
from inspector.state import cleanup
cli.stop_on_signals(grace=1)
folder = cleanup.owned_tempdir("inspector-", "stuck")
threading.Thread(target=threading.Event().wait, name="stuck").start()   # Python's exit waits for it forever
print(folder, flush=True)
while True:
    time.sleep(0.1)
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_server_with_something_stuck_still_ends_after_the_grace_and_removes_its_folders(tmp_path, sig):
    """Whatever hangs at the end (here a thread Python's exit joins forever), a stop signal ends
    the process once inspector.cli's grace has passed, and its own folders go with it."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", STUCK % ROOT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        folder = proc.stdout.readline().strip()
        assert os.path.isdir(folder) and os.path.basename(folder).startswith("inspector-%d-" % proc.pid)
        proc.send_signal(sig)
        code = proc.wait(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + sig
    assert "had not ended 1 s after the signal" in proc.stderr.read()
    assert not os.path.exists(folder) and ours(tmp_path, proc.pid) == []
