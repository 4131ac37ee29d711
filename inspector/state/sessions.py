"""Server-side sessions: everything a browser tab works on, kept on the server.

The page's ``dcc.Store`` holds only the session id.  A :class:`Session` holds
the loaded net (a :class:`Loaded`: Net, NetGraph, Recorder, RunLog, solver),
the model spec it came from, the uploaded files, the input settings, the
stepping cursors and the last load error.  When a load fails, ``loaded`` keeps
the last good net, so the page stays usable beside the error.

:class:`SessionStore` is bounded (``max_sessions``: least recently used goes
first) and evicts sessions idle for ``idle_seconds``.  Each session has its
own lock; callbacks work on a session inside ``with store.use(sid) as s:``.
"""
import re
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .cleanup import owned_tempdir

_SID = re.compile(r"^[0-9a-f]{32}$")


def new_session_id():
    return uuid.uuid4().hex


def valid_session_id(sid):
    return isinstance(sid, str) and bool(_SID.match(sid))


@dataclass
class ModelSpec:
    """Where a net comes from and the NetState to build it in."""
    model: Optional[str] = None         # prototxt path
    weights: Optional[str] = None       # caffemodel / h5 path
    solver: Optional[str] = None        # solver prototxt path
    mean: Optional[str] = None          # mean binaryproto path
    phase: str = "TRAIN"
    level: int = 0
    stages: Tuple[str, ...] = ()
    label: str = ""                     # how the page names it (example name, file name)
    uploaded: bool = False              # came from the browser
    trusted: bool = False               # the command line's or a bundled example: no file-access checks
    data_shapes: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()   # stood-in data tops' per-item shapes, given

    def state(self):
        return (0 if self.phase == "TRAIN" else 1, int(self.level), tuple(self.stages))


@dataclass
class LoadError:
    """A failed load, for the page: the message and where."""
    message: str
    kind: str = ""
    path: Optional[str] = None
    line: Optional[int] = None
    column: Optional[int] = None
    layer: Optional[str] = None
    blob: Optional[str] = None
    field: Optional[str] = None         # the layer's field at fault (convolution_param.kernel_size), when known
    hint: str = ""                      # what to do about it (e.g. where relative paths were looked for)
    fallback: bool = False              # the page opened the default net instead (a fresh tab)
    stand_ins: tuple = ()               # a structure-only net that did not build: its stood-in data (StandInInfo)

    @property
    def where(self):
        if self.path is None:
            return ""
        s = self.path
        if self.line is not None:
            s += ":%d" % self.line
            if self.column is not None:
                s += ":%d" % self.column
        return s


@dataclass
class Loaded:
    """A net that built, with everything derived from it."""
    net: Any
    graph: Any
    recorder: Any
    runlog: Any
    spec: ModelSpec
    source_param: Any = None
    solver: Any = None
    solver_note: str = ""
    analysis: Dict[str, dict] = field(default_factory=dict)
    mean: Any = None                    # mean array (C x H x W) from the mean file
    max_bytes: Optional[int] = None     # the memory budget it was built under (other nets made from it too)
    cache: Dict[Any, Any] = field(default_factory=dict, repr=False)   # display graphs and layouts
    # the debugger (issue 14): engine.instruments.history.Timeline, training.TrainingHistory,
    # the timeline step shown instead of the live net (None: live), the active comparison
    timeline: Any = None
    training: Any = None
    view_step: Optional[int] = None
    comparison: Any = None
    weights_from: Optional[str] = None  # weights given in the Compare tab (a .caffemodel, a port's): not the fillers'


