"""The NetState a net opens in when nobody chose one: one rule for the
command line (``caffe-inspector MODEL``) and the page (examples, paths,
uploads, addresses without ``phase=``); and :func:`initial_spec`, the net the
page opens with (the command line's, else the first example).

A deploy net — it takes its data from Input layers (or the old net-level
``input:`` fields) and has no loss — opens in TEST, where Dropout passes its
input through and BatchNorm uses its stored statistics.  Any other net opens
in TRAIN, Caffe's default NetState phase for ``caffe train``/``time``.
"""
import os

from .sessions import ModelSpec

TRAIN, TEST = "TRAIN", "TEST"
PHASES = (TRAIN, TEST)


def is_loss_layer(lp):
    """A LayerParameter that computes a loss: a ``*Loss`` type or a non-zero
    loss_weight on one of its tops."""
    return lp.type.endswith("Loss") or any(w != 0 for w in lp.loss_weight)


def is_deploy_net(param):
    """True for a NetParameter fed by Input layers (or net-level inputs) and
    without a loss layer, whatever its phase/stage rules say."""
    has_input = len(param.input) > 0 or len(param.input_shape) > 0 or \
        any(lp.type == "Input" for lp in param.layer)
    return has_input and not any(is_loss_layer(lp) for lp in param.layer)


def default_phase(model):
    """"TEST" for a deploy net, else "TRAIN".  ``model`` is a prototxt path
    or a NetParameter.  A file that cannot be read (its error comes when it is
    built) falls back to its name: "deploy" in it means TEST."""
    if model is None:
        return TRAIN
    if not isinstance(model, (str, bytes, os.PathLike)):
        return TEST if is_deploy_net(model) else TRAIN
    import engine

    from .loading import read_source  # parsed once per version of the file
    try:
        param = read_source(os.fspath(model), copy=False)
    except (engine.CaffeError, OSError):        # unreadable or invalid: the build reports the real error
        return TEST if "deploy" in os.path.basename(os.fspath(model)).lower() else TRAIN
    return TEST if is_deploy_net(param) else TRAIN


def initial_spec(app):
    """The model the page opens with: the command line's, else the first example.
    ``app``: anything with the server's ``config`` (InspectorConfig) and ``examples``."""
    cfg = app.config
    if cfg.model:
        return ModelSpec(model=os.path.abspath(cfg.model), weights=cfg.weights, solver=cfg.solver,
                         phase=cfg.phase or default_phase(cfg.model), level=cfg.level,
                         stages=tuple(cfg.stages), label=os.path.basename(cfg.model), trusted=True)
    if cfg.solver:
        import engine
        sp = engine.read_solver_params(cfg.solver)
        net = sp.net or sp.train_net
        return ModelSpec(model=os.path.abspath(net), weights=cfg.weights, solver=cfg.solver, phase="TRAIN",
                         level=cfg.level, stages=tuple(cfg.stages), label=os.path.basename(net), trusted=True)
    if app.examples:
        label, path, phase = app.examples[0]
        return ModelSpec(model=path, phase=cfg.phase or phase, level=cfg.level, stages=tuple(cfg.stages),
                         label=label, trusted=True)
    return ModelSpec()
