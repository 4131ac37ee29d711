"""Structure-only nets: data layers whose source cannot be read, stood in by Input layers.

A train_val prototxt names the data it trains on (an LMDB, an image list, HDF5 files)
and Caffe's Init opens it: without the data, Caffe cannot build the net at all.  To
look at such a net (its phases, filters, splits, shapes), :func:`stand_in_data` replaces
each data layer whose source is missing by an ``Input`` layer with the same name and
tops, shaped from what the layer's own parameters tell:

==============  ==========================================================================
batch           ``batch_size`` of the layer's param
channels        given; ``force_color`` (3) / ``force_gray`` (1); ImageData's ``is_color``;
                WindowData: 3; the mean file's channels; one ``mean_value`` per channel
height × width  given; ``crop_size``; ImageData's ``new_height`` × ``new_width``; the mean
                file's (without a crop, Caffe requires the data to be the mean's size)
labels          ``batch_size`` values (top 1 of Data, ImageData, WindowData)
==============  ==========================================================================

What cannot be known is assumed (3 channels, 224 × 224, an HDF5 dataset of one value
per item) and said so: each stand-in is kept as a :class:`StandIn` record (which layer,
which source is missing and why, each top's shape and where every dimension came from),
in ``net.init_record.stand_ins`` when ``Net(..., structure_only=True)`` made it.  When the
net cannot take that assumption (Init fails: an MNIST autoencoder's loss compares 784
values an item, a siamese net slices its data into two one-channel halves that share
weights), the Net tries other common shapes (:func:`alternatives`: 1-4 channels, 28 × 28
up to 299 × 299, small first) and keeps the first it takes, its record saying that the
first assumption does not build and why; when none does, or when other shapes give the
same error (the shape is not the cause), Init's error says which shapes were assumed.

``shapes`` gives dimensions the parameters cannot tell: ``{top name: per-item dims}``
(e.g. ``{"data": (3, 256, 256)}``); the batch stays ``batch_size``.

Nothing here opens an LMDB or reads an image: only ``can_read`` (default: the path
exists) is asked about paths, and a mean file is read for its shape when ``can_read``
allows it.  The transform is pure: NetParameter in, NetParameter and records out.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from engine.proto import caffe_pb2

# the data layer types whose source Init opens: (param field, source field)
SOURCE_FIELDS = {
    "Data": "data_param",
    "ImageData": "image_data_param",
    "HDF5Data": "hdf5_data_param",
    "WindowData": "window_data_param",
}
ASSUMED_CHANNELS = 3
ASSUMED_SIZE = 224
LABEL_TOP = {"Data": 1, "ImageData": 1, "WindowData": 1}

CanRead = Callable[[str], Optional[str]]


@dataclass
class TopShape:
    """A stand-in's top: its shape, where each part came from, and what was assumed."""
    name: str
    shape: Tuple[int, ...]
    known: List[str] = field(default_factory=list)      # "batch_size 256 (data_param)", "227 × 227 (crop_size)"
    assumed: List[str] = field(default_factory=list)    # "3 channels", "224 × 224 (height × width)"
    given: bool = False                                  # the caller gave its dimensions

    def describe(self):
        bits = list(self.known)
        if self.assumed:
            bits.append("assumed: " + ", ".join(self.assumed))
        return "%s %s (%s)" % (self.name, " × ".join(str(d) for d in self.shape), "; ".join(bits))


@dataclass
class StandIn:
    """A data layer replaced by an Input layer because its source cannot be read."""
    layer: str
    type: str                     # the data layer's own type (Data, ImageData, HDF5Data, WindowData)
    field: str                    # "data_param.source"
    source: str                   # as written
    path: str                     # where it was looked for
    reason: str                   # "not found", "outside the model root", ...
    tops: List[TopShape] = field(default_factory=list)

    @property
    def assumed(self):
        """True when some dimension was assumed (neither given nor known from the params)."""
        return any(t.assumed for t in self.tops)

    def describe(self):
        return "layer '%s' (%s): %s '%s' %s; stood in by an Input of %s" % (
            self.layer, self.type, self.field, self.source, self.reason,
            ", ".join(t.describe() for t in self.tops))

    def to_dict(self):
        return {"layer": self.layer, "type": self.type, "field": self.field, "source": self.source,
                "path": self.path, "reason": self.reason, "assumed": self.assumed,
                "tops": [{"name": t.name, "shape": list(t.shape), "known": list(t.known),
                          "assumed": list(t.assumed), "given": t.given} for t in self.tops]}


def default_can_read(path):
    """None when ``path`` exists, else why not."""
    return None if os.path.exists(path) else "not found"


def _opened_at(value):
    """Where Caffe opens ``value``: a relative path from the working directory."""
    return value if os.path.isabs(value) else os.path.join(os.getcwd(), value)


