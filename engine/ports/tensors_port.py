"""Any runtime's tensors as a port: a ``.npz`` of name -> array, as a user dumps them from
TensorRT, OpenVINO, NCNN or an NPU's simulator, checked against the Caffe net they ran.

    port = TensorDump.load("dump.npz")             # or TensorDump(dict_of_arrays, "label")
    result = compare_port(net, port, {"data": port.input_value(net)})

A dump has values but no graph and cannot be re-run, so (:class:`PortGraph`'s
``can_rerun = False``) a layer's own error is measured the other way round: the engine's
layer is run on the *dump's* values of the tensors it reads and compared with the dump's
value of its output.  Its tensors are given to the matching as a chain in the order they
were dumped (each made from the one before it), so that they pair by name first, then by
shape and order.

The net's input comes from the dump: the tensor named as the net's input (or ``input``,
``data``, ``images``...), else the first of the input's shape (N x C x H x W, or N x H x W x
C, transposed).  Without one, the input must be given (``--input``).
"""
import os
from typing import Dict, List, Optional

import numpy as np

from engine.ports.activations import PortError
from engine.ports.port_graph import PortGraph, PortNode

INPUT_NAMES = ("input", "data", "images", "image", "x", "input_1", "input.1", "input0", "in0", "blob1")


class TensorDump(PortGraph):
    """A tensor dump as a port graph (see the module docstring)."""

    kind = "tensors"
    can_rerun = False

    def __init__(self, tensors, label="<tensors>"):
        self.tensors: Dict[str, np.ndarray] = {}
        for k, v in tensors.items():
            a = np.asarray(v)
            if a.dtype == object:
                raise PortError("%s: '%s' is not a numeric array" % (label, k))
            self.tensors[str(k)] = a
        if not self.tensors:
            raise PortError("%s: holds no arrays" % label)
        self.input_tensor: Optional[str] = None
        self.extra_inputs: List[str] = []
        self.internal: Dict[str, str] = {k: k for k in self.tensors}      # dump name -> name in the graph
        self.paired_by: Dict[str, str] = {}                                 # dump name -> "name" or "order"
        super().__init__(label, [], [])
        self.notes: List[str] = []

    @classmethod
    def load(cls, path):
        """A dump from a ``.npz`` file (or bytes of one); a clear error names the file."""
        label = "<.npz bytes>"
        src = path
        if isinstance(path, (bytes, bytearray, memoryview)):
            import io
            src = io.BytesIO(bytes(path))
        else:
            label = os.fspath(path)
            if not os.path.isfile(label):
                raise PortError("%s: no such tensor dump (.npz)" % label)
        try:
            with np.load(src, allow_pickle=False) as z:
                if not hasattr(z, "files"):
                    raise ValueError("a single array (.npy), not a .npz of named arrays")
                tensors = {k: z[k] for k in z.files}
            bad = [k for k, v in tensors.items() if not isinstance(v, np.ndarray)]
            if bad or not tensors:
                raise ValueError("%s is not an array" % bad[0] if bad else "no arrays in it")
        except Exception as e:           # a zip that is not an npz, pickled objects, junk
            raise PortError("%s: not a NumPy .npz of named arrays: %s" % (label, " ".join(str(e).split())[:200])) \
                from None
        return cls(tensors, label)

    # -------------------------------------------------------------- the input
    def bind_input(self, name, shape):
        """Choose the dump's tensor for the net's input ``name`` of ``shape``: by name, then the
        first of that shape (any batch; or N x H x W x C; or without the batch axis); returns
        its value as the net takes it, or None when the dump has none.  A dump in N x H x W x C
        has its 4-d tensors transposed to Caffe's layout (a note says so)."""
        names = [name] + [n for n in INPUT_NAMES if n != name]
        cands = [n for n in names if n in self.tensors]
        cands += [k for k in self.tensors if k not in cands]
        for k in cands:
            got = _as_input(self.tensors[k], tuple(int(d) for d in shape), loose=k in names)
            if got is None:
                continue
            value, perm, what = got
            if what:
                self.notes.append("the dump's input '%s' is %s" % (k, what if perm is None else
                                                                   "%s %s" % (_dims(self.tensors[k].shape), what)))
            if perm is not None:
                self.tensors = {t: (np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a)
                                for t, a in self.tensors.items()}
            self.tensors[k] = value
            self.input_tensor = k
            self._chain()
            return value
        return None

    def use_input(self, name):
        """No tensor of the dump is the net's input ``name``: a graph input of that name (fed
        the input given) heads the chain."""
        if name not in self.inputs:
            self.extra_inputs.append(name)
            self._chain()

    def _chain(self):
        heads = ([self.input_tensor] if self.input_tensor else []) + self.extra_inputs
        nodes = []
        prev = heads
        for k in self.tensors:
            if k in heads:
                continue
            nodes.append(PortNode("Tensor", list(prev), [self.internal[k]], k))
            prev = [self.internal[k]]
        notes = self.notes
        PortGraph.__init__(self, self.label, heads, nodes)
        self.notes = notes

    def pair(self, tr, values, rtol=1e-3):
        """Pair the dump's tensors with the values the net computes (``tr``, ``values``: its
        trace and Forward, engine.ports.activations): by name first -- a tensor named as a
        value (``blob``, ``blob@layer``), as an in-place layer, or as a blob (its value after
        Forward) --, then by shape and order: the remaining tensors and values aligned in
        their orders (a tensor may be left out, a fused layer's values skipped), among equal
        shapes the closest values.  The graph then names each tensor as its value (the
        comparer's name matching takes them); :func:`compare_tensors` shows the dump's names."""
        from engine.ports.activations import relative
        acts = [a for a in tr.acts if a.alias_of is None and a.id not in tr.inputs.values() and a.type != "Input"]
        by_label = {a.label: a for a in acts}
        in_place = {a.layer: a for a in acts if a.in_place}
        final = {b: tr.acts[a] for b, a in tr.final.items()}
        taken: Dict[int, str] = {}
        for k in self.tensors:
            if k == self.input_tensor:
                continue
            act = by_label.get(k) or in_place.get(k) or final.get(k)
            if act is not None and act.alias_of is None and act.id not in taken and \
                    tuple(self.tensors[k].shape) == tuple(act.shape):
                taken[act.id] = k
                self.paired_by[k] = "name"
        rest_t = [k for k in self.tensors if k != self.input_tensor and k not in self.paired_by
                  and np.issubdtype(self.tensors[k].dtype, np.floating)]
        rest_v = [a for a in acts if a.id not in taken]
        n, m = len(rest_v), len(rest_t)
        # where the values cannot tell, the values runtimes fold into the next are left out first:
        # a BatchNorm's before its Scale (nn.BatchNorm2d, a fused BatchNormalization), a Dropout's
        nxt = {a.id: b for a, b in zip(acts, acts[1:])}
        fold = {a.id for a in acts if a.type == "Dropout" or a.type == "BatchNorm" and a.id in nxt
                and nxt[a.id].type == "Scale" and nxt[a.id].bottoms == [a.id]}
        # longest alignment: a pair scores 1 plus how close the values are (same shapes only)
        score = np.zeros((n + 1, m + 1))
        gain = {}
        for i in range(n - 1, -1, -1):
            for j in range(m - 1, -1, -1):
                best = max(score[i + 1, j], score[i, j + 1])
                a, t = rest_v[i], rest_t[j]
                shape = tuple(self.tensors[t].shape)
                g = gain.get((i, j))
                if g is None and shape == tuple(a.shape):
                    rel = relative(self.tensors[t], values[a.id])[1]
                    g = gain[(i, j)] = 1.0 + max(0.0, 1.0 - min(rel, 1.0)) - (0.05 if a.id in fold else 0.0)
                elif g is None and len(shape) == len(a.shape) > 2 and shape[:2] == tuple(a.shape[:2]):
                    g = gain[(i, j)] = 0.5         # another spatial size: a shape bug (pooling's rounding)
                if g is not None:
                    best = max(best, g + score[i + 1, j + 1])
                score[i, j] = best
        i = j = 0
        while i < n and j < m:
            g = gain.get((i, j))
            if g is not None and abs(score[i, j] - (g + score[i + 1, j + 1])) < 1e-12:
                taken[rest_v[i].id] = rest_t[j]
                self.paired_by[rest_t[j]] = "order"
                i, j = i + 1, j + 1
            elif score[i, j] == score[i + 1, j]:
                i += 1
            else:
                j += 1
        label = {a.id: "%s@%s" % (a.blob, a.layer) for a in acts}
        self.internal = {k: ("unpaired:" + k if k != self.input_tensor else k) for k in self.tensors}
        for a, k in taken.items():
            self.internal[k] = label[a]
        self._chain()
        return taken

    def original(self, name):
        """The dump's own name of graph tensor ``name``."""
        for k, v in self.internal.items():
            if v == name:
                return k
        return name

    def input_shape(self, name):
        return [int(d) for d in self.tensors[name].shape] if name == self.input_tensor else None

    def input_value(self):
        return self.tensors.get(self.input_tensor) if self.input_tensor else None

    def input_dtype(self, name):
        return np.dtype(np.float32)

    # -------------------------------------------------------------- running
    def run_all(self, feeds):
        """The dump's tensors (a dump does not run): the feeds must be the dumped input."""
        out = {self.internal[k]: v for k, v in self.tensors.items() if k != self.input_tensor}
        for k, v in feeds.items():
            out[k] = np.asarray(v)
        return out

    def run_part(self, inputs, output, values):
        raise PortError("%s is a tensor dump: it cannot be re-run (its own errors come from the engine's layers "
                        "run on its values)" % self.label)


