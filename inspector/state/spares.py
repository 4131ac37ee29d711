"""Nets built ahead of time, so that a tab that opens the page or switches TRAIN <-> TEST
takes a net at once instead of waiting for Init (ResNet-152 takes a second or more).  CPU only.

Two kinds:

- **shared spares** (:meth:`Spares.take`, :meth:`Spares.prime`): the page's default net
  (the command line's) for the next browser tab, and the command line's or a bundled
  example's net in the other phase.  One per spec, for any tab; the next one is built after
  one is taken.
- **a tab's spare** (:meth:`Spares.take_tab`, :meth:`Spares.prime_tab`): the net a tab
  opened from a path, an upload, a deep link or a reload, built in its other phase for that
  tab alone.  At most one per tab, replaced (or dropped) when the tab loads another net,
  dropped when the session ends (:meth:`Spares.drop_tab`).  All the tabs' spares together
  stay within ``budget`` bytes of the memory their nets need
  (``net.memory_required_bytes``: what their blobs, params and buffers declare at Init):
  a net whose other phase does not fit gets none (its switch builds the net, as before),
  and a new spare pushes out the spares primed longest ago.

Every spare is built in a background thread of lowered OS priority, ``delay`` seconds after
the load that asked for it returns (the page draws the net first), or for a tab's spare,
a moment after the graph callback drew that net (:meth:`Spares.hurry_tab`), if sooner.  A load that asks for a
spare being built waits for it rather than building a second net beside it (both would take
as long as the two together).  A spare whose files changed since it was built
(``stamp``: the files' versions) is dropped, not handed out: the tab builds what the files
say now."""
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

log = logging.getLogger("inspector")

SPARE_NICE = 10         # how much lower the OS priority of a thread building a spare is


def first_view(loaded):
    """``loaded`` with what its first drawing needs computed ahead (its blocks, the
    folding it opens with, that view's layout): the tab that takes it draws at once."""
    from inspector.state import presenter
    presenter.display_and_layout(loaded, presenter.DEFAULT_OPTIONS)
    return loaded


def net_bytes(loaded):
    """The memory a built net needs (what Init counted its blobs, params and buffers to declare)."""
    return int(getattr(getattr(loaded, "net", None), "memory_required_bytes", 0) or 0)


