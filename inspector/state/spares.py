"""Nets built ahead of time: the page's default net (the command line's) for
the next browser tab, and that net in the other phase for a phase switch.  A
tab that opens the page (or switches TRAIN <-> TEST) takes the spare at once
instead of waiting for Init (ResNet-152 takes a second or more), and the next
spare is built in a background thread.  One spare per spec, CPU only."""
import logging
import threading

log = logging.getLogger("inspector")


def first_view(loaded):
    """``loaded`` with what its first drawing needs computed ahead (its blocks, the
    folding it opens with, that view's layout): the tab that takes it draws at once."""
    from inspector.state import presenter
    presenter.display_and_layout(loaded, presenter.DEFAULT_OPTIONS)
    return loaded


class Spares:
    def __init__(self, build):
        self._build = build          # spec -> Loaded (raises on failure)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)     # a build finished
        self._ready = {}
        self._busy = set()

    @staticmethod
    def _key(spec):
        return repr(spec)

    def take(self, spec, wait=0.0):
        """The spare net built for ``spec`` (None if none is ready); the next one starts building
        a moment later (the tab that took this one draws it first).  ``wait``: seconds to wait
        for a spare of ``spec`` already being built (it is ready sooner than a second build
        started now beside it, which would halve the speed of both)."""
        key = self._key(spec)
        with self._changed:
            if wait and key in self._busy:
                self._changed.wait_for(lambda: key not in self._busy, timeout=wait)
            loaded = self._ready.pop(key, None)
        if loaded is not None:
            self.prime_later(spec)
        return loaded

    def prime_later(self, spec, delay=2.0):
        """prime(spec) after ``delay`` seconds: a tab that just opened a net draws it first."""
        t = threading.Timer(delay, self.prime, (spec,))
        t.daemon = True
        t.start()

    def prime(self, spec):
        """Start building a spare for ``spec`` unless one is ready or on its way."""
        key = self._key(spec)
        with self._lock:
            if key in self._ready or key in self._busy:
                return
            self._busy.add(key)
        threading.Thread(target=self._work, args=(spec, key), daemon=True, name="inspector-spare").start()

    def ready(self, spec):
        with self._lock:
            return self._key(spec) in self._ready

    def _work(self, spec, key):
        loaded = None
        try:
            loaded = self._build(spec)
        except Exception:  # noqa: BLE001 - the tab builds it itself and shows the error
            log.exception("building a spare net for %s failed", spec.model)
        with self._changed:
            self._busy.discard(key)
            if loaded is not None:
                self._ready[key] = loaded
            self._changed.notify_all()
