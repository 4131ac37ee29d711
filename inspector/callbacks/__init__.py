"""Callbacks, one module per feature."""
from . import (
    breakpoints,
    compare,
    details,
    downloads,
    export,
    findings,
    graph,
    image_export,
    load,
    stepping,
    timeline,
    training,
    uploads,
    urlstate,
)
from .common import AppContext

MODULES = (load, graph, details, stepping, findings, export, urlstate, image_export,
           timeline, breakpoints, training, compare, downloads, uploads)


def register_all(dash_app, app: AppContext):
    for m in MODULES:
        m.register(dash_app, app)
