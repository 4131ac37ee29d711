"""A net from the page is first built where its time and memory are bounded and can be abandoned.

A prototxt, caffemodel or solver from the page (an upload, a path, an address) could tie up
whatever reads it: the engine's limits (engine.core.limits: text, layers, tops, axes; each
layer's memory against ``--max-net-mb``) refuse the known shapes of that, and this module
bounds the rest.  Before the server builds such a net for a tab, :class:`LoadGuard` builds
it once in a child process (``loading.build_net``, the engine's part of what the server runs
next: parse, upgrades, file checks, Init, solver, weights, mean file) under resource limits:

- ``RLIMIT_CPU``: ``--load-seconds`` of CPU time (then the kernel stops it), and a wall-clock
  limit of twice that, after which the parent kills it;
- ``RLIMIT_AS``: its address space at start plus the net's budget (``--max-net-mb``) and
  ``HEADROOM`` for the parse: an allocation past it fails in the child, never in the server.

The children come from a fork server started with the server (multiprocessing's
``forkserver``) that has imported the engine and every layer type already
(``inspector.state._worker``), and one is always forked ahead, waiting for its request, so a
check does not wait for a process to start.  A check that fails on a
limit refuses the net with :class:`LoadBounded` (the limit, the flag that raises it); a
check that fails with the engine's own error hands that error back (the page shows it as
the server would have); a check that succeeds hands back the NetParameter it read, so the
server does not parse the text a second time.  Every other tab goes on meanwhile: the
check holds no lock but its own tab's.

A spec that was checked (the same files, unchanged, and the same NetState and options) is
not checked again.  The bundled examples and the command line's net are trusted (never
checked).  ``--load-seconds 0`` turns the check off.
"""
import logging
import multiprocessing
import os
import pickle
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, replace

from .sessions import ModelSpec

log = logging.getLogger("inspector")

HEADROOM = 1 << 30          # bytes a check may take besides the net's budget (the parse, the engine's objects)
PRELOAD = ["inspector.state._worker"]


class LoadBounded(RuntimeError):
    """A net the load check stopped on one of its bounds: ``limit`` ("time", "memory",
    "crash"), ``flag`` (what raises it), ``seconds`` (how long the check ran)."""

    layer = None
    blob = None

    def __init__(self, message, limit, flag=None, seconds=0.0):
        super().__init__(message)
        self.limit, self.flag, self.seconds = limit, flag, seconds


