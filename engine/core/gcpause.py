"""``long_lived_imports()``: a block that makes only long-lived objects (big imports) runs
with Python's cyclic garbage collector paused; afterwards every object the process has is
moved to the oldest generation at once (``gc.freeze`` + ``gc.unfreeze``: none is examined,
none kept out of later collections).  Numba's import makes some 300,000 such objects;
collected as they come, the young generations' passes over them cost a process 0.07-0.1 s
of CPU (GoogLeNet's first forward, issue 24) and free nothing.  Garbage the program made
before stays collectable: the next full collection frees it.  A program that froze objects
itself (``gc.freeze`` before forking) keeps them frozen: then nothing is moved."""
import gc
from contextlib import contextmanager


@contextmanager
def long_lived_imports():
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if not frozen:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()
