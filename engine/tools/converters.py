"""Caffe's example converters (examples/*/convert_*.cpp of BVLC Caffe 1.0 master), writing
the databases Caffe's tutorials train from, key for key and byte for byte:

    convert_mnist_data(images, labels, db_path, backend="lmdb")
        examples/mnist: IDX files (as downloaded, gzip or not) -> Datums 1 x rows x cols,
        keys %08d in file order, committed every 1000.
    convert_cifar_data(input_folder, output_folder, db_type="lmdb")
        examples/cifar10: data_batch_1..5.bin -> OUTPUT/cifar10_train_<db_type> (keys
        %05d, 0..49999), test_batch.bin -> OUTPUT/cifar10_test_<db_type>; Datums 3 x 32 x 32.
    convert_mnist_siamese_data(images, labels, db_path, seed=None)
        examples/siamese: one pair per item, both picked by caffe_rng_rand() % num_items,
        as a 2 x rows x cols Datum, label 1 when the two labels agree; a LevelDB.

Each logs the converter's own lines ("A total of 60000 items.", "Rows: 28 Cols: 28",
"Processed 60000 files.", "Writing Training data", "Training Batch 1", ...) on the
``engine.tools`` logger, and returns the converter's exit status.  What Caffe stops on with
a CHECK failure raises :class:`~engine.tools.caffe_tools.ToolError` with Caffe's text and
the file it is about; input files too short for what their headers count (where Caffe's
reads would fail and write whatever its buffers held) are refused before any database is
made.

The siamese pairs: Caffe draws them from its global generator, which it never seeds there
(``cluster_seedgen()`` reads /dev/urandom), so two runs of Caffe pair differently; so do
two runs here.  ``seed=S`` pairs as Caffe does when that generator starts from S (the low
32 bits of the 8 bytes it reads), which is how the tests compare with real Caffe.
"""
import gzip
import logging

import numpy as np

from engine.core import db
from engine.core.errors import DBError
from engine.core.log import check_failed
from engine.proto import caffe_pb2
from engine.tools.caffe_tools import ToolError

log = logging.getLogger("engine.tools")

IDX_IMAGES, IDX_LABELS = 2051, 2049          # the IDX magics convert_mnist_data checks
CIFAR_SIZE, CIFAR_IMAGE_BYTES = 32, 3072
CIFAR_BATCH, CIFAR_TRAIN_BATCHES = 10000, 5
MNIST_COMMIT, LOG_EVERY = 1000, 1000


# =========================================================================== IDX files
class IdxFile:
    """An IDX file as convert_mnist_data reads it: the big-endian header words after the
    magic (``dims``: items, then rows and cols for images) and the bytes after them."""

    def __init__(self, path, magic, dims, body):
        self.path, self.magic, self.dims, self.body = path, magic, dims, body

    @property
    def count(self):
        return self.dims[0]


def _open_bytes(path, what):
    """The whole file, gunzipped when it is gzip (its first two bytes 1f 8b)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ToolError(check_failed(what, message="Unable to open file %s (%s)" % (path, e.strerror or e))) \
            from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ToolError("%s: not a readable gzip file: %s" % (path, e)) from None
    return raw


def read_idx(path, magic, what, ndims):
    """The IDX file at ``path`` with its magic checked as Caffe checks it (``what``: the
    ifstream's name in Caffe's CHECK, image_file or label_file) and ``ndims`` header words."""
    raw = _open_bytes(path, what)
    head = 4 * (1 + ndims)
    if len(raw) < head:
        raise ToolError("%s: %d bytes, too short for an IDX header (%d bytes: the magic and %d sizes)"
                        % (path, len(raw), head, ndims))
    words = np.frombuffer(raw[:head], ">u4").tolist()
    if words[0] != magic:
        kind = "image" if magic == IDX_IMAGES else "label"
        raise ToolError(check_failed("magic == %d" % magic, words[0], magic,
                                     "Incorrect %s file magic. (%s)" % (kind, path)))
    return IdxFile(path, words[0], words[1:], memoryview(raw)[head:])


def read_mnist(images, labels):
    """``(image IdxFile, label IdxFile, rows, cols)`` with convert_mnist_data's checks, and
    the bodies checked to hold every item their headers count."""
    img = read_idx(images, IDX_IMAGES, "image_file", 3)
    lab = read_idx(labels, IDX_LABELS, "label_file", 1)
    if img.count != lab.count:
        raise ToolError(check_failed("num_items == num_labels", img.count, lab.count,
                                     "(%s, %s)" % (images, labels)))
    rows, cols = img.dims[1], img.dims[2]
    _check_length(img, img.count * rows * cols, "%d images of %d x %d" % (img.count, rows, cols))
    _check_length(lab, lab.count, "%d labels" % lab.count)
    return img, lab, rows, cols


def _check_length(f, need, what):
    if len(f.body) < need:
        raise ToolError("%s: its header counts %s (%d bytes after the header) but the file holds %d: it is cut "
                        "short" % (f.path, what, need, len(f.body)))


def _labels(body, count):
    """The label bytes as Caffe's ``char`` (signed) holds them."""
    return np.frombuffer(body, np.int8, count).tolist()