def _dims(shape):
    return "x".join(str(int(d)) for d in shape) if len(shape) else "a scalar"


def _as_input(v, shape, loose):
    """(the value as the net takes it -- ``shape`` but perhaps another batch --, the
    permutation that was undone or None, a note) when ``v`` can be the input: the same shape
    (any batch); N x H x W x C; without the batch axis (C x H x W, or H x W x C); or,
    ``loose`` (named as the input), the same size."""
    if not np.issubdtype(v.dtype, np.number):
        return None
    v32 = v.astype(np.float32, copy=False)
    rest = tuple(shape[1:])
    if v.ndim == len(shape) and tuple(v.shape[1:]) == rest:
        return v32, None, "" if v.shape[0] == shape[0] else "batch %d (the net's input is reshaped to it)" % v.shape[0]
    if len(shape) == 4:
        C, H, W = rest
        if v.ndim == 4 and tuple(v.shape[1:]) == (H, W, C) and C != W:
            return np.ascontiguousarray(v32.transpose(0, 3, 1, 2)), (0, 2, 3, 1), \
                "N x H x W x C: the dump's 4-d tensors are transposed to N x C x H x W"
        if tuple(v.shape) == (C, H, W):
            return v32[None], None, "without its batch axis"
        if tuple(v.shape) == (H, W, C) and C != W:
            return np.ascontiguousarray(v32.transpose(2, 0, 1))[None], (0, 2, 3, 1), \
                "H x W x C without its batch axis: the dump's 4-d tensors are transposed to N x C x H x W"
    if loose and v.size == int(np.prod(shape)):
        return v32.reshape(shape), None, "reshaped to the net's %s" % _dims(shape)
    return None


