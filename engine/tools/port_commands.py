"""``python -m engine compare-port`` and ``python -m engine export-torch``.

    python -m engine compare-port MODEL.prototxt --weights W (--onnx port.onnx | --torch FILE.py[:FACTORY]
                                  [--state-dict X.pth] [--reference torch] | --tensors dump.npz)
                                  [--input image.jpg|x.npy] [--mean-file F | --mean-value B,G,R]
                                  [--raw-scale 255] [--scale S] [--channel-swap 2,1,0] [--input-size H,W]
                                  [--rtol 1e-4] [--all] [--json FILE] [-o REPORT.html|.json|.md]
    python -m engine export-torch MODEL.prototxt [--weights W] -o model.py [--state-dict model.pth] [--verify]

compare-port exits 0 when the port is faithful, 3 when it departs (the CLI's "compare found
a difference"), 1 on an engine error (a missing package, a port onnxruntime cannot load, a
PyTorch module that raises).  The port is an ONNX model, a PyTorch module (a class or
function of FILE.py returning it; ``--reference torch``: the module is the reference and the
Caffe net its conversion), or a runtime's tensors (a .npz of name -> array).
"""
import json
import os

import numpy as np

EXIT_OK, EXIT_DIFFER = 0, 3


def _test_default(p):
    for a in p._actions:
        if a.dest == "phase":
            a.help = "TEST (default) or TRAIN"


