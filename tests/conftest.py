"""Shared pytest set-up: the repo root on sys.path, markers, ../shared location."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHARED = Path(os.environ.get("CAFFE_SHARED", ROOT.parent / "shared"))


MAX_WORKERS = 4       # more Chromiums and engine processes than this gain little and cost memory


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A run of the whole suite (``python -m pytest``, no paths given) spreads its test files
    over pytest-xdist workers, one per core (at most MAX_WORKERS): most tests keep one core
    busy and the browser tests mostly wait for the page, so a 2-core machine runs the suite
    in a good deal less time.  Nothing changes where pytest-xdist is missing, on a one-core
    machine, or when the command line says how to distribute (``-n N``; ``-n 0`` or
    ``-p no:xdist`` runs in one process), names test paths, or debugs (``--pdb``)."""
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    opt = config.option
    if opt.numprocesses is not None or opt.dist != "no" or getattr(opt, "tx", None):
        return
    if opt.file_or_dir or config.getoption("usepdb", False) or config.getoption("collectonly", False):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(cores, MAX_WORKERS)
    if workers >= 2:
        opt.numprocesses = workers
        opt.dist = "loadfile"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CuPy and a CUDA device (skipped without)")
    config.addinivalue_line("markers", "browser: drives headless Chromium (dash.testing)")
    config.addinivalue_line("markers", "shared: needs ../shared (Caffe's reference material)")
    config.addinivalue_line("markers", "slow: a heavy test (big nets); CI runs it, -m 'not slow' skips it locally")


def _gpu_ok():
    from engine.core import backend
    return backend.gpu_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = None
    skip_shared = None
    for item in items:
        if "gpu" in item.keywords:
            if skip_gpu is None:
                skip_gpu = False if _gpu_ok() else pytest.mark.skip(reason="no CuPy/CUDA device")
            if skip_gpu:
                item.add_marker(skip_gpu)
        if "shared" in item.keywords and not SHARED.is_dir():
            if skip_shared is None:
                skip_shared = pytest.mark.skip(reason="../shared (Caffe's reference nets and golden "
                                                      "records) is not beside the repo")
            item.add_marker(skip_shared)


@pytest.fixture
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip("../shared (Caffe's reference material) is not beside the repo")
    return SHARED


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def mode(request):
    """Run a test in CPU mode and, where a GPU is present, in GPU mode."""
    from engine.core import backend
    if request.param == "gpu":
        backend.set_mode_gpu()
    else:
        backend.set_mode_cpu()
    yield request.param
    backend.set_mode_cpu()


def pytest_sessionfinish(session, exitstatus):
    """The in-process servers' session folders (upload folders, job caches a test made
    without a server's exit to remove them) go with the test process: nothing left in the
    temporary folder (inspector.state.cleanup.remove_own: only this process's own)."""
    from inspector.state import cleanup
    cleanup.remove_own()
