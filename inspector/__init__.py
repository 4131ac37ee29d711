"""The inspector: a Dash app that shows the net Caffe builds and steps through it.

Data flows one way: engine.Net → :mod:`inspector.views.model` (a plain graph) →
:mod:`inspector.views.view_models` / :mod:`inspector.views.panel_models` →
:mod:`inspector.views.figures` and :mod:`inspector.layout`; :mod:`inspector.state`
keeps each tab's net on the server; :mod:`inspector.callbacks` only wire the page
to those.  README.md in this folder says what goes where.
"""
import engine  # noqa: F401  (before NumPy: engine._blas_kernels picks OpenBLAS's kernels)


def create_app(config=None, store=None):
    from .app import create_app as _create
    return _create(config, store)
