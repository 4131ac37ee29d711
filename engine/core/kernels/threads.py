"""How many threads a product gets, chosen from its size; and OpenBLAS told so around it.

    choose_threads(macs, ceiling, per_thread)    # pure: 1, or as many as give each >= per_thread
    with blas_threads(macs):                     # NumPy's OpenBLAS runs this product on
        np.matmul(a, b, out=c)                   #   choose_threads(macs, its setting) threads
    with blas_threads(macs, "scipy"):            # SciPy's OpenBLAS (a second library)
        sgemm(...)

Why: OpenBLAS splits any product above about 0.26 M multiply-adds over all its threads, and
after each split product its worker threads spin (busy-wait, about 2**28 cycles: a tenth of
a second) before they sleep.  On a net whose products are small (LeNet, CIFAR-10 quick) a
product comes every few milliseconds, so the workers never sleep: with the default thread
count the engine took the same wall time as with one thread and twice the CPU (LeNet's
test pass, 100 batches of 100: 5.5 s of CPU against 2.45 s with one thread; its ip1 is 40 M
multiply-adds).  A product below ``2 x BLAS_MIN_THREAD_MACS`` multiply-adds (537 M: about
10 ms of one core's work, against a tenth of a second of spinning after it) now runs on the
calling thread alone, so the workers are never woken for it; bigger ones (CaffeNet's grouped
conv2 at batch 10 through im2col: 1.1 G) get the threads their size pays for, never more than
OpenBLAS is allowed (OPENBLAS_NUM_THREADS, ``threadpoolctl.threadpool_limits``: read at each
product, so a limit set later is kept).  The count is set only where it changes, and put back
after the product.

Numbers: OpenBLAS's single-threaded path rounds some products otherwise than its threaded
one (its small-matrix kernels), so which products get threads changes results in the last
bits, as OPENBLAS_NUM_THREADS always did.  The conformance cases match Caffe as before
(136/137, the known googlenet_deploy host difference) at this threshold; at 2 x 134 M,
CaffeNet's deploy case (max-pooling choices on near-equal values) drifted past its tolerance.

The engine's compiled GEMM and implicit-GEMM convolution (gemm.py, conv2d.py) split their
work over Python threads with the same chooser (``gemm.MIN_THREAD_MACS`` each); those
threads block when idle, they do not spin.
"""
import ctypes
import sys
import threading

#: OpenBLAS products: the fewest multiply-adds worth a thread of their own (the spinning after
#: a split product costs more than a smaller one saves).
BLAS_MIN_THREAD_MACS = 1 << 28


def choose_threads(macs, ceiling, per_thread):
    """Threads for a product of ``macs`` multiply-adds that may use ``ceiling``: one below
    ``2 * per_thread``, else as many as give each at least ``per_thread``, at most ``ceiling``."""
    if ceiling <= 1 or macs < 2 * per_thread:
        return 1
    return int(min(ceiling, macs // per_thread))


_LIBS = {}            # "numpy" / "scipy" -> that OpenBLAS's _Lib (None: none found)
_LIBS_LOCK = threading.Lock()


class _Lib:
    """An OpenBLAS's thread-count functions, called holding the GIL (``ctypes.PyDLL``): a
    plain ctypes call lets go of the GIL, and taking it back waits behind whatever thread
    runs Python then (a data layer's prefetch: 0.3 ms a call, measured), for a call that
    itself only reads or writes a number."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.get_num_threads, self.set_num_threads = ctl.get_num_threads, ctl.set_num_threads
        try:
            lib = ctypes.PyDLL(ctl.filepath)
            name = "%%sopenblas_%%s_num_threads%s" % getattr(ctl, "_symbol_suffix", "")
            prefix = getattr(ctl, "_symbol_prefix", "")
            get, put = getattr(lib, name % (prefix, "get")), getattr(lib, name % (prefix, "set"))
            get.argtypes, get.restype = [], ctypes.c_int
            put.argtypes, put.restype = [ctypes.c_int], None
            get()
        except Exception:  # pragma: no cover - another layout of the library: threadpoolctl's calls
            return
        self.get_num_threads, self.set_num_threads = get, put


def _find(lib):
    """The OpenBLAS that ``lib`` ("numpy" or "scipy") loaded, as a :class:`_Lib`, or None
    (another BLAS, threadpoolctl missing, or SciPy's BLAS not loaded yet)."""
    try:
        from threadpoolctl import ThreadpoolController
        ctls = ThreadpoolController().select(internal_api="openblas").lib_controllers
    except Exception:
        return None
    for c in ctls:
        path = (c.filepath or "").replace("\\", "/")
        if ("/%s.libs/" % lib) in path or ("/%s/" % lib) in path:
            return _Lib(c)
    return None


def controller(lib="numpy"):
    """The OpenBLAS of ``lib`` (:class:`_Lib`: ``get_num_threads``, ``set_num_threads``),
    looked up once (SciPy's again while it is not loaded: its BLAS module is imported lazily)."""
    c = _LIBS.get(lib, False)
    if c is False or (c is None and lib == "scipy" and "scipy.linalg._fblas" in sys.modules
                      and not _LIBS.get("_scipy_looked", False)):
        with _LIBS_LOCK:
            c = _LIBS[lib] = _find(lib)
            if lib == "scipy" and "scipy.linalg._fblas" in sys.modules:
                _LIBS["_scipy_looked"] = True
    return c


def allowed(lib="numpy"):
    """Threads ``lib``'s OpenBLAS may use now (1 when it cannot be read)."""
    c = controller(lib)
    if c is None:
        return 1
    try:
        return max(1, int(c.get_num_threads() or 1))
    except Exception:  # pragma: no cover - a library that stopped answering
        return 1


class blas_threads:
    """``with blas_threads(macs, lib):`` the product inside runs on
    ``choose_threads(macs, allowed(lib), BLAS_MIN_THREAD_MACS)`` of ``lib``'s OpenBLAS
    threads; the setting is put back after it."""

    __slots__ = ("ctl", "saved", "chosen")

    def __init__(self, macs, lib="numpy"):
        self.saved = None
        self.chosen = None
        ctl = self.ctl = controller(lib)
        if ctl is None:
            return
        n = ctl.get_num_threads() or 1
        want = choose_threads(macs, n, BLAS_MIN_THREAD_MACS)
        self.chosen = want
        if want != n:
            ctl.set_num_threads(want)
            self.saved = n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.ctl.set_num_threads(self.saved)
        return False
