"""caffe.cpp's ``train`` and ``test`` commands (tools/caffe.cpp, BVLC Caffe 1.0 master).

    train(solver_path, weights=None, snapshot=None, gpu=None, level=0, stage="",
          sigint_effect="stop", sighup_effect="snapshot")
    test(model, weights, iterations=50, gpu=None, level=0, stage="")

They log caffe.cpp's lines ("Use CPU.", "Starting Optimization", "Batch i, name = v",
"Loss: x", ...) on the ``engine.caffe`` logger and return 0, as the commands do.

``gpu`` is caffe's ``-gpu`` flag: None (not given: ``train`` then uses the GPU
only when the solver sets ``solver_mode: GPU``, on ``device_id``, as Caffe does),
False (CPU), True (device 0), an int device id, or Caffe's string form ("0",
"0,1", "all").
``stage`` is caffe's ``-stage`` flag: a comma-separated string, split as Caffe
splits it (so the empty default gives one empty stage, as in Caffe), or a list.
"""
import logging

import numpy as np

from engine.core import backend
from engine.core.errors import DeviceError, SolverError
from engine.core.log import num
from engine.core.solvers.base import SignalHandler, create_solver
from engine.core.solvers.policies import check_failed
from engine.proto import caffe_pb2

log = logging.getLogger("engine.caffe")


def get_gpus(gpu):
    """get_gpus: the device ids the ``-gpu`` flag asks for."""
    if gpu is None or gpu is False or gpu == "":
        return []
    if gpu is True:
        return [0]
    if isinstance(gpu, (int, np.integer)):
        return [int(gpu)]
    if isinstance(gpu, (list, tuple)):
        return [int(g) for g in gpu]
    if gpu == "all":
        # cudaGetDeviceCount: without CUDA, Caffe stops here (NO_GPU / CUDA_CHECK).
        try:
            cp = backend.cupy()
        except DeviceError as e:
            raise DeviceError("Cannot use GPU in CPU-only Caffe: check mode. (-gpu all: %s)" % e) from None
        return list(range(cp.cuda.runtime.getDeviceCount()))
    try:
        return [int(s) for s in str(gpu).split(",")]
    except ValueError:
        raise SolverError("bad -gpu value %r: give device ids separated by ',' or 'all'" % (gpu,)) \
            from None


def _stages(stage):
    """get_stages_from_flags: boost::split on ',' ('' gives one empty stage)."""
    if stage is None:
        stage = ""
    if isinstance(stage, (list, tuple)):
        return list(stage)
    return str(stage).split(",")


def _device_name(device):
    try:
        props = backend.cupy().cuda.runtime.getDeviceProperties(device)
        name = props.get("name", b"")
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - only informative
        return "?"


