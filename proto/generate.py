"""Regenerate engine/proto/caffe_pb2.py (and its .pyi stub) from proto/caffe.proto.

Usage (from anywhere):

    python proto/generate.py              # rewrite engine/proto/caffe_pb2.py and .pyi
    python proto/generate.py --out DIR    # write them into DIR instead
    python proto/generate.py --check      # exit 1 if the committed files are stale

Runs the protoc bundled with grpcio-tools (pure --python_out/--pyi_out, no gRPC
stubs), so the output depends only on caffe.proto and the grpcio-tools version.
"""

import argparse
import filecmp
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "engine", "proto")
PROTO = "caffe.proto"
OUTPUTS = ("caffe_pb2.py", "caffe_pb2.pyi")


def generate(out_dir):
    """Run protoc on proto/caffe.proto, writing caffe_pb2.py/.pyi into out_dir."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("grpcio-tools is required: pip install grpcio-tools") from exc
    os.makedirs(out_dir, exist_ok=True)
    args = [
        "protoc",
        "--proto_path=" + HERE,
        "--python_out=" + out_dir,
        "--pyi_out=" + out_dir,
        os.path.join(HERE, PROTO),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit("protoc failed with exit status %d" % rc)
    return [os.path.join(out_dir, name) for name in OUTPUTS]


def check():
    """Return the names of committed outputs that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        return [
            name for name in OUTPUTS
            if not os.path.exists(os.path.join(OUT, name))
            or not filecmp.cmp(os.path.join(tmp, name), os.path.join(OUT, name),
                               shallow=False)
        ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT, help="output folder (default: engine/proto/)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed files instead of writing")
    opts = parser.parse_args(argv)
    if opts.check:
        stale = check()
        if stale:
            print("stale: %s (run python proto/generate.py)" % ", ".join(stale))
            return 1
        print("proto/caffe_pb2 is current")
        return 0
    for path in generate(opts.out):
        print("wrote", os.path.relpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
