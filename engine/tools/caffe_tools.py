"""Caffe's companion tools (tools/*.cpp of BVLC Caffe 1.0 master), writing files
real Caffe reads:

    convert_imageset(root, listfile, db_name, gray=False, shuffle=False, backend="lmdb",
                     resize_width=0, resize_height=0, check_size=False, encoded=False,
                     encode_type="")
    compute_image_mean(input_db, output_file=None, backend="lmdb")
    extract_features(pretrained, proto, blob_names, dataset_names, num_mini_batches,
                     db_type, mode="CPU", device_id=None)
    upgrade_net_proto_text(src, dst) / upgrade_net_proto_binary(src, dst)
    upgrade_solver_proto_text(src, dst)
    device_query(gpu)

Each logs the tool's own lines (``Processed N files.``, ``Number of channels: 3``,
``Wrote upgraded NetParameter text proto to ...``) on the ``engine.tools`` logger
at the tool's own severity, and returns the tool's exit status; what Caffe stops on
with a CHECK failure raises one of the engine's errors with Caffe's text.
"""
import logging

import numpy as np

from engine.core import backend, db, images
from engine.core.errors import CaffeError, DeviceError, ParseError
from engine.core.log import check_failed, num
from engine.proto import caffe_pb2

log = logging.getLogger("engine.tools")


class ToolError(CaffeError):
    """A tool stopped where Caffe's stops with a CHECK failure or LOG(FATAL)."""


# =========================================================================== convert_imageset
def read_image_list(path):
    """convert_imageset's LISTFILE: one ``(name, label)`` per line, split at the last
    space, the label read as C's atoi reads it (as std::getline and find_last_of do:
    a line with no space is both the name and the label)."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        pos = line.rfind(" ")
        out.append((line[:pos] if pos >= 0 else line, _atoi(line[pos + 1:])))
    return out


def _atoi(text):
    """C's atoi: leading blanks, an optional sign, the digits that follow; 0 without any."""
    s = text.lstrip(" \t\n\v\f\r")
    sign, i = 1, 0
    if s[:1] in ("+", "-"):
        sign, i = (-1 if s[0] == "-" else 1), 1
    j = i
    while j < len(s) and "0" <= s[j] <= "9":
        j += 1
    return sign * int(s[i:j]) if j > i else 0


def _guess_encoding(name):
    """convert_imageset with -encoded and no -encode_type: the file's extension, lower case."""
    p = name.rfind(".")
    if p < 0:
        log.warning("Failed to guess the encoding of '%s'", name)
    return name[p + 1:].lower()


def convert_imageset(root, listfile, db_name, gray=False, shuffle=False, backend="lmdb", resize_width=0,
                     resize_height=0, check_size=False, encoded=False, encode_type="", seed=None):
    """Convert the images named in ``listfile`` (paths relative to ``root``, which is
    prefixed as written: give it its trailing slash) into Datums in a new database
    ``db_name``; keys are ``%08d_<name>`` in list order.  Returns 0."""
    images.check_opencv()
    is_color = not gray
    lines = read_image_list(listfile)
    if shuffle:
        log.info("Shuffling data")
        rng = np.random.default_rng(_seed(seed))
        lines = [lines[i] for i in rng.permutation(len(lines))]
    log.info("A total of %d images.", len(lines))
    if encode_type and not encoded:
        log.info("encode_type specified, assuming encoded=true.")
    resize_height, resize_width = max(0, int(resize_height)), max(0, int(resize_width))
    out = db.open_db(db_name, backend, db.NEW)
    try:
        txn = out.transaction()
        count = 0
        data_size = None
        for line_id, (name, label) in enumerate(lines):
            enc = encode_type
            if encoded and not enc:
                enc = _guess_encoding(name)
            datum = images.read_image_to_datum(root + name, label, resize_height, resize_width, is_color, enc)
            if datum is None:
                continue
            if check_size:
                if data_size is None:
                    data_size = datum.channels * datum.height * datum.width
                elif len(datum.data) != data_size:
                    raise ToolError(check_failed("data.size() == data_size", len(datum.data), data_size,
                                                 "Incorrect data field size %d (image %s)"
                                                 % (len(datum.data), root + name)))
            txn.put("%08d_%s" % (line_id, name), datum.SerializeToString())
            count += 1
            if count % 1000 == 0:
                txn.commit()
                txn = out.transaction()
                log.info("Processed %d files.", count)
        if count % 1000 != 0:
            txn.commit()
            log.info("Processed %d files.", count)
    finally:
        out.close()
    return 0


