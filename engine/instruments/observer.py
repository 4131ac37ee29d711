"""The base of a net's debug observers.

``Net.debug_observers`` hold objects the net calls around each pass
(``begin``/``end``) and each layer (``before_layer``/``after_layer``), and asks
for Caffe's debug_info number of a blob it already reduced (``asum_mean``).
:class:`NetObserver` does nothing at each call; a ``with`` block puts it in the
net's list and takes it out again.  Subclasses override the calls they need.
"""


class NetObserver:
    """A debug observer of ``net`` that does nothing; ``with obs:`` watches the net."""

    def __init__(self, net):
        self.net = net

    def begin(self, kind, start, end):
        pass

    def before_layer(self, kind, i):
        pass

    def after_layer(self, kind, i):
        pass

    def end(self, kind, start, end):
        pass

    def asum_mean(self, blob, which):
        """Caffe's debug_info number of ``blob`` if this observer has it (None: the net reduces it)."""
        return None

    def __enter__(self):
        self.net.debug_observers.append(self)
        return self

    def __exit__(self, *exc):
        if self in self.net.debug_observers:
            self.net.debug_observers.remove(self)
        return False
