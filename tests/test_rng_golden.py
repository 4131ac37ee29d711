"""Seeded runs against what real Caffe 1.0 drew (../shared/golden/rng): fillers, Dropout
masks, DummyData refills and Init order bit for bit (forward outputs, which are arithmetic, to
float32 rounding); a seeded SGD run with Dropout.
Each runs on the compiled draws (every draw, however small) and on the NumPy code."""
import json
import re
import tempfile

import numpy as np
import pytest

import engine
from tests import rng_reference as ref
from tests.conftest import SHARED

GOLDEN = SHARED / "golden" / "rng"


@pytest.fixture(autouse=True, params=ref.PATHS)
def path(request, monkeypatch):
    return ref.use_path(request.param, monkeypatch)


def _cases(kinds):
    try:
        index = json.loads((GOLDEN / "index.json").read_text())
    except OSError:
        return [pytest.param(None, id="no-shared")]
    return [pytest.param(c, id="%s-seed%d" % (c["name"], s))
            for c in index if c["kind"] in kinds for s in c["seeds"]]


def _seed_of(request):
    return int(re.search(r"-seed(\d+)", request.node.callspec.id).group(1))


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, "%s: shape %s, Caffe %s" % (what, got.shape, want.shape)
    bad = np.flatnonzero(_bits(got) != _bits(want))
    assert not len(bad), "%s: %d of %d values differ from Caffe's, first at %d: %r vs %r" % (
        what, len(bad), want.size, bad[0], got.ravel()[bad[0]], want.ravel()[bad[0]])


@pytest.mark.parametrize("case", _cases(("init", "forward")))
def test_seeded_net_draws_what_caffe_drew(shared_dir, case, request):
    seed = _seed_of(request)
    golden = np.load(GOLDEN / (case["name"] + ".npz"))
    engine.set_mode_cpu()
    engine.set_random_seed(seed)
    net = engine.Net(str(GOLDEN / case["prototxt"]), engine.TRAIN)
    prefix = "seed%d/" % seed
    for key in golden.files:
        parts = key.split("/")
        if key.startswith(prefix) and parts[1] == "param":
            _same_bits(net.params[parts[2]][int(parts[3])].data, golden[key], key)
    if "x" in net.blobs:
        x = net.blobs["x"]
        x.data[...] = ((np.arange(x.count) % 17) / 4 + 0.5).reshape(x.data.shape)
    for k in range(case.get("forwards", 0)):
        net.forward()
        for top in case.get("tops", []):
            key = "%sforward%d/%s" % (prefix, k, top)
            if key in golden.files:
                # Arithmetic, not a draw: float32 rounding of the GEMMs' summation order
                # (a wrong Dropout mask or filler would be off by O(1)).
                got, want = net.blobs[top].data, golden[key]
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * float(np.abs(want).max()),
                                           err_msg=key)


@pytest.mark.parametrize("case", _cases(("solver",)))
def test_seeded_solver_follows_caffe(shared_dir, case, request):
    seed = _seed_of(request)
    golden = np.load(GOLDEN / (case["name"] + ".npz"))
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
        f.write('net: "%s"\n%s\n' % (GOLDEN / case["prototxt"], case["solver"]))
    engine.set_mode_cpu()
    engine.set_random_seed(seed + 1000)         # the solver's random_seed must win
    solver = engine.get_solver(f.name)
    net = solver.net

    def params(stage):
        prefix = "seed%d/%s/param/" % (seed, stage)
        return [(k, k[len(prefix):].split("/")) for k in golden.files if k.startswith(prefix)]

    for key, (layer, i) in params("init"):
        _same_bits(net.params[layer][int(i)].data, golden[key], key)
    for step in range(case["steps"]):
        solver.step(1)
        loss = golden["seed%d/step%d/loss" % (seed, step)]
        if step == 0:
            # The first forward's draws (DummyData's gaussians, Dropout's mask) exactly.
            _same_bits(net.blobs["loss"].data, loss, "step0/loss")
        # Later steps follow Caffe to float rounding (BLAS sums in its own order); a
        # different Dropout mask or DummyData draw would be off by far more.
        np.testing.assert_allclose(net.blobs["loss"].data, loss, rtol=1e-6, err_msg="step%d" % step)
        for key, (layer, i) in params("step%d" % step):
            np.testing.assert_allclose(net.params[layer][int(i)].data, golden[key], rtol=1e-5,
                                       atol=1e-7, err_msg=key)