def _seed(seed):
    """A seed for convert_imageset's shuffle: ``seed``, else a draw from the engine's generator
    (Caffe's is unseeded there, so no run of it can be matched draw for draw)."""
    if seed is not None:
        return int(seed)
    return int(backend.rng().integers(0, 2 ** 32))


# =========================================================================== compute_image_mean
def _parse_datum(value, where):
    datum = caffe_pb2.Datum()
    try:
        datum.ParseFromString(value)
    except Exception as e:
        raise ToolError("record is not a Datum in %s: %s" % (where, e)) from None
    return datum


def _datum_values(datum):
    """The Datum's values as float32 (bytes as unsigned, or float_data)."""
    if len(datum.data):
        return np.frombuffer(datum.data, np.uint8).astype(np.float32)
    return np.asarray(datum.float_data, np.float32)


def compute_image_mean(input_db, output_file=None, backend="lmdb"):
    """The mean of every Datum in ``input_db`` as a BlobProto (1 x C x H x W, legacy
    dimensions, as Caffe writes it), written to ``output_file`` when given; logs the
    per-channel means.  Returns the BlobProto."""
    src = db.open_db(input_db, backend, db.READ)
    try:
        cursor = src.cursor()
        if not cursor.valid():
            raise ToolError("cannot compute the mean of %s: the database is empty (no records to read)"
                            % input_db)
        first = _parse_datum(cursor.value(), input_db)
        if images.decode_datum_native(first):
            log.info("Decoding Datum")
        c, h, w = first.channels, first.height, first.width
        data_size = c * h * w
        total = np.zeros(max(len(first.data), len(first.float_data)), np.float32)
        log.info("Starting iteration")
        count = 0
        while cursor.valid():
            datum = _parse_datum(cursor.value(), input_db)
            images.decode_datum_native(datum)
            size = max(len(datum.data), len(datum.float_data))
            if size != data_size:
                raise ToolError(check_failed("size_in_datum == data_size", size, data_size,
                                             "Incorrect data field size %d (record %s)"
                                             % (size, cursor.key().decode(errors="replace"))))
            total += _datum_values(datum)
            count += 1
            if count % 10000 == 0:
                log.info("Processed %d files.", count)
            cursor.next()
        cursor.close()
    finally:
        src.close()
    if count % 10000 != 0:
        log.info("Processed %d files.", count)
    mean = total / np.float32(count)
    blob = caffe_pb2.BlobProto(num=1, channels=c, height=h, width=w)
    blob.data.extend(mean.tolist())
    if output_file:
        log.info("Write to %s", output_file)
        with open(output_file, "wb") as f:
            f.write(blob.SerializeToString())
    dim = h * w
    log.info("Number of channels: %d", c)
    for ch in range(c):
        # Summed one value after another in float, as Caffe's loop does.
        channel_sum = np.cumsum(mean[dim * ch:dim * (ch + 1)], dtype=np.float32)[-1] if dim else np.float32(0)
        log.info("mean_value channel [%d]: %s", ch, num(np.float32(channel_sum / np.float32(dim))))
    return blob


# =========================================================================== extract_features
def _legacy(shape, index):
    """Blob::LegacyShape: the axis, or 1 past the blob's axes."""
    return int(shape[index]) if index < len(shape) else 1


