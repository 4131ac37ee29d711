"""Where layers draw from Caffe's stream, and in which order: the data layers'
seeds (DataTransformer::InitRand twice, prefetch_rng_, the prefetch thread's seed),
crop offsets and mirror flips, ImageData's shuffles, WindowData's samples, Dropout's
masks; and the draws Caffe does not take from its stream (HDF5Data, stochastic pooling)."""
import numpy as np
import pytest

from engine.core import backend, rng
from engine.core.blob import Blob
from engine.core.errors import LayerError
from engine.core.io import array_to_datum
from tests import rng_reference as ref
from tests.layers.helpers import empty_blobs, make_layer

lmdb = pytest.importorskip("lmdb")
h5py = pytest.importorskip("h5py")
Image = pytest.importorskip("PIL.Image")

F32 = np.float32


def _raw(seed, n):
    eng = ref.MT19937(seed)
    return [eng() for _ in range(n)]


@pytest.fixture
def images():
    return np.random.default_rng(0).integers(0, 256, (6, 3, 5, 4), dtype=np.uint8)


@pytest.fixture
def datum_lmdb(tmp_path, images):
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, a in enumerate(images):
            txn.put(b"%08d" % i, array_to_datum(a, i).SerializeToString())
    env.close()
    return str(tmp_path / "db")


def _data_layer(source, extra="", phase="TRAIN", batch=4):
    return make_layer('name: "d" type: "Data" data_param { source: "%s" batch_size: %d backend: LMDB } %s'
                      % (source, batch, extra), phase=phase, dtype=F32)


def test_data_layer_seeds_in_caffes_order(datum_lmdb):
    # InitRand (BaseDataLayer), InitRand again (BasePrefetchingDataLayer), the thread's seed.
    rng.set_random_seed(5)
    layer = _data_layer(datum_lmdb, "transform_param { mirror: true }")
    layer.SetUp([], empty_blobs(2, F32))
    assert rng.caffe_rng().position == 3
    assert layer.transformer._rng.seed == _raw(5, 3)[1]
    layer.close()
    rng.set_random_seed(5)
    layer = _data_layer(datum_lmdb, "transform_param { crop_size: 3 }", phase="TEST")
    layer.SetUp([], empty_blobs(2, F32))
    assert rng.caffe_rng().position == 1       # no transformer stream in TEST without mirror
    layer.close()


def test_data_layer_crops_and_mirrors_with_the_transformers_stream(datum_lmdb, images):
    rng.set_random_seed(9)
    layer = _data_layer(datum_lmdb, "transform_param { mirror: true crop_size: 3 }", batch=6)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    layer.Forward([], top)
    eng = ref.MT19937(_raw(9, 2)[1])
    flips = []
    for k in range(6):
        mirror = eng() % 2                      # Rand(2) first, then the offsets
        h, w = eng() % 3, eng() % 2
        want = images[k][:, h:h + 3, w:w + 3]
        np.testing.assert_array_equal(top[0].data[k], want[:, :, ::-1] if mirror else want)
        flips.append(mirror)
    assert 0 < sum(flips) < 6
    layer.close()


def test_data_layer_ignores_rand_skip_as_caffe_1_0(datum_lmdb):
    rng.set_random_seed(5)
    layer = _data_layer(datum_lmdb, "data_param { rand_skip: 5 }")
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[1].data, [0, 1, 2, 3])
    assert rng.caffe_rng().position == 1       # the thread's seed only
    layer.close()


@pytest.fixture
def image_list(tmp_path):
    lines = []
    for i in range(7):
        Image.fromarray(np.full((4, 5, 3), i * 10, np.uint8)).save(tmp_path / ("im%d.png" % i))
        lines.append("im%d.png %d" % (i, i))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "list.txt"), str(tmp_path) + "/"


def test_image_data_shuffles_with_its_prefetch_rng(image_list):
    src, root = image_list
    rng.set_random_seed(13)
    layer = make_layer('name: "img" type: "ImageData" image_data_param { source: "%s" root_folder: "%s" '
                       'batch_size: 7 shuffle: true rand_skip: 4 }' % (src, root), dtype=F32)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    raw = _raw(13, 3)           # prefetch_rng_'s seed, rand_skip's draw, the thread's seed
    assert rng.caffe_rng().position == 3
    eng = ref.MT19937(raw[0])
    order = ref.shuffle(range(7), eng)
    skip = raw[1] % 4
    layer.Forward([], top)
    first = order[skip:]
    order = ref.shuffle(order, eng)             # reshuffled when the list wraps
    first += order[:skip]
    np.testing.assert_array_equal(top[1].data, first)
    np.testing.assert_array_equal(top[0].data[:, 0, 0, 0], np.array(first) * 10)
    layer.close()