class LoadGuard:
    """Checks specs in bounded child processes (see the module's doc).

    ``cpu_seconds``: the CPU limit of one check (0: no check at all); ``memory_bytes``: what a
    check may allocate besides what it started with (None: no limit); ``workers``: checks
    at once (more wait for one to end, within the same wall-clock limit)."""

    def __init__(self, cpu_seconds=30, memory_bytes=None, workers=2, keep=64, headroom=HEADROOM):
        self.cpu_seconds = float(cpu_seconds or 0)
        self.memory_bytes = memory_bytes
        self.headroom = headroom
        self._slots = threading.BoundedSemaphore(max(1, int(workers)))
        self._ctx = None
        self._checked = OrderedDict()       # key -> True: specs that passed
        self._lock = threading.Lock()
        self._keep = keep
        self.children = set()               # the check processes running now (tests, shutdown)
        self._spare = None                  # (process, pipe): a check process started ahead, waiting
        self._closed = False
        self.stats = {"checks": 0, "passed": 0, "failed": 0, "bounded": 0, "cached": 0}

    @property
    def enabled(self):
        return self.cpu_seconds > 0 and _forkserver_available()

    def start(self):
        """Start the fork server now (in the background), so the first check does not wait for it."""
        if not self.enabled:
            return
        threading.Thread(target=self._context, name="inspector-guard-start", daemon=True).start()

    def _context(self):
        with self._lock:
            if self._ctx is None:
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
                from multiprocessing import forkserver
                forkserver.ensure_running()
                self._ctx = ctx
            return self._ctx

    @property
    def wall_seconds(self):
        return 2 * self.cpu_seconds + 5

    # ------------------------------------------------------------------ checks
    def check(self, spec, settings, parse_only=False):
        """Build ``spec`` once in a bounded child (``parse_only``: only read its prototxt).
        ``settings``: loading.build's keyword arguments (allow_python, model_root, max_bytes,
        limits).  Returns the NetParameter the child read (upgraded; the server's read_source
        gives it from now on; None when not kept: a solver's net, or a cached check); raises
        the engine's error the child met, or LoadBounded."""
        if not self.enabled or spec.trusted:
            return None
        from . import loading
        key = (loading.spec_stamp(spec), _spec_key(spec), repr(sorted(settings.items())), parse_only)
        with self._lock:
            if key in self._checked or (parse_only and key[:3] + (False,) in self._checked):
                self._checked.move_to_end(key) if key in self._checked else None
                self.stats["cached"] += 1
                return None
        started = time.monotonic()
        if not self._slots.acquire(timeout=self.wall_seconds):
            raise LoadBounded("the server is checking other nets and none of them ended within %.0f s: try again "
                              "(--load-seconds %g)" % (self.wall_seconds, self.cpu_seconds), "time",
                              "--load-seconds")
        try:
            result = self._run(spec, settings, started, parse_only)
        finally:
            self._slots.release()
        self.stats["checks"] += 1
        out = None
        if result.get("param") is not None:
            from engine.proto import caffe_pb2
            out = caffe_pb2.NetParameter()
            out.ParseFromString(result["param"])
            if result.get("version") == loading.file_version(spec.model):
                loading.remember_source(spec.model, out)
        if result.get("error") is not None:
            self.stats["failed"] += 1
            raise _rebuilt(result["error"])
        self.stats["passed"] += 1
        with self._lock:
            self._checked[key] = True
            while len(self._checked) > self._keep:
                self._checked.popitem(last=False)
        return out

    def _new_child(self):
        """A check process, started and waiting for its request: (process, its end of the pipe)."""
        ctx = self._context()
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_child_waits, args=(child,), name="inspector-load-check", daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _take_child(self):
        """The check process started ahead (the next one is forked once this check is done), or a new
        one: a check does not wait for a fork."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None or not spare[0].is_alive():
            if spare is not None:
                spare[1].close()
            spare = self._new_child()
        return spare

    def _refill(self):
        try:
            made = self._new_child()
        except Exception:  # noqa: BLE001 - the next check starts its own
            return
        with self._lock:
            if self._spare is None and not self._closed:
                self._spare, made = made, None
        if made is not None:
            made[0].kill()
            made[0].join(5)
            made[1].close()

    def _run(self, spec, settings, started, parse_only=False):
        request = {"spec": asdict(spec), "settings": settings, "cpu_seconds": self.cpu_seconds,
                   "memory_bytes": self.memory_bytes, "headroom": self.headroom, "parse_only": parse_only}
        proc, parent = self._take_child()
        self.children.add(proc)
        try:
            parent.send(request)
            deadline = started + self.wall_seconds
            result = None
            while result is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if parent.poll(min(left, 0.5)):
                    try:
                        result = parent.recv()
                    except (EOFError, OSError):
                        break
                elif not proc.is_alive() and not parent.poll(0):
                    break
            if result is None:
                return self._bounded(proc, started)
            return result
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
            self.children.discard(proc)
            parent.close()
            # the next check's process, forked now that this one is done (not beside it)
            threading.Thread(target=self._refill, name="inspector-guard-spare", daemon=True).start()

    def _bounded(self, proc, started):
        """The check ended without an answer: out of time (killed here, or by RLIMIT_CPU), or dead."""
        seconds = time.monotonic() - started
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        code = proc.exitcode
        self.stats["bounded"] += 1
        import signal
        if code is None or code < 0 and -code in (signal.SIGKILL, signal.SIGXCPU):
            raise LoadBounded("building this net took more than the %g s of CPU a net from the page may take "
                              "(--load-seconds %g): refused, and its build stopped; the server and the other "
                              "tabs go on" % (self.cpu_seconds, self.cpu_seconds), "time", "--load-seconds",
                              seconds)
        raise LoadBounded("the check that builds this net first, apart from the server, died (exit code %s) "
                          "before it finished: refused; the server and the other tabs go on" % code, "crash",
                          None, seconds)

    def shutdown(self):
        """Stop the checks running now and the one waiting (the server is going away)."""
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
        if spare is not None:
            self.children.add(spare[0])
            spare[1].close()
        for proc in list(self.children):
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        self.children.clear()


def build_checked(guard, spec, settings, device="CPU"):
    """``loading.build(spec)`` for the server, a net from the page checked by ``guard`` first (None:
    not checked).  ``settings``: loading.build's keyword arguments (see :func:`loading.settings`).
    A spec whose phase is None opens in the net's own (netstate.default_phase: TEST for a deploy
    net), decided from the NetParameter the check read: the server never parses such a file
    itself before its check (the Loaded's spec has the phase)."""
    from . import loading
    if guard is not None:
        guard.check(spec, settings)
    return loading.build(with_own_phase(guard, spec, settings), device=device, **settings)


def with_own_phase(guard, spec, settings):
    """``spec`` with its phase decided when it is None (the net's own, netstate.default_phase), the
    file parsed by ``guard``'s bounded child (not by the server) when it is from the page."""
    from .netstate import default_phase
    if spec.phase is not None:
        return spec
    if guard is not None and not spec.trusted:
        guard.check(spec, settings, parse_only=True)      # (a spec checked already: its NetParameter is kept)
    return replace(spec, phase=default_phase(spec.model))


def _spec_key(spec):
    d = asdict(spec)
    d.pop("label", None)
    return repr(sorted(d.items()))


def _forkserver_available():
    return "forkserver" in multiprocessing.get_all_start_methods()


def _rebuilt(err):
    """The engine's exception the child met, rebuilt from its class, args and attributes."""
    try:
        cls, args, attrs = pickle.loads(err)
        exc = cls.__new__(cls)
        exc.args = args
        exc.__dict__.update(attrs)
        return exc
    except Exception as e:  # noqa: BLE001 - a class this process cannot rebuild
        return RuntimeError("the net did not build (%s)" % e)


# ---------------------------------------------------------------------- the child
def _child_waits(conn):
    """A check process started ahead: its request comes on ``conn``, then its answer goes back."""
    try:
        request = conn.recv()
    except (EOFError, OSError):
        return
    _child_main(conn, request)


def _child_main(conn, request):
    """In the check's process: set the bounds, build, answer."""
    import resource
    cpu = request["cpu_seconds"]
    if cpu:
        soft = max(1, int(cpu + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))
    if request["memory_bytes"]:
        start = _address_space()
        limit = start + int(request["memory_bytes"]) + int(request["headroom"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        answer = _build(request)
    except MemoryError:
        answer = {"error": _pickled(LoadBounded(
            "building this net needed more memory than a net from the page may have (its budget, --max-net-mb, "
            "and %d MiB for reading it): refused, and its build stopped; the server and the other tabs go on"
            % (int(request["headroom"]) >> 20), "memory", "--max-net-mb"))}
    try:
        conn.send(answer)
    except MemoryError:
        pass
    finally:
        conn.close()


def _build(request):
    """In the check's process: read the spec's prototxt, then (unless ``parse_only``) build it as the
    server would; the answer carries the NetParameter read, whether the build failed or not (the
    server then reads the file no more: an error's hints come from it)."""
    import engine

    from . import loading
    from .netstate import default_phase
    spec = ModelSpec(**request["spec"])
    st = request["settings"]
    source = None
    error = None
    try:
        with engine.memory_budget(st["max_bytes"] or None), engine.net_limits(st["limits"]):
            source = loading.read_source(spec.model, copy=False)      # (build_net reads it from the cache)
            if not request.get("parse_only"):
                if spec.phase is None:          # the net's own phase: what the server decides next
                    spec = replace(spec, phase=default_phase(spec.model))
                loading.build_net(spec, st["allow_python"], st["model_root"])
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the server
        if _out_of_memory(exc):     # the engine's "Out of memory on the host": our bound, not the net's error
            raise MemoryError() from exc
        error = _pickled(exc)
    param = source.SerializeToString() if source is not None else None
    return {"error": error, "param": param, "version": loading.file_version(spec.model)}


def _out_of_memory(exc):
    """Whether ``exc`` is, or was raised from, a MemoryError."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, MemoryError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _pickled(exc):
    attrs = {k: v for k, v in exc.__dict__.items() if _picklable(v)}
    try:
        return pickle.dumps((type(exc), exc.args, attrs))
    except Exception:  # noqa: BLE001 - a class that cannot travel: its message does
        return pickle.dumps((RuntimeError, ("%s: %s" % (type(exc).__name__, exc),), {}))


def _picklable(v):
    try:
        pickle.dumps(v)
        return True
    except Exception:  # noqa: BLE001
        return False


def _address_space():
    """This process's virtual memory size (bytes)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        import psutil
        return psutil.Process().memory_info().vms
