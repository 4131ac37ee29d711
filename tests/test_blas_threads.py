"""The thread count chosen per product size (engine.core.kernels.threads): the chooser
itself, OpenBLAS set to it around a product and put back after, a limit set by the user
kept, and the products of a small net (LeNet) kept on one thread so that OpenBLAS's idle
workers are never woken to spin.  No timing here: benchmarks/bench_train.py measures."""
import numpy as np
import pytest

from engine.core.kernels import blas, gemm, threads
from engine.core.kernels.threads import BLAS_MIN_THREAD_MACS, choose_threads

threadpoolctl = pytest.importorskip("threadpoolctl")


@pytest.mark.parametrize("macs, ceiling, per_thread, expected", [
    (0, 8, 100, 1),
    (199, 8, 100, 1),            # under two threads' worth: the calling thread alone
    (200, 8, 100, 2),
    (799, 8, 100, 7),            # as many as get >= per_thread each
    (10 ** 9, 8, 100, 8),        # never past the ceiling
    (10 ** 9, 1, 100, 1),        # OPENBLAS_NUM_THREADS=1, threadpool_limits(1)
    (10 ** 9, 0, 100, 1),
])
def test_choose_threads(macs, ceiling, per_thread, expected):
    assert choose_threads(macs, ceiling, per_thread) == expected


def test_the_compiled_gemm_splits_with_the_same_chooser(monkeypatch):
    monkeypatch.setattr(gemm, "blas_threads", lambda: 4)
    monkeypatch.setattr(gemm, "MIN_THREAD_MACS", 100)
    spans = gemm.split_run(lambda i0, i1: (i0, i1), 64, 350)
    assert len(spans) == choose_threads(350, 4, 100) == 3
    assert gemm.split_run(lambda i0, i1: (i0, i1), 64, 199) == [(0, 64)]


def _numpy_openblas():
    ctl = threads.controller("numpy")
    if ctl is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS threadpoolctl can see")
    return ctl


def test_openblas_runs_a_small_product_on_one_thread_and_is_put_back():
    _numpy_openblas()
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert threads.allowed("numpy") == 3
        with threads.blas_threads(1000) as guard:
            assert guard.chosen == 1 and threads.allowed("numpy") == 1
        assert threads.allowed("numpy") == 3
        with threads.blas_threads(2 * BLAS_MIN_THREAD_MACS) as guard:
            assert guard.chosen == 2 and threads.allowed("numpy") == 2
        with threads.blas_threads(100 * BLAS_MIN_THREAD_MACS) as guard:
            assert guard.chosen == 3 and threads.allowed("numpy") == 3
        assert threads.allowed("numpy") == 3


def test_a_limit_the_user_set_is_kept():
    _numpy_openblas()
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        with threads.blas_threads(100 * BLAS_MIN_THREAD_MACS) as guard:
            assert guard.chosen == 1 and threads.allowed("numpy") == 1


def test_matmul_gives_numpys_product():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((7, 5), np.float32), rng.standard_normal((5, 3), np.float32)
    out = np.empty((7, 3), np.float32)
    assert blas.matmul(a, b, out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b))
    np.testing.assert_array_equal(blas.matmul(a, b), np.matmul(a, b))
    a3, b3 = rng.standard_normal((2, 7, 5), np.float32), rng.standard_normal((2, 5, 3), np.float32)
    np.testing.assert_array_equal(blas.matmul(a3, b3), np.matmul(a3, b3))


@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
def test_lenets_products_stay_on_one_thread(monkeypatch, phase):
    """LeNet (TRAIN: batch 64, forward and backward; TEST: batch 100, its ip1 40 M
    multiply-adds): every OpenBLAS product is too small for a second thread, so with two
    allowed none wakes OpenBLAS's workers (which would then spin between the products)."""
    import engine
    from tests.nets import LENET
    _numpy_openblas()
    seen = []

    class Spy(threads.blas_threads):
        __slots__ = ()

        def __init__(self, macs, lib="numpy"):
            super().__init__(macs, lib)
            seen.append((lib, macs, self.chosen))

    monkeypatch.setattr(blas, "blas_threads", Spy)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        net = engine.Net(LENET, getattr(engine, phase))
        rng = np.random.default_rng(1)
        net.blobs["data"].data[...] = rng.random(net.blobs["data"].shape)
        net.blobs["label"].data[...] = rng.integers(0, 10, net.blobs["label"].shape)
        assert net.blobs["data"].shape[0] == (64 if phase == "TRAIN" else 100)
        net.forward()
        if phase == "TRAIN":
            net.backward()
        assert threads.allowed("numpy") == 2
    assert seen, "no OpenBLAS product went through the chooser"
    assert max(m for _, m, _ in seen) >= (40_000_000 if phase == "TEST" else 25_000_000)
    assert all(chosen in (1, None) for _, _, chosen in seen), seen
