"""Callbacks, one module per feature."""
from . import details, export, findings, graph, image_export, load, stepping, urlstate
from . import breakpoints, compare, downloads, timeline, training
from .common import AppContext

MODULES = (load, graph, details, stepping, findings, export, urlstate, image_export,
           timeline, breakpoints, training, compare, downloads)


def register_all(dash_app, app: AppContext):
    for m in MODULES:
        m.register(dash_app, app)
