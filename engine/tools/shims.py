"""``python -m engine build-shims [CAFFE_ROOT]``: Caffe's ``build/`` layout with the engine
in it, so that Caffe's tutorials' shell scripts run as written.

The scripts call Caffe's tools by paths relative to Caffe's root
(``./build/tools/caffe train --solver=examples/mnist/lenet_solver.prototxt``,
``$BUILD/convert_mnist_data.bin``, ``./build/tools/compute_image_mean``), not by names on
PATH, so a console script named ``caffe`` would not reach them (and would shadow a real
Caffe on PATH).  This writes, under CAFFE_ROOT (default: the current directory, a checkout
of BVLC/caffe with no build of its own), one small Python script per tool at the path the
scripts use; each runs the engine's command of that name with this interpreter, and its
``--help`` names itself.  A file already there that is not one of these shims (a real
Caffe build) is left alone and named.
"""
import os
import sys

MARK = "# engine build shim"

# path under the root -> (the engine's command, or None for caffe itself)
SHIMS = {
    "build/tools/caffe": None,
    "build/tools/compute_image_mean": "compute_image_mean",
    "build/tools/convert_imageset": "convert_imageset",
    "build/tools/extract_features": "extract_features",
    "build/tools/upgrade_net_proto_text": "upgrade_net_proto_text",
    "build/tools/upgrade_net_proto_binary": "upgrade_net_proto_binary",
    "build/tools/upgrade_solver_proto_text": "upgrade_solver_proto_text",
    "build/examples/mnist/convert_mnist_data.bin": "convert_mnist_data",
    "build/examples/cifar10/convert_cifar_data.bin": "convert_cifar_data",
    "build/examples/siamese/convert_mnist_siamese_data.bin": "convert_mnist_siamese_data",
}


def engine_root():
    """The folder that holds the ``engine`` package (a checkout, or site-packages)."""
    import engine
    return os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))


def shim_text(command, python=None, root=None):
    """The script for ``command`` (None: the whole ``caffe`` command line)."""
    python = python or sys.executable
    root = root or engine_root()
    lines = ["#!%s" % python, "%s: runs the engine's `%s` (python -m engine build-shims wrote it)"
             % (MARK, command or "caffe"),
             "import os", "import sys", "",
             "sys.path.insert(0, %r)" % root,
             "from engine.tools.cli import main  # noqa: E402", "",
             "sys.exit(main(prog=os.path.basename(sys.argv[0]), command=%r))" % command, ""]
    return "\n".join(lines)


def is_shim(path):
    try:
        with open(path, "rb") as f:
            return MARK.encode() in f.read(4096)
    except OSError:
        return False


def write_shims(caffe_root=".", python=None):
    """Write every shim under ``caffe_root``; returns ``(written, kept)``: the paths written
    and those left alone because something else (a real build) is there."""
    written, kept = [], []
    for rel, command in SHIMS.items():
        path = os.path.join(caffe_root, rel)
        if os.path.lexists(path) and not is_shim(path):
            kept.append(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(shim_text(command, python))
        os.chmod(path, 0o755)
        written.append(path)
    return written, kept


def cmd_build_shims(args, out, err):
    written, kept = write_shims(args.caffe_root)
    for path in written:
        out.write("wrote %s\n" % path)
    for path in kept:
        err.write("kept %s: not an engine shim (a real Caffe build?); left as it is\n" % path)
    out.write("Caffe's tutorial scripts run from %s now call the engine (e.g. ./examples/mnist/create_mnist.sh)\n"
              % os.path.abspath(args.caffe_root))
    return 0


def add_parser(sub):
    p = sub.add_parser("build-shims", help="write Caffe's build/ layout (build/tools/caffe, "
                       "build/examples/mnist/convert_mnist_data.bin, ...) running the engine, so Caffe's tutorial "
                       "scripts run as written")
    p.add_argument("caffe_root", nargs="?", default=".", metavar="CAFFE_ROOT",
                   help="a checkout of BVLC/caffe (default: the current directory)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_build_shims, log_default=False)
