"""The errors of engine.ports: a layer that cannot be exported faithfully, an extra that is
not installed.  Both are engine errors (``CaffeError``): the command line prints them as one
line and exits 1."""
from engine.core.errors import CaffeError, LayerError

ONNX_EXTRA = "pip install .[onnx]  (or: pip install -r requirements-onnx.txt; onnx>=1.15, onnxruntime>=1.17)"


class ExportError(LayerError):
    """A net or layer has no faithful form in the target format.

    ``layer`` names the first culprit; ``refusals`` lists every ``(layer, type, reason)``
    found, so one message names them all."""

    def __init__(self, message, layer=None, blob=None, refusals=()):
        super().__init__(message, layer=layer, blob=blob)
        self.refusals = list(refusals)


class MissingExtraError(CaffeError, ImportError):
    """An optional dependency (an extra of caffe-inspector) is not installed."""


def require(module, what):
    """``import module``, or a MissingExtraError naming the ``onnx`` extra."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError("%s needs the '%s' package, which is not installed (%s). Install the onnx "
                                "extra: %s" % (what, module, e, ONNX_EXTRA)) from e
