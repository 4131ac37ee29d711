#!/usr/bin/env python3
"""Run real Caffe's example converters on inputs.py's files and write expected.json (what
tests/tools/test_converters.py compares the engine's converters with).

    python tests/data/caffe_converters/record.py --caffe-root /work/caffe

Needs a built BVLC Caffe (its build/examples/{mnist,cifar10,siamese}/*.bin), gcc (for
seed_shim.c) and plyvel (to read the LevelDBs).  Nothing of Caffe's is kept: only counts,
digests, the first records, the siamese pairs and the converters' log messages.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from engine.core.db import read_records  # noqa: E402
from tests.data.caffe_converters import inputs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SIAMESE_SEED = 20261207
HEAD = 3
PAIRS = 40
_GLOG = re.compile(r"^[IWEF]\d{4,8} [\d:.]+\s+\d+ [^\]]+\] (.*)$")     # glog's prefix, with or without the year


def messages(text, tmp):
    """glog lines' messages, with the scratch folder written as ``TMP``."""
    return [m.group(1).replace(tmp, "TMP") for m in map(_GLOG.match, text.splitlines()) if m]


def run(argv, tmp, env=None):
    res = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, GLOG_logtostderr="1",
                                                                          **(env or {})))
    if res.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (argv[0], res.returncode, res.stderr))
    return messages(res.stderr, tmp)


def summary(path, backend, log=None, head=HEAD):
    recs = read_records(path, backend)
    out = {"count": len(recs), "digest": inputs.records_digest(recs),
           "head": [[k.decode(), v.hex()] for k, v in recs[:head]], "last": [recs[-1][0].decode(), recs[-1][1].hex()]}
    if log is not None:
        out["log"] = log
    return out, recs


def siamese_pairs(recs, images):
    """The (i, j) of each record, found from its two images."""
    index = {images[i].tobytes(): i for i in range(len(images))}
    size = images.shape[1] * images.shape[2]
    pairs = []
    for _, value in recs:
        from engine.proto import caffe_pb2
        d = caffe_pb2.Datum()
        d.ParseFromString(value)
        pairs.append([index[d.data[:size]], index[d.data[size:]]])
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--caffe-root", default="/work/caffe")
    ap.add_argument("--output", default=os.path.join(HERE, "expected.json"))
    args = ap.parse_args()
    ex = os.path.join(args.caffe_root, "build", "examples")
    mnist = os.path.join(ex, "mnist", "convert_mnist_data.bin")
    cifar = os.path.join(ex, "cifar10", "convert_cifar_data.bin")
    siamese = os.path.join(ex, "siamese", "convert_mnist_siamese_data.bin")
    ap_ready = os.path.join(args.caffe_root, "READY")
    ready = open(ap_ready).read().strip().splitlines()[:1] if os.path.exists(ap_ready) else []
    out = {"caffe": {"root": args.caffe_root, "ready": ready[0] if ready else ""}, "siamese_seed": SIAMESE_SEED}
    with tempfile.TemporaryDirectory() as tmp:
        images, labels = inputs.write_mnist(tmp)
        for backend in ("lmdb", "leveldb"):
            db = os.path.join(tmp, "mnist_" + backend)
            log = run([mnist, images, labels, db, "--backend=" + backend], tmp)
            out["mnist_" + backend], _ = summary(db, backend, log)
        os.mkdir(os.path.join(tmp, "cifar"))
        inputs.write_cifar(os.path.join(tmp, "cifar"))
        for backend in ("lmdb", "leveldb"):
            log = run([cifar, os.path.join(tmp, "cifar"), tmp, backend], tmp)
            out["cifar_log_" + backend] = log
            for part in ("train", "test"):
                db = os.path.join(tmp, "cifar10_%s_%s" % (part, backend))
                out["cifar_%s_%s" % (part, backend)], _ = summary(db, backend, head=1)
        shim = os.path.join(tmp, "seed_shim.so")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", shim, os.path.join(HERE, "seed_shim.c"), "-ldl"],
                       check=True)
        seed_file = os.path.join(tmp, "seed")
        with open(seed_file, "wb") as f:
            f.write(SIAMESE_SEED.to_bytes(8, "little"))
        db = os.path.join(tmp, "siamese")
        log = run([siamese, images, labels, db], tmp, env={"LD_PRELOAD": shim, "SEED_SHIM_FILE": seed_file})
        out["siamese_leveldb"], recs = summary(db, "leveldb", log)
        out["siamese_leveldb"]["pairs"] = siamese_pairs(recs, inputs.mnist_arrays()[0])[:PAIRS]
        out["siamese_leveldb"]["same_label"] = sum(1 for _, v in recs if v.endswith(b"(\x01"))
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", args.output)


if __name__ == "__main__":
    main()