@dataclass
class Session:
    id: str
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    waiting: int = 0                    # callbacks waiting for ``lock`` (SessionStore.use, let_in)
    created: float = 0.0
    last_used: float = 0.0
    loaded: Optional[Loaded] = None
    error: Optional[LoadError] = None
    spec: ModelSpec = field(default_factory=ModelSpec)
    failed_spec: Optional[ModelSpec] = None   # what the last load tried, when it failed
    standin_about: Any = None           # what the structure-only notice shows now (callbacks/load.py)
    device: str = "CPU"
    net_version: int = 0
    run_version: int = 0
    cursor_forward: int = 0             # next layer "step" runs forward
    cursor_backward: int = -1           # next layer "step back" runs backward (-1: the last)
    paused: Optional[Dict[str, Any]] = None   # where Continue resumes (inspector/state/runner.py: pause)
    cursor_bp: Optional[int] = None     # the id of Run to cursor's one-shot breakpoint while it runs
    solver_resume: int = 0              # how many times Continue asked to go on with a stopped solver run
    solver_resume_pending: Optional[int] = None   # the request the job runner has not taken yet
    message: str = ""
    uploads: Dict[str, str] = field(default_factory=dict)   # kind -> saved path
    upload_names: Dict[str, str] = field(default_factory=dict)
    input_settings: Dict[str, Any] = field(default_factory=dict)
    breakpoints: Any = None             # engine.instruments.breakpoints.Breakpoints (kept across loads)
    job: Optional[Dict[str, Any]] = None    # the long action running (inspector/state/jobs.py), if any
    last_hit: Any = None                # the breakpoint Hit that stopped the last action, if any
    last_hit_cursor: bool = False       # ... Run to cursor's one-shot stop, not a breakpoint of the user's
    reveal: Any = None                  # {"kind", "name", "n"}: a layer the graph should select and show
    reveals: int = 0                    # how many reveals were asked (their "n")
    first_view: Optional[Dict[str, Any]] = None   # what the tab's page was sent with (inspector/app.py)
    # how the session began: "new" (a page this server sent), or for a tab whose session is gone
    # "idle" / "crowded" (this server let it go: --idle-minutes / --max-sessions), or "unknown"
    # (an id this server never gave out: it was restarted since the page was opened)
    origin: str = "new"
    no_net: str = "no net is loaded"    # what a run says while no net is loaded (no_net_message)
    # while a run the page asked is in progress (callbacks/stepping.py: act): its time limit
    # (engine.instruments.breakpoints.TimeLimit, --run-seconds) and the FLOPs one layer may need
    # (--max-layer-gflop); None outside such a request (a background job has Cancel instead)
    run_limit: Any = None
    max_layer_flops: Optional[float] = None
    _dir: Optional[str] = field(default=None, repr=False)

    @property
    def upload_dir(self):
        if self._dir is None:      # inspector-<pid>-<session>-*, marked as this server's (state/cleanup.py)
            self._dir = owned_tempdir("inspector-", self.id[:8] + "-")
        return self._dir

    def close(self):
        if self.loaded is not None and self.loaded.recorder is not None:
            self.loaded.recorder.detach()
        self.loaded = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


REMEMBERED = 100_000      # session ids a store remembers having given out, and having let go (32 bytes each)


def _remember(table, key, value):
    table[key] = value
    table.move_to_end(key)
    while len(table) > REMEMBERED:
        table.popitem(last=False)


def no_net_message(session, store=None):
    """Why a tab has no net to run, and what to do: its session was let go by this server (idle,
    or for newer tabs), or it is from before the server was restarted."""
    origin = getattr(session, "origin", "new")
    if origin == "idle":
        minutes = " (--idle-minutes %g)" % (store.idle_seconds / 60) if store is not None else ""
        return "no net is loaded: this tab sat idle past the server's limit%s and its session ended; reload " \
               "the page to open its net again" % minutes
    if origin == "crowded":
        limit = " (--max-sessions %d)" % store.max_sessions if store is not None else ""
        return "no net is loaded: the server let this tab's session go for newer tabs%s; reload the page to " \
               "open its net again" % limit
    if origin == "unknown":
        return "no net is loaded: the server was restarted since this page was opened, and the tab's net went " \
               "with it; reload the page to open its net again"
    return "no net is loaded"


