"""Reading trained weights (.caffemodel) fast, for Net.CopyTrainedLayersFrom.

A caffemodel's bulk is its blobs' packed float data.  Protobuf parses the rest of
the message; the float runs are cut out of the serialized bytes by a walk over
the wire format and kept as float32 views (no per-element conversion), then
matched back to the upgraded layers by position.  V0/V1 nets and anything the
walk does not recognise take the plain protobuf path.
"""
import numpy as np

from engine.proto import caffe_pb2


class _WeightsLayer:
    __slots__ = ("name", "blobs")

    def __init__(self, name, blobs):
        self.name, self.blobs = name, blobs


def read_weights(path):
    """``read_net_params_binary(path)`` for CopyTrainedLayersFrom: the upgraded
    layers (name and blobs), after the same upgrade with the same log lines.

    The upgrades that keep the layer list (data transformation, input fields,
    BatchNorm params) never touch blobs, but each copies the whole message, a
    caffemodel's weights included (three copies of ResNet-152's 240 MB).  So the
    blobs' float data are read straight from the file's bytes (``_split_blob_data``:
    protobuf parses only the rest), the blobs are taken out as ``BlobPayload``s,
    the rest is upgraded, and the blobs are matched back by position.  V0/V1 nets,
    whose upgrade rebuilds the layers, and bytes the walk does not understand take
    the plain path (which also raises Caffe's messages for unreadable files)."""
    from engine.core import io
    from engine.core.blob import BlobPayload
    from engine.core.errors import ParseError
    from engine.core.upgrade import (
        net_needs_v0_to_v1_upgrade,
        net_needs_v1_to_v2_upgrade,
        read_net_params_binary,
        upgrade_net,
    )
    try:
        raw = io._read_bytes(path)                   # io.read_caffemodel, keeping the bytes
        split = _split_blob_data(raw)                # (the message without the blobs' data, views)
        param = io.parse_binary(split[0] if split else raw, caffe_pb2.NetParameter, path)
    except ParseError:
        return read_net_params_binary(path)          # raises with Caffe's message
    if net_needs_v0_to_v1_upgrade(param) or net_needs_v1_to_v2_upgrade(param):
        if split:
            param = io.parse_binary(raw, caffe_pb2.NetParameter, path)
        return upgrade_net(param, path)
    views = split[1] if split else None
    if views is not None and (len(views) != len(param.layer) or any(
            len(v) != len(lp.blobs) for v, lp in zip(views, param.layer))):
        return read_net_params_binary(path)          # not what the walk saw: the plain path
    taken = []
    for k, lp in enumerate(param.layer):
        taken.append((lp.name, [BlobPayload(b, views[k][j] if views is not None else None)
                                for j, b in enumerate(lp.blobs)]))
        lp.ClearField("blobs")
    up = upgrade_net(param, path)
    extra = len(up.layer) - len(taken)                # the input upgrade puts an Input layer first
    if extra < 0 or any(up.layer[extra + k].name != name for k, (name, _) in enumerate(taken)):
        return read_net_params_binary(path)          # not the shape expected: the plain path
    layers = [_WeightsLayer(lp.name, []) for lp in up.layer[:extra]]
    layers += [_WeightsLayer(name, blobs) for name, blobs in taken]
    return layers


def _wire_fields(raw, pos, end):
    """(field number, wire type, key start, value start, end) of each field of the
    serialized message in raw[pos:end]: the field's bytes are raw[key start:end],
    its value raw[value start:end] (varints, fixed-size and length-delimited alike)."""
    while pos < end:
        key_start = pos
        key, pos = _varint(raw, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            start = pos
            _, pos = _varint(raw, pos)
        elif wire == 1:
            start, pos = pos, pos + 8
        elif wire == 5:
            start, pos = pos, pos + 4
        elif wire == 2:
            n, start = _varint(raw, pos)
            pos = start + n
        else:
            raise ValueError("wire type %d" % wire)
        if pos > end:
            raise ValueError("truncated")
        yield field, wire, key_start, start, pos


def _varint(raw, pos):
    result = shift = 0
    while True:
        b = raw[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _varint_bytes(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _split_blob_data(raw):
    """A serialized NetParameter without its layers' blobs' ``data`` (field 100 >
    7 > 5), and per layer, per blob, that data as a float32 view of ``raw`` (empty
    where absent): protobuf then parses a few hundred kilobytes instead of the
    weights, and no repeated field is converted element by element.  None when
    the bytes cannot be walked, or a blob's data is not one packed run (the
    caller parses everything)."""
    empty = np.zeros(0, np.float32)
    try:
        chunks, views = [], []
        for f, w, k, s, e in _wire_fields(raw, 0, len(raw)):
            if f != 100 or w != 2:
                chunks.append(raw[k:e])
                continue
            layer, blobs = [], []
            for f2, w2, k2, s2, e2 in _wire_fields(raw, s, e):
                if f2 != 7 or w2 != 2:
                    layer.append(raw[k2:e2])
                    continue
                blob, data = [], None
                for f3, w3, k3, s3, e3 in _wire_fields(raw, s2, e2):
                    if f3 != 5:
                        blob.append(raw[k3:e3])
                    elif w3 != 2 or data is not None or (e3 - s3) % 4:
                        return None
                    else:
                        data = np.frombuffer(raw, dtype="<f4", count=(e3 - s3) // 4, offset=s3)
                blobs.append(empty if data is None else data)
                blob = b"".join(blob)
                layer.append(raw[k2:s2 - len(_varint_bytes(e2 - s2))] + _varint_bytes(len(blob)) + blob)
            views.append(blobs)
            layer = b"".join(layer)
            chunks.append(raw[k:s - len(_varint_bytes(e - s))] + _varint_bytes(len(layer)) + layer)
        return b"".join(chunks), views
    except (ValueError, IndexError):
        return None
