"""The inspector: a Dash app that shows the net Caffe builds and steps through it.

Data flows one way: engine.Net → :mod:`inspector.model` (a plain graph) →
:mod:`inspector.view_models` / :mod:`inspector.panel_models` →
:mod:`inspector.figures` and :mod:`inspector.layout`; :mod:`inspector.callbacks`
only wire the page to those.
"""
import engine  # noqa: F401  (before NumPy: engine._blas_kernels picks OpenBLAS's kernels)


def create_app(config=None, store=None):
    from .app import create_app as _create
    return _create(config, store)