def _datum(channels, height, width):
    return caffe_pb2.Datum(channels=channels, height=height, width=width)


# =========================================================================== MNIST
def convert_mnist_data(images, labels, db_path, backend="lmdb"):
    """examples/mnist/convert_mnist_data: the images and labels of two IDX files as
    1 x rows x cols Datums in a new database ``db_path`` (keys ``%08d``).  Returns 0."""
    img, lab, rows, cols = read_mnist(images, labels)
    name = db.backend_name(backend)
    out = db.open_db(db_path, name, db.NEW)
    try:
        txn = out.transaction()
        datum = _datum(1, rows, cols)
        n, size = img.count, rows * cols
        log.info("A total of %d items.", n)
        log.info("Rows: %d Cols: %d", rows, cols)
        label_values = _labels(lab.body, n)
        body = img.body
        count = 0
        for item in range(n):
            datum.data = bytes(body[item * size:(item + 1) * size])
            datum.label = label_values[item]
            txn.put("%08d" % item, datum.SerializeToString())
            count += 1
            if count % MNIST_COMMIT == 0:
                txn.commit()
        if count % MNIST_COMMIT != 0:
            txn.commit()
        log.info("Processed %d files.", count)
    finally:
        out.close()
    return 0


# =========================================================================== CIFAR-10
def cifar_batch_files(input_folder):
    """The five training batches and the test batch, named as convert_cifar_data names them."""
    train = [input_folder + "/data_batch_%d.bin" % (i + 1) for i in range(CIFAR_TRAIN_BATCHES)]
    return train, input_folder + "/test_batch.bin"


def _read_cifar_batch(path, missing):
    """A batch file's first 10,000 records as (labels, images bytes); ``missing``: Caffe's
    CHECK message when the file cannot be opened."""
    try:
        with open(path, "rb") as f:
            raw = f.read(CIFAR_BATCH * (1 + CIFAR_IMAGE_BYTES))
    except OSError as e:
        raise ToolError(check_failed("data_file", message="%s (%s: %s)" % (missing, path, e.strerror or e))) \
            from None
    need = CIFAR_BATCH * (1 + CIFAR_IMAGE_BYTES)
    if len(raw) < need:
        raise ToolError("%s: %d bytes, fewer than the %d records of a CIFAR-10 batch (%d bytes, 1 label byte and "
                        "3072 pixel bytes each): it is cut short" % (path, len(raw), CIFAR_BATCH, need))
    return np.frombuffer(raw, np.uint8).reshape(CIFAR_BATCH, 1 + CIFAR_IMAGE_BYTES)


def _write_cifar(txn, records, datum, first_key):
    labels = records[:, 0].view(np.int8).tolist()
    for item in range(CIFAR_BATCH):
        datum.label = labels[item]
        datum.data = records[item, 1:].tobytes()
        txn.put("%05d" % (first_key + item), datum.SerializeToString())


def convert_cifar_data(input_folder, output_folder, db_type="lmdb"):
    """examples/cifar10/convert_cifar_data: CIFAR-10's binary batches into
    ``OUTPUT/cifar10_train_<db_type>`` and ``OUTPUT/cifar10_test_<db_type>``.  Returns 0."""
    name = db.backend_name(db_type)
    train_files, test_file = cifar_batch_files(input_folder)
    batches = [_read_cifar_batch(p, "Unable to open train file #%d" % (i + 1)) for i, p in enumerate(train_files)]
    test = _read_cifar_batch(test_file, "Unable to open test file.")
    datum = _datum(3, CIFAR_SIZE, CIFAR_SIZE)
    out = db.open_db(output_folder + "/cifar10_train_" + name, name, db.NEW)
    try:
        txn = out.transaction()
        log.info("Writing Training data")
        for i, records in enumerate(batches):
            log.info("Training Batch %d", i + 1)
            _write_cifar(txn, records, datum, i * CIFAR_BATCH)
        txn.commit()
    finally:
        out.close()
    log.info("Writing Testing data")
    out = db.open_db(output_folder + "/cifar10_test_" + name, name, db.NEW)
    try:
        txn = out.transaction()
        _write_cifar(txn, test, datum, 0)
        txn.commit()
    finally:
        out.close()
    return 0