def missing_source(lp, can_read: CanRead | None = None):
    """(field, source, path, reason) when ``lp`` is a data layer whose source cannot
    be read (``can_read(path)`` returns why not; default: it does not exist), else None.
    An image list or HDF5 list that exists but whose first file is missing counts."""
    can_read = can_read or default_can_read
    pfield = SOURCE_FIELDS.get(lp.type)
    if pfield is None:
        return None
    p = getattr(lp, pfield)
    where = "%s.source" % pfield
    if not p.source:
        return (where, "", "", "is not set")
    path = _opened_at(p.source)
    why = can_read(path)
    if why:
        return (where, p.source, path, why)
    first = _first_listed(lp.type, p, path)
    if first is not None:
        why = can_read(first)
        if why:
            return (where, p.source, path, "lists %s, which is %s" % (first, why))
    return None


def _first_listed(layer_type, p, path):
    """The first file an image list or an HDF5 list names (None: no list, or empty)."""
    if layer_type not in ("ImageData", "HDF5Data") or os.path.isdir(path):
        return None
    try:
        with open(path, "r") as f:
            text = f.read(1 << 16)
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if layer_type == "ImageData":
            name = line.rsplit(" ", 1)[0] if " " in line else line
            return _opened_at(p.root_folder + name)
        return line if os.path.isabs(line) else os.path.join(os.path.dirname(os.path.abspath(path)), line)
    return None


def _mean_shape(tp, can_read):
    """((C, H, W) or None, why not) of the transform's mean file."""
    if not tp.HasField("mean_file") or not tp.mean_file:
        return None, ""
    path = _opened_at(tp.mean_file)
    why = can_read(path)
    if why:
        return None, "the mean file %s is %s" % (tp.mean_file, why)
    try:
        from engine.core.io import read_blobproto
        bp = read_blobproto(path)
    except Exception as e:  # noqa: BLE001 - a mean file we cannot read only tells us nothing
        return None, "the mean file %s cannot be read (%s)" % (tp.mean_file, e)
    dims = list(bp.shape.dim) if bp.HasField("shape") else [bp.num, bp.channels, bp.height, bp.width]
    dims = [int(d) for d in dims]
    while len(dims) > 3 and dims[0] == 1:
        dims = dims[1:]
    return (tuple(dims), "") if len(dims) == 3 else (None, "the mean file %s is not C × H × W" % tp.mean_file)


def _image_shape(lp, pfield, batch, given, can_read):
    """The first top's TopShape of an image data layer."""
    name = lp.top[0]
    known = ["batch_size %d (%s)" % (batch, pfield)]
    if given is not None:
        return TopShape(name, (batch,) + tuple(int(d) for d in given),
                        known + ["%s (given)" % " × ".join(str(d) for d in given)], [], True)
    tp = lp.transform_param
    mean, mean_why = _mean_shape(tp, can_read)
    assumed = []
    crop = int(tp.crop_size)
    if lp.type == "WindowData" and not crop:
        crop = int(lp.window_data_param.crop_size)
    # channels
    if lp.type == "WindowData":
        c, why = 3, "3 channels (WindowData reads colour images)"
    elif lp.type == "ImageData":
        color = bool(lp.image_data_param.is_color)
        c, why = (3, "3 channels (is_color)") if color else (1, "1 channel (is_color: false)")
    elif tp.force_color:
        c, why = 3, "3 channels (force_color)"
    elif tp.force_gray:
        c, why = 1, "1 channel (force_gray)"
    elif mean is not None:
        c, why = mean[0], "%d channel%s (the mean file %s)" % (mean[0], "s" if mean[0] != 1 else "", tp.mean_file)
    elif len(tp.mean_value) > 1:
        c, why = len(tp.mean_value), "%d channels (one mean_value each)" % len(tp.mean_value)
    else:
        c, why = ASSUMED_CHANNELS, None
        assumed.append("%d channels%s" % (ASSUMED_CHANNELS, " (%s)" % mean_why if mean_why else ""))
    if why:
        known.append(why)
    # height x width
    ip = lp.image_data_param
    if crop:
        h = w = crop
        known.append("%d × %d (crop_size)" % (crop, crop))
    elif lp.type == "ImageData" and ip.new_height > 0 and ip.new_width > 0:
        h, w = int(ip.new_height), int(ip.new_width)
        known.append("%d × %d (new_height × new_width)" % (h, w))
    elif mean is not None:
        h, w = mean[1], mean[2]
        known.append("%d × %d (the mean file's size)" % (h, w))
    else:
        h = w = ASSUMED_SIZE
        assumed.append("%d × %d (height × width)" % (h, w))
    return TopShape(name, (batch, c, h, w), known, assumed)


def top_shapes(lp, shapes=None, can_read: CanRead | None = None):
    """[TopShape] of the tops a data layer ``lp`` would make, from its params
    (``shapes``: {top: per-item dims} the caller knows)."""
    can_read = can_read or default_can_read
    shapes = shapes or {}
    pfield = SOURCE_FIELDS[lp.type]
    batch = int(getattr(lp, pfield).batch_size)
    out = []
    for k, name in enumerate(lp.top):
        given = shapes.get(name)
        if k == 0 and lp.type != "HDF5Data":
            out.append(_image_shape(lp, pfield, batch, given, can_read))
            continue
        known = ["batch_size %d (%s)" % (batch, pfield)]
        if given is not None:
            dims = tuple(int(d) for d in given)
            out.append(TopShape(name, (batch,) + dims,
                                known + (["%s (given)" % " × ".join(str(d) for d in dims)] if dims else []),
                                [], True))
        elif k == LABEL_TOP.get(lp.type):
            out.append(TopShape(name, (batch,), known + ["one label per item"]))
        else:       # an HDF5 dataset: its item shape is in the file
            out.append(TopShape(name, (batch, 1), known, ["1 value per item (the dataset's shape is in "
                                                          "the missing file)"]))
    return out


