"""What the server keeps per browser tab, and what the page's actions do to it.

:mod:`.sessions` (a Session holds its Loaded net), :mod:`.loading` (building a net
from a ModelSpec), :mod:`.netstate` (which net and NetState open by default),
:mod:`.urlstate` (the page's address ↔ a session's net), :mod:`.inputs` (values for
input blobs), :mod:`.runner` (stepping, runs, solver iterations), :mod:`.training`
(one solver iteration and its history), :mod:`.debugger` (timeline, breakpoints),
:mod:`.jobs` (long actions in server threads), :mod:`.presenter` (a Loaded net →
the view models of :mod:`inspector.views`, cached on it), :mod:`.spares` (nets
built ahead).

These modules may use :mod:`inspector.views`, never ``inspector.callbacks`` or
``inspector.layout`` (no Dash callbacks, no page components).
"""