def add_parsers(sub):
    from engine.tools.cli import _common
    p = sub.add_parser("compare-port", help="a Caffe net against an ONNX port of it: every blob, the first layer "
                       "whose own arithmetic departs, and why (exit 3 when it departs)")
    p.add_argument("model", help="the Caffe net (deploy) prototxt")
    _common(p)
    _test_default(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--onnx", metavar="PORT", help="the ONNX port to check")
    which.add_argument("--torch", metavar="FILE.py[:FACTORY]", help="a PyTorch port: FACTORY, a class or function "
                       "of FILE.py, returns the nn.Module (default: the file's only nn.Module class). Runs FILE.py")
    which.add_argument("--tensors", metavar="DUMP.npz", help="a runtime's tensors (name -> array, with the input "
                       "it was given), paired by name, then by shape and order")
    p.add_argument("--state-dict", metavar="X.pth", help="with --torch: a state_dict to load into the module")
    p.add_argument("--reference", choices=("caffe", "torch"), default="caffe",
                   help="with --torch: which is the reference: caffe (default: the module is a port of the net) "
                   "or torch (the net is a conversion of the module, e.g. for an NPU that takes Caffe models)")
    p.add_argument("--input", metavar="FILE", help="an image (preprocessed caffe.io-style with the options below) "
                   "or a .npy array; default: seeded normal values")
    g = p.add_argument_group("preprocessing (caffe.io.Transformer's, applied to an image --input)")
    g.add_argument("--mean-file", metavar="F", help="mean image: a .binaryproto or .npy (C x H x W)")
    g.add_argument("--mean-value", metavar="V[,V...]", help="mean per channel, in the net's channel order")
    g.add_argument("--raw-scale", type=float, help="multiply the [0, 1] image by this before the mean (e.g. 255)")
    g.add_argument("--scale", type=float, help="multiply by this after the mean (input_scale)")
    g.add_argument("--channel-swap", metavar="I,J,K", help="channel order after loading RGB, e.g. 2,1,0 for BGR")
    g.add_argument("--input-size", metavar="H,W", help="reshape the net's input to H x W (the image is resized)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4, of each blob's scale)")
    p.add_argument("--all", action="store_true", help="print every row, not only the first 60 and the departing")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("-o", "--report", metavar="FILE", help="also write a report with the port comparison "
                   "(.html, .json, .md)")
    p.set_defaults(func=cmd_compare_port, log_default=False)

    p = sub.add_parser("export-torch", help="write a plain PyTorch nn.Module (model.py) and its state_dict "
                       "(model.pth) for a Caffe net")
    p.add_argument("model", help="the Caffe net (deploy) prototxt")
    _common(p, gpu=False)
    _test_default(p)
    p.add_argument("-o", "--output", required=True, metavar="model.py", help="the Python file to write")
    p.add_argument("--state-dict", metavar="model.pth", help="where the weights go (default: beside -o, .pth)")
    p.add_argument("--class-name", help="the nn.Module's class name (default: from the net's name)")
    p.add_argument("--verify", action="store_true", help="then run it with torch against the engine, per blob "
                   "(exit 3 when a blob differs)")
    p.add_argument("--rtol", type=float, default=1e-4, help="--verify's relative tolerance (default 1e-4)")
    p.set_defaults(func=cmd_export_torch, log_default=False)


# ---------------------------------------------------------------------- compare-port
def _ints(text, what):
    from engine.tools.cli import UsageError
    try:
        return tuple(int(v) for v in str(text).replace("x", ",").split(",") if v.strip() != "")
    except ValueError:
        raise UsageError("%s: expected integers separated by ',' (got %r)" % (what, text)) from None


def _mean(args, channels):
    from engine.tools.cli import UsageError
    if args.mean_file and args.mean_value:
        raise UsageError("--mean-file and --mean-value: give one")
    if args.mean_value:
        try:
            m = np.array([float(v) for v in args.mean_value.split(",")], np.float32)
        except ValueError:
            raise UsageError("--mean-value: numbers separated by ',' (got %r)" % args.mean_value) from None
        if m.size == 1:
            m = np.repeat(m, channels)
        if m.size != channels:
            raise UsageError("--mean-value has %d values, the input has %d channels" % (m.size, channels))
        return m
    if args.mean_file:
        path = args.mean_file
        if path.lower().endswith(".npy"):
            m = np.load(path)
        else:
            import engine
            from engine.pycaffe.io import blobproto_to_array
            m = blobproto_to_array(engine.read_blobproto(path))
        m = np.asarray(m, np.float32)
        while m.ndim > 3:
            m = m[0]
        return m
    return None


def _preprocess(args, net):
    from engine.ports.compare import Preprocess
    from engine.tools.cli import UsageError
    name = net.inputs[0] if net.inputs else None
    if name is None:
        return None
    shape = tuple(net.blobs[name].shape)
    if args.input_size:
        hw = _ints(args.input_size, "--input-size")
        if len(hw) == 1:
            hw = hw * 2
        if len(hw) != 2 or len(shape) != 4:
            raise UsageError("--input-size takes H,W for a 4-d input (the net's '%s' is %s)" % (name, shape))
        net.blobs[name].reshape(shape[0], shape[1], hw[0], hw[1])
        net.reshape()
        shape = tuple(net.blobs[name].shape)
    C = shape[1] if len(shape) > 1 else 1
    mean = _mean(args, C)
    swap = _ints(args.channel_swap, "--channel-swap") if args.channel_swap else None
    pre = Preprocess(mean=mean, raw_scale=args.raw_scale, input_scale=args.scale, channel_swap=swap,
                     input_size=tuple(shape[2:]) if len(shape) == 4 else None)

    def transform(raw):
        from engine.pycaffe import io as cio
        tf = cio.Transformer({name: shape})
        tf.set_transpose(name, (2, 0, 1))
        if swap is not None:
            tf.set_channel_swap(name, swap)
        if args.raw_scale is not None:
            tf.set_raw_scale(name, args.raw_scale)
        if mean is not None:
            tf.set_mean(name, mean if mean.ndim == 1 or mean.shape == shape[1:] else mean.mean(axis=(1, 2)))
        if args.scale is not None:
            tf.set_input_scale(name, args.scale)
        img = cio.load_image(raw, color=C == 3) if isinstance(raw, (str, os.PathLike)) else np.asarray(raw)
        x = tf.preprocess(name, img)
        return np.repeat(x[None], shape[0], axis=0)
    pre.transform = transform
    return pre


def cmd_compare_port(args, out, err):
    from engine.ports.compare import compare_port
    from engine.tools.cli import UsageError, _phase, _say, _stages, build_net
    if args.state_dict and not args.torch:
        raise UsageError("--state-dict goes with --torch")
    if args.reference != "caffe" and not args.torch:
        raise UsageError("--reference torch goes with --torch (the PyTorch module the net was converted from)")
    net = build_net(args.model, _phase(args.phase, 1), args.level, _stages(args.stage), args.weights, args.seed,
                    args.gpu)
    pre = _preprocess(args, net)
    inputs = None
    if args.input:
        if not os.path.isfile(args.input):
            raise OSError(2, "No such file", args.input)
        inputs = {net.inputs[0]: args.input}
    if args.torch:
        from engine.ports.torch_port import compare_torch
        result = compare_torch(net, args.torch, args.state_dict, inputs, pre, rtol=args.rtol, seed=args.seed,
                               reference=args.reference)
    elif args.tensors:
        from engine.ports.tensors_port import compare_tensors
        result = compare_tensors(net, args.tensors, inputs, pre, rtol=args.rtol, seed=args.seed)
    else:
        result = compare_port(net, args.onnx, inputs, pre, rtol=args.rtol, seed=args.seed)
    _say(out, result.format(limit=None if args.all else 60).rstrip("\n"))
    if args.json:
        from engine.instruments.report import _clean
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_clean(result.to_dict()), f, indent=1)
        _say(err, "Wrote the comparison to %s" % args.json)
    if args.report:
        from engine.instruments.report import write_report
        write_report(args.report, net, None, port_comparison=result,
                     meta={"command": "compare-port", "model": args.model, "weights": args.weights,
                           "onnx": args.onnx, "torch": args.torch, "state_dict": args.state_dict,
                           "tensors": args.tensors, "reference": args.reference, "input": args.input,
                           "seed": args.seed})
        _say(err, "Wrote report to %s" % args.report)
    return EXIT_OK if result.faithful else EXIT_DIFFER


# ---------------------------------------------------------------------- export-torch
def cmd_export_torch(args, out, err):
    from engine.ports.torch_export import export_torch, verify_torch
    from engine.tools.cli import _phase, _say, _stages, build_net
    net = build_net(args.model, _phase(args.phase, 1), args.level, _stages(args.stage), args.weights, args.seed)
    sd = args.state_dict or os.path.splitext(args.output)[0] + ".pth"
    res = export_torch(net, args.output, sd, class_name=args.class_name, model_file=args.model,
                       weights_file=args.weights)
    _say(err, "Wrote %s (class %s) and its state_dict %s" % (args.output, res.class_name, sd))
    if args.verify:
        v = verify_torch(net, args.output, sd, rtol=args.rtol, seed=args.seed)
        _say(out, v.format().rstrip("\n"))
        return EXIT_OK if v.ok else EXIT_DIFFER
    return EXIT_OK