def compare_tensors(net, dump, inputs=None, preprocess=None, rtol=None, seed=0):
    """``net`` against a tensor dump (a .npz path or its bytes, {name: array}, or a
    :class:`TensorDump`); the net's input is the dump's (see :meth:`TensorDump.bind_input`),
    or ``inputs`` when the dump has none.  Returns the :class:`~engine.ports.compare.PortComparison`."""
    from engine.ports.compare import DEFAULT_RTOL, Preprocess, compare_port
    if preprocess is not None and not isinstance(preprocess, Preprocess):
        preprocess = Preprocess(transform=preprocess) if callable(preprocess) else Preprocess(**dict(preprocess))
    port = dump if isinstance(dump, TensorDump) else TensorDump(dump) if isinstance(dump, dict) \
        else TensorDump.load(dump)
    given = inputs if isinstance(inputs, dict) or inputs is None else {net.inputs[0]: inputs}
    given = {k: _input_array(v, preprocess) for k, v in dict(given or {}).items()}
    feeds = {}
    for name in net.inputs:
        value = port.bind_input(name, net.blobs[name].shape)
        if value is None:
            if name not in given:
                raise PortError("%s: no tensor is the net's input '%s' (%s, or N x H x W x C): add the input the "
                                "runtime was given to the dump (named '%s'), or give it (--input)" % (
                                    port.label, name, _dims(net.blobs[name].shape), name), blob=name)
            port.use_input(name)
            continue
        feeds[name] = value
    for name, v in given.items():
        if name in feeds and isinstance(v, np.ndarray) and v.size == feeds[name].size and \
                not np.allclose(v.reshape(feeds[name].shape), feeds[name], rtol=1e-5,
                                atol=1e-6 * float(np.abs(v).max() or 1)):
            raise PortError("%s: its input '%s' is not the input given: the dump was made from another input"
                            % (port.label, port.input_tensor), blob=name)
    feeds.update({k: v for k, v in given.items() if k not in feeds})
    # the pairing needs the net's values: one Forward here (the comparison makes its own)
    from engine.ports.activations import run, set_inputs, trace
    if all(isinstance(v, np.ndarray) for v in feeds.values()):
        set_inputs(net, {k: _batched(v, net.blobs[k].shape) for k, v in feeds.items()})
        tr = trace(net)
        port.pair(tr, run(net, tr))
    result = compare_port(net, port, feeds, preprocess, DEFAULT_RTOL if rtol is None else rtol, seed)
    result.notes[:0] = [n for n in port.notes if n not in result.notes]
    _dump_names(result, port)
    return result