def _lower_priority():
    """Lower this thread's OS priority (Linux: a thread has its own nice value): a spare
    takes the CPU that the tabs leave."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + SPARE_NICE))
    except (AttributeError, OSError):       # not Linux, or not allowed: at the normal priority
        pass


@dataclass(eq=False)
class _TabSpare:
    key: str
    spec: Any
    need: int                        # bytes counted against the budget (estimated, then the net's own)
    state: str = "waiting"           # waiting (its delay) -> building -> ready
    loaded: Any = None
    stamp: Any = None


class Spares:
    def __init__(self, build, budget: Optional[int] = None, stamp=None, size=net_bytes, delay=2.0):
        self._build = build          # spec -> Loaded (raises on failure)
        self.delay = delay           # seconds from a load to the start of the spare it asks for
        self._stamp = stamp or (lambda spec: None)      # spec -> the versions of its files
        self._size = size            # Loaded -> bytes it needs
        self.budget = budget         # bytes: all the tabs' spares together (None or 0: no tab spares)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)     # a build finished
        self._ready = {}             # key -> (Loaded, stamp): the shared spares
        self._busy = set()
        self._tabs: "OrderedDict[Any, _TabSpare]" = OrderedDict()    # owner -> its spare, primed longest ago first
        self.closed = False          # clear(): the server is going away, no more spares

    def clear(self):
        """Drop every spare net and build no more (the server is going away)."""
        with self._changed:
            self.closed = True
            self._ready.clear()
            self._tabs.clear()
            self._changed.notify_all()

    @staticmethod
    def _key(spec):
        return repr(spec)

    def _fresh(self, spec, stamp):
        """Whether a spare built when its files were at ``stamp`` is what they say now."""
        return stamp == self._stamp(spec)

    # ------------------------------------------------------------ shared spares
    def take(self, spec, wait=0.0):
        """The spare net built for ``spec`` (None if none is ready); the next one starts building
        a moment later (the tab that took this one draws it first).  ``wait``: seconds to wait
        for a spare of ``spec`` already being built (it is ready sooner than a second build
        started now beside it, which would halve the speed of both)."""
        key = self._key(spec)
        with self._changed:
            if wait and key in self._busy:
                self._changed.wait_for(lambda: key not in self._busy, timeout=wait)
            loaded, stamp = self._ready.pop(key, (None, None))
        if loaded is not None and not self._fresh(spec, stamp):
            log.info("a spare net of %s was dropped: its files changed", spec.model)
            loaded = None
        if loaded is not None:
            self.prime_later(spec)
        return loaded

    def prime_later(self, spec, delay=None):
        """prime(spec) after ``delay`` seconds (default ``self.delay``): a tab that just opened a
        net draws it first."""
        t = threading.Timer(self.delay if delay is None else delay, self.prime, (spec,))
        t.daemon = True
        t.start()

    def prime(self, spec):
        """Start building a spare for ``spec`` unless one is ready or on its way."""
        key = self._key(spec)
        with self._lock:
            if self.closed or key in self._ready or key in self._busy:
                return
            self._busy.add(key)
        threading.Thread(target=self._work, args=(spec, key), daemon=True, name="inspector-spare").start()

    def ready(self, spec):
        with self._lock:
            return self._key(spec) in self._ready

    def _work(self, spec, key):
        _lower_priority()
        loaded = None
        stamp = self._stamp(spec)
        try:
            loaded = self._build(spec)
        except Exception:  # noqa: BLE001 - the tab builds it itself and shows the error
            log.exception("building a spare net for %s failed", getattr(spec, "model", spec))
        with self._changed:
            self._busy.discard(key)
            if loaded is not None:
                self._ready[key] = (loaded, stamp)
            self._changed.notify_all()

    # ------------------------------------------------------------ a tab's spare
    def _used_locked(self, but=None):
        return sum(e.need for o, e in self._tabs.items() if o != but)

    def _make_room_locked(self, owner, need):
        """Drop the ready spares of other tabs, primed longest ago first, until ``need`` more
        bytes fit the budget; whether they fit (spares being built are never dropped)."""
        if not self.budget or need > self.budget:
            return False
        for other in [o for o, e in self._tabs.items() if o != owner and e.state == "ready"]:
            if self._used_locked(but=owner) + need <= self.budget:
                break
            del self._tabs[other]
            log.info("the spare net of a tab was dropped to make room for another's (spare budget)")
        return self._used_locked(but=owner) + need <= self.budget

    def prime_tab(self, owner, spec, need, delay=None):
        """Build ``spec`` ahead for the tab ``owner`` (its session id), ``delay`` seconds from
        now (default ``self.delay``), in place of any spare it had.  ``need``: the bytes its net
        is expected to need (the tab's net in the other phase: about the same).  Returns
        whether it is on its way (False: the tab's spares would pass the budget; the tab has no
        spare then)."""
        key = self._key(spec)
        with self._changed:
            self._tabs.pop(owner, None)              # a build under way is dropped when it ends
            self._changed.notify_all()
            need = int(need or 0)
            if self.closed:
                return False
            if not self._make_room_locked(owner, need):
                log.info("no spare net of %s in its other phase: it needs %d bytes, the spare budget is %s",
                         getattr(spec, "model", spec), need, self.budget)
                return False
            entry = self._tabs[owner] = _TabSpare(key=key, spec=spec, need=need)
        t = threading.Timer(self.delay if delay is None else delay, self._work_tab, (owner, entry))
        t.daemon = True
        t.name = "inspector-tab-spare"
        t.start()
        return True

    def _work_tab(self, owner, entry):
        with self._lock:
            if self._tabs.get(owner) is not entry or entry.state != "waiting":
                return                                # replaced, dropped or taken meanwhile
            entry.state = "building"
            room = (self.budget or 0) - self._used_locked(but=owner)
        _lower_priority()
        import engine
        loaded = None
        stamp = self._stamp(entry.spec)
        try:
            with engine.memory_budget(room):          # a net past the room is refused before it allocates
                loaded = self._build(entry.spec)
        except engine.MemoryBudgetExceeded:
            log.info("no spare net of %s: it needs more than the spare budget left", entry.spec.model)
        except Exception:  # noqa: BLE001 - the tab builds it itself and shows the error
            log.exception("building a spare net for %s failed", getattr(entry.spec, "model", entry.spec))
        with self._changed:
            if self._tabs.get(owner) is entry:
                if loaded is not None:
                    entry.need = self._size(loaded)
                if loaded is not None and self._make_room_locked(owner, entry.need):
                    entry.loaded, entry.stamp, entry.state = loaded, stamp, "ready"
                else:
                    del self._tabs[owner]
            self._changed.notify_all()

    def hurry_tab(self, owner, delay=0.25):
        """The tab's net is drawn (the graph callback returned its elements): its spare waiting
        out its delay starts ``delay`` seconds from now instead (the response is on its way)."""
        with self._lock:
            entry = self._tabs.get(owner)
            if entry is None or entry.state != "waiting":
                return
        t = threading.Timer(delay, self._work_tab, (owner, entry))     # the first of the two to start builds
        t.daemon = True
        t.name = "inspector-tab-spare"
        t.start()

    def take_tab(self, owner, spec, wait=0.0):
        """The spare the tab ``owner`` has of ``spec`` (None: none), which it no longer has.
        One being built is waited for (``wait`` seconds at most); one whose delay has not
        ended is dropped (the tab builds it now)."""
        key = self._key(spec)
        with self._changed:
            entry = self._tabs.get(owner)
            if entry is None or entry.key != key:
                return None
            if entry.state == "building" and wait:
                self._changed.wait_for(lambda: self._tabs.get(owner) is not entry or entry.state != "building",
                                       timeout=wait)
            if self._tabs.get(owner) is not entry or entry.state == "building":
                return None                           # gone, or still building after ``wait``
            del self._tabs[owner]
            self._changed.notify_all()
        if entry.state != "ready":
            return None
        if not self._fresh(spec, entry.stamp):
            log.info("the spare net of %s was dropped: its files changed", spec.model)
            return None
        return entry.loaded

    def drop_tab(self, owner):
        """Forget the tab's spare (it loaded a net that has none, or its session ended)."""
        with self._changed:
            if self._tabs.pop(owner, None) is not None:
                self._changed.notify_all()

    def tab_spare(self, owner):
        """(state, spec, bytes) of the tab's spare (None: none): waiting, building or ready."""
        with self._lock:
            e = self._tabs.get(owner)
            return None if e is None else (e.state, e.spec, e.need)

    def tab_bytes(self):
        """What the tabs' spares count against the budget, all together."""
        with self._lock:
            return self._used_locked()
