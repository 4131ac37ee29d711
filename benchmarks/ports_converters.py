"""compare-port's verdicts on ports made by real converters: caffe2onnx and MMdnn.

The converters are old (caffe2onnx pins onnx 1.6, MMdnn 0.3.1 dates from 2019) and stay out of
the project's requirements: they run from their own virtual environment, as a user would run
them, in a subprocess (``--venv``, default /work/venv-conv):

    python3 -m venv /work/venv-conv
    /work/venv-conv/bin/pip install --no-deps caffe2onnx==2.0.1 mmdnn==0.3.1
    /work/venv-conv/bin/pip install onnx==1.14.1 protobuf==3.20.3 "numpy<2" six pillow
    python benchmarks/ports_converters.py                       # ResNet-50, the tiny ResNet
    python benchmarks/ports_converters.py --nets resnet50,caffenet --json out.json

Each net is built in TEST with seeded random weights (engine.ports.randomize_params; the
BatchNorm scale factor 1, as in the published ResNet caffemodels), saved as a caffemodel,
converted by each tool, and compared (engine.ports.compare.compare_port, seeded normal
input). What is printed per port: the verdict, how the values were paired, how many
BatchNorm+Scale pairs were found fused, the input layout, the first departing layer and the
diagnosis, and the comparison's time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import engine  # noqa: E402
from benchmarks import netgen  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("CAFFE_SHARED", os.path.join(ROOT, "..", "shared"))


def _resnet50(d):
    p = os.path.join(d, "ResNet-50-deploy.prototxt")
    with open(p, "w") as f:
        f.write(netgen.deploy_prototxt(50))
    return p


def _tiny(d):
    text = open(os.path.join(ROOT, "examples", "resnet_tiny", "resnet_tiny.prototxt")).read()
    text = text[:text.index('layer {\n  name: "loss"')]
    text = text.replace('  top: "label"\n', "").replace(" shape { dim: 8 }", "")
    text = text.replace("dim: 8 dim: 3", "dim: 1 dim: 3")
    p = os.path.join(d, "resnet_tiny_deploy.prototxt")
    with open(p, "w") as f:
        f.write(text)
    return p


def _zoo(rel):
    def make(d):
        return os.path.join(SHARED, "zoo", rel)
    return make


NETS = {
    "resnet50": _resnet50,
    "resnet_tiny": _tiny,
    "caffenet": _zoo("models/bvlc_reference_caffenet/deploy.prototxt"),
    "googlenet": _zoo("models/bvlc_googlenet/deploy.prototxt"),
}


def build(proto, d, name, seed=0):
    """The net at batch 1 with seeded weights, saved in ``d`` as ``name``.caffemodel."""
    from engine.ports import randomize_params
    net = engine.Net(proto, engine.TEST)
    for blob in net.inputs:
        s = net.blobs[blob].shape
        net.blobs[blob].reshape(1, *s[1:])
    net.reshape()
    randomize_params(net, seed, bn_scale_factor=1.0)
    weights = os.path.join(d, name + ".caffemodel")
    net.save(weights)
    return net, weights


def convert(tool, venv, proto, weights, d, name):
    """The ONNX file ``tool`` makes (or None and its error's last lines)."""
    out = os.path.join(d, "%s_%s.onnx" % (name, tool))
    work = tempfile.mkdtemp(dir=d)
    if tool == "caffe2onnx":
        cmd = [os.path.join(venv, "bin", "python"), "-m", "caffe2onnx.convert", "--prototxt", proto,
               "--caffemodel", weights, "--onnx", out]
    else:
        cmd = [os.path.join(venv, "bin", "mmconvert"), "-sf", "caffe", "-in", proto, "-iw", weights, "-df", "onnx",
               "-om", out]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0 or not os.path.isfile(out):
        return None, " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:]), time.perf_counter() - t0
    return out, None, time.perf_counter() - t0


def strip_names(path):
    """The port with every tensor renamed t0, t1, ... and no node names (what held-out checks
    compare, matching by value and topology alone), saved beside it."""
    import onnx

    from engine.ports.onnx_port import strip_tensor_names
    out = path.replace(".onnx", "_stripped.onnx")
    onnx.save(strip_tensor_names(onnx.load(path)), out)
    return out


def summarize(r, seconds):
    fused = [row for row in r.rows if "fused" in row.note]
    bn_rows = [row for row in r.rows if row.type == "Scale" and len(row.group) > 1]
    return {
        "faithful": r.faithful,
        "first_departing": r.first_departing,
        "message": r.message,
        "matching": r.matching,
        "fused_named_rows": len(fused),
        "batchnorm_scale_rows_checked": sum(1 for row in bn_rows if row.own_rel is not None),
        "input_layouts": [lay["text"] for lay in r.input_layouts],
        "notes": r.notes,
        "diagnosis": [{"layer": d.layer, "kind": d.kind, "text": d.text} for d in r.diagnosis],
        "output_rel": [o["rel"] for o in r.outputs],
        "small_rows": sum(1 for row in r.rows if row.status == "small"),
        "departing_rows": sum(1 for row in r.rows if row.status in ("departs", "shape")),
        "seconds": round(seconds, 1),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default="resnet50,resnet_tiny", help="of: %s" % ", ".join(NETS))
    ap.add_argument("--tools", default="caffe2onnx,mmdnn")
    ap.add_argument("--venv", default="/work/venv-conv", help="the converters' virtual environment")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--strip", action="store_true", help="also compare each port with its tensor names stripped")
    args = ap.parse_args(argv)
    d = args.dir or tempfile.mkdtemp(prefix="ports_converters_")
    os.makedirs(d, exist_ok=True)
    results = {}
    for name in args.nets.split(","):
        proto = NETS[name](d)
        if not os.path.isfile(proto):
            print("%s: %s missing, skipped" % (name, proto))
            continue
        net, weights = build(proto, d, name)
        for tool in args.tools.split(","):
            path, error, conv_s = convert(tool, args.venv, proto, weights, d, name)
            key = "%s/%s" % (name, tool)
            if path is None:
                results[key] = {"converted": False, "error": error}
                print("%-24s %s did not convert: %s" % (key, tool, error))
                continue
            for stripped in (False, True) if args.strip else (False,):
                compare_one(net, strip_names(path) if stripped else path, key + (" stripped" if stripped else ""),
                            conv_s, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


def compare_one(net, path, key, conv_s, results):
    """compare-port on one port file; its summary into ``results[key]``, printed."""
    from engine.ports.compare import compare_port
    t0 = time.perf_counter()
    try:
        r = compare_port(net, path)
    except Exception as e:             # a port compare-port cannot take: say so, go on
        results[key] = {"converted": True, "error": "%s: %s" % (type(e).__name__, e)}
        print("%-24s compare-port: %s" % (key, results[key]["error"]))
        return
    s = summarize(r, time.perf_counter() - t0)
    s["convert_seconds"] = round(conv_s, 1)
    results[key] = s
    print("%-24s %s" % (key, r.message))
    print("    matched %(input)d input, %(name)d by name, %(topology)d by topology, %(unmatched)d unmatched "
          "of %(values)d" % r.matching)
    print("    %d rows say a node fused BatchNorm+Scale; %d BatchNorm+Scale values checked; %d small, "
          "%d departing rows; compared in %.1f s" % (s["fused_named_rows"], s["batchnorm_scale_rows_checked"],
                                                      s["small_rows"], s["departing_rows"], s["seconds"]))
    for t in s["input_layouts"] + ["note: " + n for n in s["notes"]]:
        print("    " + t)
    for dg in r.diagnosis[:6]:
        print("    diagnosis %s: %s" % (dg.layer, dg.text))


if __name__ == "__main__":
    main()