def extract_features(pretrained, proto, blob_names, dataset_names, num_mini_batches, db_type,
                     mode="CPU", device_id=None):
    """Run ``proto`` (TEST phase, weights from ``pretrained``) ``num_mini_batches``
    times and store every item of each named blob as a float Datum (keys ``%010d``)
    in a new database per blob.  ``blob_names`` / ``dataset_names``: comma
    separated, as many of each.  Returns 0."""
    from engine.core.net import TEST, Net
    if mode == "GPU":
        log.error("Using GPU")
        dev = 0 if device_id is None else _atoi(str(device_id))
        if dev < 0:
            raise ToolError(check_failed("device_id >= 0", dev, 0))
        log.error("Using Device_id=%d", dev)
        backend.cupy()
        backend.set_device(dev)
        backend.set_mode_gpu()
    else:
        log.error("Using CPU")
        backend.set_mode_cpu()
    net = Net(proto, TEST)
    net.CopyTrainedLayersFrom(pretrained)
    blobs = str(blob_names).split(",")
    datasets = str(dataset_names).split(",")
    if len(blobs) != len(datasets):
        raise ToolError(check_failed("blob_names.size() == dataset_names.size()", len(blobs), len(datasets),
                                     " the number of blob names and dataset names must be equal"))
    for name in blobs:
        if not net.has_blob(name):
            raise ToolError(check_failed("feature_extraction_net->has_blob(blob_names[i])",
                                         message="Unknown feature blob name %s in the network %s"
                                         % (name, proto)))
    batches = _atoi(str(num_mini_batches))
    db.backend_name(db_type)
    stores, txns = [], []
    try:
        for name in datasets:
            log.info("Opening dataset %s", name)
            store = db.open_db(name, db_type, db.NEW)
            stores.append(store)
            txns.append(store.transaction())
        log.error("Extracting Features")
        counts = [0] * len(blobs)
        for _ in range(batches):
            net.Forward()
            for i, name in enumerate(blobs):
                counts[i] = _store_features(net.blob_by_name(name), name, txns, stores, i, counts[i])
        for i, name in enumerate(blobs):
            if counts[i] % 1000 != 0:
                txns[i].commit()
            log.error("Extracted features of %d query images for feature blob %s", counts[i], name)
    finally:
        for store in stores:
            store.close()
    log.error("Successfully extracted the features!")
    return 0


def _store_features(blob, name, txns, stores, i, index):
    """One batch of one blob: a Datum per item; returns the running item count."""
    shape = tuple(blob.shape)
    if len(shape) > 4:
        raise ToolError(check_failed("num_axes() <= 4", len(shape), 4, "Cannot use legacy accessors on Blobs "
                                     "with > 4 axes. (blob %s)" % name))
    data = np.asarray(blob.get_data(gpu=False), np.float32)
    n = _legacy(shape, 0)
    flat = data.reshape(n, -1) if n else data.reshape(0, 0)
    c, h, w = _legacy(shape, 1), _legacy(shape, 2), _legacy(shape, 3)
    for item in range(n):
        datum = caffe_pb2.Datum(channels=c, height=h, width=w)
        datum.float_data.extend(flat[item].tolist())
        txns[i].put("%010d" % index, datum.SerializeToString())
        index += 1
        if index % 1000 == 0:
            txns[i].commit()
            txns[i] = stores[i].transaction()
            log.error("Extracted features of %d query images for feature blob %s", index, name)
    return index


# =========================================================================== upgrade_*_proto_*
class UpgradeFailed(CaffeError):
    """The input could not be parsed (the tools' exit status 2)."""


def _read_text(path, cls, kind):
    from engine.core import io
    with open(path, "rb") as f:
        data = f.read()
    try:
        return io.parse_prototxt(data, cls, path)
    except ParseError as e:
        log.error("%s", e)
        raise UpgradeFailed("Failed to parse input text file as %s: %s" % (kind, path)) from None


def _read_binary(path):
    from engine.core import io
    with open(path, "rb") as f:
        data = f.read()
    try:
        return io.parse_binary(data, caffe_pb2.NetParameter, path)
    except ParseError as e:
        log.error("%s", e)
        raise UpgradeFailed("Failed to parse input binary file as NetParameter: %s" % path) from None


def _upgrade(param, path, needs_upgrade, upgrade):
    """``(param, success)``: ``upgrade`` applied when ``needs_upgrade`` says so, with the tools' log lines."""
    success = True
    if needs_upgrade(param):
        param, success = upgrade(param, path)
        if not success:
            log.error("Encountered error(s) while upgrading prototxt; see details above.")
    else:
        log.error("File already in latest proto format: %s", path)
    return param, success


def _upgrade_net(param, path):
    from engine.core.upgrade import net_needs_upgrade, upgrade_net_as_needed
    return _upgrade(param, path, net_needs_upgrade, upgrade_net_as_needed)