class SessionStore:
    """Sessions by id, bounded and evicted when idle."""

    def __init__(self, max_sessions=8, idle_seconds=3600.0, clock=time.monotonic):
        self.max_sessions = int(max_sessions)
        self.idle_seconds = float(idle_seconds)
        self.clock = clock
        self._sessions = OrderedDict()
        self._lock = threading.Lock()
        self._issued = OrderedDict()     # ids handed to pages (new_id), the latest REMEMBERED
        self._gone = OrderedDict()       # id -> why its session ended ("idle", "crowded"), the latest REMEMBERED
        self.evicted = 0
        self.on_close = []          # functions of a session id, called as its session ends (its spare net goes)

    def __len__(self):
        return len(self._sessions)

    def __contains__(self, sid):
        return sid in self._sessions

    def ids(self):
        return list(self._sessions)

    def new_id(self):
        """A session id for a page this server sends (remembered, so that its first callback is
        known for a new tab, not one from before a restart)."""
        sid = new_session_id()
        with self._lock:
            _remember(self._issued, sid, True)
        return sid

    def _evict_locked(self, keep=None):
        now = self.clock()
        gone = []
        for sid, s in list(self._sessions.items()):
            if sid != keep and now - s.last_used > self.idle_seconds:
                gone.append(self._sessions.pop(sid))
                _remember(self._gone, sid, "idle")
        while len(self._sessions) > self.max_sessions:
            sid = next(iter(self._sessions))
            if sid == keep:
                self._sessions.move_to_end(sid)
                sid = next(iter(self._sessions))
                if sid == keep:
                    break
            gone.append(self._sessions.pop(sid))
            _remember(self._gone, sid, "crowded")
        return gone

    def evict_idle(self):
        with self._lock:
            gone = self._evict_locked()
        self._close(gone)
        return len(gone)

    def _close(self, sessions):
        for s in sessions:
            self.evicted += 1
            # close under the session's lock so a running callback finishes first
            with s.lock:
                s.close()
            for fn in self.on_close:
                fn(s.id)

    def get_or_create(self, sid=None):
        """(session, created): the session ``sid``, or a new one (under ``sid``
        when it is a well-formed id that is not known, e.g. after eviction)."""
        with self._lock:
            now = self.clock()
            s = self._sessions.get(sid) if sid else None
            created = False
            if s is None:
                origin = "new"
                if not valid_session_id(sid):
                    sid = new_session_id()
                elif sid in self._gone:
                    origin = self._gone[sid]
                elif sid not in self._issued:
                    origin = "unknown"
                s = Session(id=sid, created=now, last_used=now, origin=origin)
                s.no_net = no_net_message(s, self)
                self._sessions[sid] = s
                created = True
            s.last_used = now
            self._sessions.move_to_end(sid)
            gone = self._evict_locked(keep=sid)
        self._close(gone)
        return s, created

    def get(self, sid):
        with self._lock:
            s = self._sessions.get(sid)
            if s is not None:
                s.last_used = self.clock()
                self._sessions.move_to_end(sid)
            return s

    @contextmanager
    def use(self, sid):
        """Hold the session's lock for a callback; creates it when unknown.
        A session evicted (and closed) while this callback waited for its lock
        is not used: the callback gets the live session of that id instead."""
        while True:
            s, _created = self.get_or_create(sid)
            with self._lock:
                s.waiting += 1
            try:
                s.lock.acquire()
            finally:
                with self._lock:
                    s.waiting -= 1
            try:
                with self._lock:
                    live = self._sessions.get(s.id) is s
                if live:
                    yield s
                    s.last_used = self.clock()
                    return
            finally:
                s.lock.release()

    def let_in(self, sid, limit=2.0, poll=0.001):
        """Wait (at most ``limit`` seconds) until every callback that is waiting for session
        ``sid``'s lock has taken it: a long run that takes the lock once per step calls this
        between two steps, so that the tab's other callbacks answer while it runs (a lock is
        not fair: the run's thread, busy and never descheduled, would take it again at once)."""
        with self._lock:
            s = self._sessions.get(sid)
        end = time.monotonic() + limit
        while s is not None and s.waiting > 0 and time.monotonic() < end:
            time.sleep(poll)

    def close_all(self):
        """End every session (the server is going away): their upload folders are removed."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            if s.lock.acquire(timeout=5):      # a callback still running past that: its folder goes anyway
                try:
                    s.close()
                finally:
                    s.lock.release()
            else:
                s.close()

    def drop(self, sid):
        with self._lock:
            s = self._sessions.pop(sid, None)
        if s is not None:
            self._close([s])