def stand_in_layer(lp, tops):
    """The Input LayerParameter standing in for ``lp`` (same name, tops and phase)."""
    s = caffe_pb2.LayerParameter()
    s.name = lp.name
    s.type = "Input"
    s.top.extend(lp.top)
    if lp.HasField("phase"):
        s.phase = lp.phase
    for t in tops:
        s.input_param.shape.add().dim.extend(int(d) for d in t.shape)
    return s


def stand_in_data(param, can_read: CanRead | None = None, shapes: Dict[str, Sequence[int]] | None = None):
    """(NetParameter, [StandIn]): ``param`` with every data layer whose source cannot be
    read replaced by an Input layer (see the module doc).  ``param`` is not changed."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    records = []
    for i, lp in enumerate(param.layer):
        miss = missing_source(lp, can_read)
        if miss is None:
            continue
        tops = top_shapes(lp, shapes, can_read)
        records.append(StandIn(lp.name, lp.type, miss[0], miss[1], miss[2], miss[3], tops))
        out.layer[i].CopyFrom(stand_in_layer(lp, tops))
    return out, records


# Other shapes an image top whose channels or size were assumed is tried in, when the net
# cannot take the first assumption (a Flatten feeding a loss against a 784-value
# reconstruction, a Slice into two one-channel halves sharing weights): the channels of grey,
# two-image pairs, colour and colour + alpha, in MNIST's, CIFAR's and bigger sizes up to
# Inception's; small first (each size in every number of channels, then the next size), as
# a net that cannot take them fails fast there (its weights are filled at Init).
ALTERNATIVE_CHANNELS = (1, 2, 3, 4)
ALTERNATIVE_SIZES = (28, 32, 64, 96, 128, 224, 227, 256, 299)
MAX_ALTERNATIVES = 36
ALTERNATIVE_SECONDS = 10.0       # and no more than this long, all together


def alternatives(stand_ins):
    """{top: per-item dims} to build the net with, one after the other, in place of the
    assumed dimensions of ``stand_ins`` (their image tops' channels and/or height × width;
    what the params told or the caller gave stays), first assumption excluded; at most
    MAX_ALTERNATIVES."""
    tops = [t for s in stand_ins for t in s.tops if t.assumed and not t.given and len(t.shape) == 4]
    if not tops:
        return []
    out = []
    for size in ALTERNATIVE_SIZES:
        for c in ALTERNATIVE_CHANNELS:
            shapes = {}
            for t in tops:
                _, c0, h0, w0 = t.shape
                c_assumed = any(a.endswith("channels") or " channels (" in a for a in t.assumed)
                hw_assumed = any("height × width" in a for a in t.assumed)
                shapes[t.name] = (c if c_assumed else c0, size if hw_assumed else h0, size if hw_assumed else w0)
            if all(shapes[t.name] == tuple(t.shape[1:]) for t in tops) or shapes in out:
                continue
            out.append(shapes)
    return out[:MAX_ALTERNATIVES]


def note_alternative(stand_ins, shapes, first, why):
    """Mark the tops of ``stand_ins`` (built with ``shapes``, an :func:`alternatives` item,
    which stand_in_data took as given) as assumed again: what was assumed now, and that the
    first assumption ``first`` ({top: shape}) did not build (``why``: its error, one line)."""
    for s in stand_ins:
        for t in s.tops:
            if t.name not in shapes:
                continue
            t.given = False
            t.known = [k for k in t.known if not k.endswith("(given)")]
            t.assumed = ["%s, as %s does not build (%s)" % (
                " × ".join(str(d) for d in shapes[t.name]), " × ".join(str(d) for d in first[t.name][1:]), why)]


def parse_shapes(items):
    """{top: dims} from ``["data=3,227,227", "label="]`` (the command line's --data-shape);
    "x" separates too ("3x227x227").  Raises ValueError naming the bad item."""
    out = {}
    for item in items or ():
        name, eq, dims = str(item).partition("=")
        if not eq or not name.strip():
            raise ValueError("--data-shape %r: write TOP=C,H,W (e.g. data=3,227,227)" % item)
        try:
            out[name.strip()] = tuple(int(d) for d in dims.replace("x", ",").replace("×", ",").split(",")
                                      if d.strip())
        except ValueError:
            raise ValueError("--data-shape %r: the dimensions must be whole numbers" % item) from None
        if any(d <= 0 for d in out[name.strip()]):
            raise ValueError("--data-shape %r: the dimensions must be positive" % item)
    return out
