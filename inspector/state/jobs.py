"""Long actions (solver runs, full-records passes): Dash background callbacks
that run in threads of the server process, with their results and progress in a
diskcache on disk.

Dash's own ``DiskcacheManager`` runs each background callback in a forked
process.  The inspector's nets live in the server's memory (a session's Net,
records, timeline), so a forked job would train a copy and throw it away.
:class:`ThreadJobManager` keeps Dash's protocol and its on-disk cache (the
results, the progress values, ``set_props`` side updates and the signing
secret) but starts each job in a thread of the server, so the job works on the
session's own objects.  Dash's cancel (the ``cancel=`` inputs, or a newer run of
the same callback) sets the job's :class:`CancelToken`; the job stops at the
next layer or iteration boundary, leaving the net consistent.

A job finds its token with :func:`current_token`.  :class:`ProgressObserver`
sits in ``net.debug_observers`` during a pass: it reports each layer done and
raises :class:`Cancelled` after the layer in progress when the token is set
(the Recorder closes its step in the net's ``finally``).
"""
import itertools
import os
import threading
import time

from dash import DiskcacheManager

from engine.instruments.observer import NetObserver

from .cleanup import owned_tempdir


class Cancelled(Exception):
    """The user cancelled a long action; what ran so far is kept."""


class CancelToken:
    def __init__(self):
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason="cancelled"):
        self.reason = self.reason or reason
        self._event.set()

    @property
    def cancelled(self):
        return self._event.is_set()

    def check(self):
        if self._event.is_set():
            raise Cancelled(self.reason or "cancelled")


_local = threading.local()


def current_token():
    """The CancelToken of the job running in this thread (a fresh, never
    cancelled one outside a job)."""
    tok = getattr(_local, "token", None)
    return tok if tok is not None else CancelToken()


class ThreadJobManager(DiskcacheManager):
    """Dash's background-callback manager, jobs in threads, cache on disk.

    ``cache_dir``: the diskcache folder (a new temporary one by default);
    ``expire``: seconds an unread result is kept."""

    def __init__(self, cache_dir=None, expire=3600):
        import diskcache
        # without a --cache-dir: caffe-inspector-jobs-<pid>-*, marked as this server's, removed at exit
        # (and by the next server's sweep after a SIGKILL: state/cleanup.py)
        self.cache_dir = cache_dir or owned_tempdir("caffe-inspector-jobs-")
        self.owns_cache_dir = not cache_dir
        if not cache_dir:
            import atexit
            atexit.register(self.remove_cache)
        os.makedirs(self.cache_dir, exist_ok=True)
        self._owned = set()
        super().__init__(diskcache.Cache(self.cache_dir), expire=expire)
        self._jobs = {}
        self._lock = threading.Lock()
        # job handles look like pids to Dash (ints); start high so that no
        # reader mistakes one for a real process
        self._ids = itertools.count(1_000_000_001)

    def remove_cache(self):
        """Remove the cache folder this manager made (none given): the server is going away."""
        if self.owns_cache_dir:
            import shutil
            try:
                self.handle.close()
            except Exception:  # noqa: BLE001 - the folder goes either way
                pass
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    # ------------------------------------------------------------ which functions are ours
    def own(self, fn):
        """Mark ``fn`` as this manager's (before Dash registers it).  Dash keeps
        one process-wide list of background functions and registers each with
        every manager; with several apps in one process (tests), a function of
        another app must not replace this app's under the same key."""
        fn._job_manager = self
        self._owned.add(id(fn))
        return fn

    def register(self, key, fn, progress):
        owner = getattr(fn, "_job_manager", None)
        if owner is not None and owner is not self:
            return
        super().register(key, fn, progress)

    # ------------------------------------------------------------ jobs
    def call_job_fn(self, key, job_fn, args, context):
        token = CancelToken()
        jid = next(self._ids)

        def run():
            _local.token = token
            try:
                job_fn(key, self._make_progress_key(key), args, context)
            finally:
                _local.token = None

        t = threading.Thread(target=run, name="inspector-job-%d" % jid, daemon=True)
        with self._lock:
            self._forget_finished()
            self._jobs[jid] = (t, token, time.monotonic())
        t.start()
        return jid

    def _forget_finished(self):
        now = time.monotonic()
        for jid, (t, _tok, t0) in list(self._jobs.items()):
            if not t.is_alive() and now - t0 > 60:
                del self._jobs[jid]

    def _job(self, job):
        try:
            return self._jobs.get(int(job))
        except (TypeError, ValueError):
            return None

    def terminate_job(self, job):
        if job is None:
            return
        j = self._job(job)
        if j is not None:
            j[1].cancel("cancelled")

    def terminate_unhealthy_job(self, job):
        return False

    def job_running(self, job):
        j = self._job(job)
        return bool(j is not None and j[0].is_alive())

    def running_jobs(self):
        with self._lock:
            return [jid for jid, (t, _tok, _t0) in self._jobs.items() if t.is_alive()]

    def wait_all(self, timeout=10.0):
        """Wait for every running job (tests, shutdown)."""
        end = time.monotonic() + timeout
        for jid in self.running_jobs():
            t = self._jobs[jid][0]
            t.join(max(0.0, end - time.monotonic()))


class ProgressObserver(NetObserver):
    """A net debug observer: ``report(done, total, layer name)`` after each
    layer; raises :class:`Cancelled` after a layer once ``token`` is set.
    ``total``: the layers the action will run (forward and backward counted
    separately)."""

    def __init__(self, net, total, report=None, token=None, min_interval=0.25):
        super().__init__(net)
        self.total = max(int(total), 1)
        self.done = 0
        self.report = report
        self.token = token
        self.min_interval = min_interval
        self._last = 0.0

    def after_layer(self, kind, i):
        self.done += 1
        now = time.monotonic()
        if self.report is not None and (now - self._last >= self.min_interval or self.done >= self.total):
            self._last = now
            self.report(self.done, self.total, "%s %s" % (kind, self.net.layer_names[i]))
        if self.token is not None and self.token.cancelled:
            raise Cancelled("cancelled after %s of %s (%d of %d layers)"
                            % (kind, self.net.layer_names[i], self.done, self.total))