def upgrade_net_proto_text(src, dst, param=None):
    """upgrade_net_proto_text: a V0/V1 net prototxt to the current format.
    Returns 0, or 1 when the upgrade reported errors (the file is written anyway)."""
    from engine.core import io
    param = _read_text(src, caffe_pb2.NetParameter, "NetParameter") if param is None else param
    param, success = _upgrade_net(param, src)
    io.write_prototxt(dst, param)
    log.info("Wrote upgraded NetParameter text proto to %s", dst)
    return 0 if success else 1


def upgrade_net_proto_binary(src, dst, param=None):
    """upgrade_net_proto_binary: a V0/V1 binary NetParameter (caffemodel) to the current format."""
    from engine.core import io
    param = _read_binary(src) if param is None else param
    param, success = _upgrade_net(param, src)
    io.write_binary(dst, param)
    log.info("Wrote upgraded NetParameter binary proto to %s", dst)
    return 0 if success else 1


def upgrade_solver_proto_text(src, dst, param=None):
    """upgrade_solver_proto_text: an old solver prototxt (``solver_type`` enum) to the current format."""
    from engine.core import io
    from engine.core.upgrade import solver_needs_type_upgrade, upgrade_solver_as_needed
    param = _read_text(src, caffe_pb2.SolverParameter, "SolverParameter") if param is None else param
    param, success = _upgrade(param, src, solver_needs_type_upgrade, upgrade_solver_as_needed)
    io.write_prototxt(dst, param)
    log.info("Wrote upgraded SolverParameter text proto to %s", dst)
    return 0 if success else 1


# =========================================================================== device_query
_QUERY = (
    ("Device id:                     ", lambda d, p: d),
    ("Major revision number:         ", lambda d, p: p.get("major", 0)),
    ("Minor revision number:         ", lambda d, p: p.get("minor", 0)),
    ("Name:                          ", lambda d, p: _text(p.get("name"))),
    ("Total global memory:           ", lambda d, p: p.get("totalGlobalMem", 0)),
    ("Total shared memory per block: ", lambda d, p: p.get("sharedMemPerBlock", 0)),
    ("Total registers per block:     ", lambda d, p: p.get("regsPerBlock", 0)),
    ("Warp size:                     ", lambda d, p: p.get("warpSize", 0)),
    ("Maximum memory pitch:          ", lambda d, p: p.get("memPitch", 0)),
    ("Maximum threads per block:     ", lambda d, p: p.get("maxThreadsPerBlock", 0)),
    ("Maximum dimension of block:    ", lambda d, p: _triple(p.get("maxThreadsDim"))),
    ("Maximum dimension of grid:     ", lambda d, p: _triple(p.get("maxGridSize"))),
    ("Clock rate:                    ", lambda d, p: p.get("clockRate", 0)),
    ("Total constant memory:         ", lambda d, p: p.get("totalConstMem", 0)),
    ("Texture alignment:             ", lambda d, p: p.get("textureAlignment", 0)),
    ("Concurrent copy and execution: ", lambda d, p: "Yes" if p.get("deviceOverlap") else "No"),
    ("Number of multiprocessors:     ", lambda d, p: p.get("multiProcessorCount", 0)),
    ("Kernel execution timeout:      ", lambda d, p: "Yes" if p.get("kernelExecTimeoutEnabled") else "No"),
)


def _text(x):
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def _triple(x):
    x = list(x or (0, 0, 0))
    return ", ".join(str(int(v)) for v in x[:3])


def device_query_lines(device, props):
    """Caffe::DeviceQuery's lines for ``device`` from cudaGetDeviceProperties' fields
    (a field this CUDA no longer reports, as CUDA 13 dropped clockRate, reads 0 / No)."""
    return ["%s%s" % (label, value(device, props)) for label, value in _QUERY]


def device_query(gpu):
    """caffe device_query -gpu IDS: the properties of each device.  Without a usable
    CUDA device this stops as a CPU-only Caffe does (DeviceError)."""
    from engine.tools.solver_commands import get_gpus
    log.info("Querying GPUs %s", "" if gpu is None else gpu)
    if gpu is None or gpu == "":
        return 0
    try:
        cp = backend.cupy()
    except DeviceError as e:
        raise DeviceError("Cannot use GPU in CPU-only Caffe: check mode. (%s)" % e) from None
    for dev in get_gpus(gpu):
        backend.set_device(dev)
        props = cp.cuda.runtime.getDeviceProperties(dev)
        for line in device_query_lines(dev, props):
            log.info("%s", line)
    return 0