# =========================================================================== siamese MNIST
def siamese_pairs(num_items, seed=None):
    """The ``(i, j)`` index arrays Caffe's converter draws: for each item
    ``caffe_rng_rand() % num_items`` twice, from a generator started from ``seed`` (fresh
    entropy when None, as Caffe's unseeded one)."""
    from engine.core.rng import Stream
    if num_items == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    draws = Stream(seed).take(2 * num_items).astype(np.int64) % num_items
    return draws[0::2], draws[1::2]


def convert_mnist_siamese_data(images, labels, db_path, seed=None):
    """examples/siamese/convert_mnist_siamese_data: ``num_items`` random pairs of the IDX
    images as 2 x rows x cols Datums (label 1: the same digit) in a new LevelDB.  Returns 0."""
    img, lab, rows, cols = read_mnist(images, labels)
    try:
        out = db.open_db(db_path, "leveldb", db.NEW, log=False)
    except db.MissingLevelDB:
        raise
    except DBError as e:
        status = str(e).split("Failed to open leveldb %s: " % db_path, 1)[-1]     # leveldb's own words
        raise ToolError(check_failed("status.ok()", message="Failed to open leveldb %s. Is it already existing? (%s)"
                                     % (db_path, status))) from None
    try:
        n, size = img.count, rows * cols
        datum = _datum(2, rows, cols)
        log.info("A total of %d items.", n)
        log.info("Rows: %d Cols: %d", rows, cols)
        pixels = np.frombuffer(img.body, np.uint8, n * size).reshape(n, size) if n else None
        label_values = np.frombuffer(lab.body, np.int8, n)
        first, second = siamese_pairs(n, seed)
        same = (label_values[first] == label_values[second]).tolist()
        txn = out.transaction()
        for item in range(n):
            i, j = first[item], second[item]
            datum.data = pixels[i].tobytes() + pixels[j].tobytes()
            datum.label = 1 if same[item] else 0
            txn.put("%08d" % item, datum.SerializeToString())
            if (item + 1) % MNIST_COMMIT == 0:
                txn.commit()
        txn.commit()
    finally:
        out.close()
    return 0


# =========================================================================== the commands
def _cmd_mnist(args, out, err):
    return convert_mnist_data(args.images, args.labels, args.db, backend=args.backend)


def _cmd_cifar(args, out, err):
    from engine.tools.cli import UsageError
    db_type = args.db_type or args.backend or "lmdb"
    if args.db_type and args.backend and args.db_type != args.backend:
        raise UsageError("convert_cifar_data: db_type %r and --backend %r disagree" % (args.db_type, args.backend))
    return convert_cifar_data(args.input_folder, args.output_folder, db_type)


def _cmd_siamese(args, out, err):
    return convert_mnist_siamese_data(args.images, args.labels, args.db, seed=args.seed)


def add_parsers(sub):
    """The converters' commands, with Caffe's arguments (gflags spellings via the shared parser)."""
    from engine.tools.cli import _log_flags
    p = sub.add_parser("convert_mnist_data", help="Caffe's examples/mnist converter: MNIST's IDX files (gzip or "
                       "not) into an LMDB or LevelDB of Datums")
    p.add_argument("images", metavar="input_image_file", help="the IDX images (train-images-idx3-ubyte[.gz])")
    p.add_argument("labels", metavar="input_label_file", help="the IDX labels (train-labels-idx1-ubyte[.gz])")
    p.add_argument("db", metavar="output_db_file", help="the database to create (must not exist)")
    p.add_argument("--backend", default="lmdb", help="The backend for storing the result: lmdb (default) or leveldb")
    _log_flags(p)
    p.set_defaults(func=_cmd_mnist, log_default=True)

    p = sub.add_parser("convert_cifar_data", help="Caffe's examples/cifar10 converter: CIFAR-10's binary batches "
                       "into cifar10_train_<db_type> and cifar10_test_<db_type>")
    p.add_argument("input_folder", help="the folder holding data_batch_1.bin .. data_batch_5.bin and test_batch.bin")
    p.add_argument("output_folder", help="where the two databases are made")
    p.add_argument("db_type", nargs="?", help="lmdb (default) or leveldb")
    p.add_argument("--backend", help="the same as db_type")
    _log_flags(p)
    p.set_defaults(func=_cmd_cifar, log_default=True)

    p = sub.add_parser("convert_mnist_siamese_data", help="Caffe's examples/siamese converter: random pairs of MNIST "
                       "images (IDX, gzip or not) into a LevelDB of 2-channel Datums")
    p.add_argument("images", metavar="input_image_file")
    p.add_argument("labels", metavar="input_label_file")
    p.add_argument("db", metavar="output_db_file", help="the LevelDB to create (must not exist)")
    p.add_argument("--seed", type=int, help="start the pair generator from this seed, as Caffe's would start from "
                   "it (default: fresh entropy, as Caffe: each run pairs differently)")
    _log_flags(p)
    p.set_defaults(func=_cmd_siamese, log_default=True)