def _window_file(tmp_path):
    Image.fromarray(np.random.default_rng(9).integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(
        tmp_path / "w.png")
    wf = tmp_path / "windows.txt"
    wf.write_text("# 0\n%s\n3\n20\n24\n4\n1 0.9 2 3 10 12\n2 0.8 0 0 23 19\n3 0.7 1 1 9 9\n"
                  "0 0.1 5 5 15 15\n" % (tmp_path / "w.png"))
    return wf


def test_window_data_samples_with_its_prefetch_rng(tmp_path):
    wf = _window_file(tmp_path)
    rng.set_random_seed(4)
    layer = make_layer('type: "WindowData" window_data_param { source: "%s" batch_size: 10 '
                       'fg_fraction: 1 } transform_param { crop_size: 4 mirror: true }' % wf, dtype=F32)
    top = empty_blobs(2, F32)
    layer.SetUp([], top)
    # InitRand, prefetch_rng_'s seed, InitRand again, the thread's seed.
    assert rng.caffe_rng().position == 4
    eng = ref.MT19937(_raw(4, 2)[1])
    labels = []
    for _ in range(10):
        labels.append((1, 2, 3)[eng() % 3])
        eng()                                   # the mirror coin
    layer.Forward([], top)
    np.testing.assert_array_equal(top[1].data, labels)
    layer.close()


def test_hdf5_data_leaves_caffes_stream_alone_and_says_so(tmp_path, caplog):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as h:
        h["data"] = np.arange(20, dtype=np.float32).reshape(10, 2)
        h["label"] = np.arange(10, dtype=np.float32)
    (tmp_path / "list.txt").write_text(str(path) + "\n")
    rng.set_random_seed(2)
    layer = make_layer('name: "h5" type: "HDF5Data" top: "data" top: "label" '
                       'hdf5_data_param { source: "%s" batch_size: 4 shuffle: true }' % (tmp_path / "list.txt"))
    top = empty_blobs(2)
    with caplog.at_level("WARNING", logger="engine.core.rng"):
        layer.SetUp([], top)
        for _ in range(4):
            layer.Forward([], top)
    assert rng.caffe_rng().position == 0
    assert ["HDF5Data layer 'h5' shuffles (Caffe uses std::random_shuffle): a seeded run cannot "
            "reproduce Caffe's draws here (docs/rng.md)."] == [r.getMessage() for r in caplog.records
                                                               if r.name == "engine.core.rng"]


def test_dropout_mask_is_bernoulli_in_double():
    rng.set_random_seed(31)
    layer = make_layer('name: "drop" type: "Dropout" dropout_param { dropout_ratio: 0.3 }', dtype=F32)
    bottom, top = Blob((6, 50), F32), Blob(dtype=F32)
    bottom.data[...] = 1
    layer.SetUp([bottom], [top])
    layer.Forward([bottom], [top])
    eng = ref.MT19937(31)
    p = 1.0 - float(np.float32(0.3))           # 1. - threshold_, threshold_ a float
    keep = np.array([ref.bernoulli(eng, p, ref.f64) for _ in range(300)])
    scale = np.float32(1.0 / p)
    np.testing.assert_array_equal(top.data.ravel(), np.where(keep, scale, np.float32(0)))
    assert rng.caffe_rng().position == 300
    layer.Forward([bottom], [top])              # a new mask each forward
    assert rng.caffe_rng().position == 600


def test_dropout_test_phase_and_bad_ratio():
    rng.set_random_seed(31)
    layer = make_layer('type: "Dropout" dropout_param { dropout_ratio: 0.3 }', phase="TEST", dtype=F32)
    bottom, top = Blob((2, 3), F32), Blob(dtype=F32)
    layer.SetUp([bottom], [top])
    layer.Forward([bottom], [top])
    assert rng.caffe_rng().position == 0
    layer = make_layer('name: "d" type: "Dropout" dropout_param { dropout_ratio: 1.5 }', dtype=F32)
    layer.SetUp([bottom], [top])
    with pytest.raises(LayerError, match=r"Check failed: p >= 0 \(-0.5 vs. 0\)"):
        layer.Forward([bottom], [top])


def test_sparse_gaussian_beyond_num_output_fails_as_caffe():
    from engine.core.fillers import fill
    from engine.proto import caffe_pb2
    with pytest.raises(LayerError, match=r"Check failed: p <= 1 \(1.5 vs. 1\)"):
        fill(Blob((2, 3), F32), caffe_pb2.FillerParameter(type="gaussian", sparse=3))


def test_stochastic_pooling_says_it_cannot_match(caplog):
    backend.set_mode_cpu()
    rng.set_random_seed(1)
    layer = make_layer('name: "sp" type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 2 }')
    bottom, top = Blob((1, 1, 4, 4)), Blob()
    bottom.data[...] = 1
    layer.SetUp([bottom], [top])
    with caplog.at_level("WARNING", logger="engine.core.rng"):
        layer.Forward([bottom], [top])
    assert any("Pooling layer 'sp'" in r.getMessage() for r in caplog.records)
    assert rng.caffe_rng().position == 0


def test_dropout_on_the_gpu_says_it_cannot_match(monkeypatch, caplog):
    # Caffe's GPU mask comes from cuRAND: the engine's (CuPy's) cannot follow it, and says so;
    # Caffe's CPU stream is left alone.  (The GPU is stood in for by NumPy here.)
    rng.set_random_seed(1)
    layer = make_layer('name: "drop" type: "Dropout" dropout_param { dropout_ratio: 0.5 }', dtype=F32)
    layer.SetUp([Blob((40, 50), F32)], [Blob(dtype=F32)])
    monkeypatch.setattr(backend, "mode", lambda: backend.GPU)
    monkeypatch.setattr(backend, "random_module", lambda: np.random.default_rng(0))
    with caplog.at_level("WARNING", logger="engine.core.rng"):
        keep = layer._keep((40, 50))
        layer._keep((40, 50))
    assert 0.4 < keep.mean() < 0.6 and rng.caffe_rng().position == 0
    assert [r.getMessage() for r in caplog.records if r.name == "engine.core.rng"] == [
        "Dropout layer 'drop' on the GPU (Caffe draws the mask from cuRAND): a seeded run cannot "
        "reproduce Caffe's draws here (docs/rng.md)."]