def train(solver_path, weights=None, snapshot=None, gpu=None, level=0, stage="",
          sigint_effect="stop", sighup_effect="snapshot", watch=None):
    """caffe train: build the solver, optionally resume from a solver state or
    finetune from weights (comma-separated caffemodels, loaded into the train and
    test nets), then Solve.  ``watch``: None, or ``watch(solver, action)`` giving a
    context manager entered around Solve (e.g. an
    :class:`engine.instruments.breakpoints.SolverWatch` that answers the solver's
    action requests itself, then asks ``action``, the signal handler's)."""
    from engine.core.upgrade import read_solver_params
    if not solver_path:
        raise check_failed("FLAGS_solver.size() > 0", 0, 0, "Need a solver definition to train.")
    if snapshot and weights:
        raise check_failed("!FLAGS_snapshot.size() || !FLAGS_weights.size()",
                           message="Give a snapshot to resume training or weights to finetune "
                                   "but not both.")
    stages = _stages(stage)
    solver_param = read_solver_params(solver_path)
    solver_param.train_state.level = int(level)
    for s in stages:
        solver_param.train_state.stage.append(s)
    # Without -gpu, a solver prototxt that sets solver_mode: GPU chooses the device.
    if (gpu is None and solver_param.HasField("solver_mode")
            and solver_param.solver_mode == caffe_pb2.SolverParameter.GPU):
        gpu = str(solver_param.device_id) if solver_param.HasField("device_id") else "0"
    gpus = get_gpus(gpu)
    if not gpus:
        log.info("Use CPU.")
        backend.set_mode_cpu()
    else:
        log.info("Using GPUs %s", ", ".join(str(g) for g in gpus))
        backend.cupy()  # a clear DeviceError when CUDA is not usable
        for g in gpus:
            log.info("GPU %d: %s", g, _device_name(g))
        solver_param.device_id = gpus[0]
        backend.set_device(gpus[0])
        backend.set_mode_gpu()
    handler = SignalHandler(sigint_effect, sighup_effect)
    if snapshot:
        solver_param.ClearField("weights")
    elif weights:
        solver_param.ClearField("weights")
        solver_param.weights.append(weights)
    with handler:
        solver = create_solver(solver_param)
        solver.set_action_function(handler.get_action_function())
        if snapshot:
            log.info("Resuming from %s", snapshot)
            solver.restore(snapshot)
        log.info("Starting Optimization")
        if len(gpus) > 1:
            raise SolverError("Multi-GPU execution not available - rebuild with USE_NCCL")
        if watch is None:
            solver.solve()
        else:
            with watch(solver, handler.get_action_function()):
                solver.solve()
    log.info("Optimization Done.")
    return 0


def test(model, weights, iterations=50, gpu=None, level=0, stage=""):
    """caffe test: score a model in the TEST phase for ``iterations`` batches, logging
    every output per batch and the averages."""
    from engine.core.net import TEST, Net
    if not model:
        raise check_failed("FLAGS_model.size() > 0", 0, 0, "Need a model definition to score.")
    if not weights:
        raise check_failed("FLAGS_weights.size() > 0", 0, 0, "Need model weights to score.")
    stages = _stages(stage)
    gpus = get_gpus(gpu)
    while len(gpus) > 1:
        log.info("Not using GPU #%d for single-GPU function", gpus.pop())
    if gpus:
        log.info("Use GPU with device ID %d", gpus[0])
        backend.cupy()
        log.info("GPU device name: %s", _device_name(gpus[0]))
        backend.set_device(gpus[0])
        backend.set_mode_gpu()
    else:
        log.info("Use CPU.")
        backend.set_mode_cpu()
    net = Net(model, TEST, level=int(level), stages=stages)
    net.CopyTrainedLayersFrom(weights)
    iterations = int(iterations)
    log.info("Running for %d iterations.", iterations)
    f = np.float32
    scores, score_ids = [], []
    loss = f(0)
    names, out_ids = net.blob_names, net.output_blob_indices
    for i in range(iterations):
        outputs, iter_loss = net.Forward()
        loss = f(loss + f(iter_loss))
        idx = 0
        for j, blob in enumerate(outputs):
            name = names[out_ids[j]]
            for score in np.asarray(blob.get_data(gpu=False), dtype=f).reshape(-1):
                if i == 0:
                    scores.append(score)
                    score_ids.append(j)
                else:
                    scores[idx] = f(scores[idx] + score)
                log.info("Batch %d, %s = %s", i, name, num(score))
                idx += 1
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = f(loss / f(iterations))
    log.info("Loss: %s", num(loss))
    weights_by_name = net.blob_loss_weights
    for i, total in enumerate(scores):
        name = names[out_ids[score_ids[i]]]
        loss_weight = f(weights_by_name[name])
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_score = f(total / f(iterations))
        msg = "%s = %s" % (name, num(mean_score))
        if loss_weight:
            msg += " (* %s = %s loss)" % (num(loss_weight), num(f(loss_weight * mean_score)))
        log.info("%s", msg)
    return 0