def _input_array(v, preprocess):
    """An input given as an array, a .npy path, or an image path with ``preprocess``'s
    transform, as an array (anything else as it is: the comparison says what is wrong)."""
    if isinstance(v, (str, os.PathLike)):
        path = os.fspath(v)
        if path.lower().endswith(".npy") and os.path.isfile(path):
            return np.asarray(np.load(path), np.float32)
        if os.path.isfile(path) and preprocess is not None and getattr(preprocess, "transform", None) is not None:
            return np.asarray(preprocess.transform(path), np.float32)
        return v
    return np.asarray(v, np.float32)


def _batched(v, shape):
    return v[None] if v.ndim == len(shape) - 1 else v


def _dump_names(result, port):
    """The comparison as the dump names its tensors: each row's tensor by its dump name, and
    how it was paired (by name, or by shape and order: "topology" in the counts)."""
    counts = {"input": 0, "name": 0, "topology": 0, "unmatched": 0}
    for r in result.rows:
        if r.tensor is not None:
            r.tensor = port.original(r.tensor)
            if r.matched != "input":
                r.matched = "name" if port.paired_by.get(r.tensor) == "name" else "topology"
        counts[r.matched or "unmatched"] += 1
    result.matching.update(counts)
    result.unmatched_tensors = [port.original(t) for t in result.unmatched_tensors]
    for o in result.outputs:
        if o.get("tensor") is not None:
            o["tensor"] = port.original(o["tensor"])


__all__ = ["TensorDump", "INPUT_NAMES", "compare_tensors"]
