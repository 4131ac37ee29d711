"""What the port debugger needs of a port: :class:`PortGraph`.

:func:`engine.ports.compare.compare_port` checks a Caffe net against a *port*: anything
that computes the net's values under its own tensor names.  An ONNX model is one
(:class:`engine.ports.onnx_port.OnnxPort`); a torch.fx graph or a tensor dump plug in the
same way, by subclassing :class:`PortGraph`:

- the tensors and the op that makes each: ``PortGraph.__init__(label, inputs, nodes)``
  takes the graph inputs (the tensors the net's inputs feed) and the nodes
  (:class:`PortNode`: an op type, the tensors it reads, those it writes) in an order where
  each node comes after the nodes making what it reads; from them the base class builds
  ``order`` (every tensor the inputs reach), ``producer``, ``op(tensor)`` and the ancestry
  ``depends(tensor, other)`` the matching walks.  Constants (weights) are not tensors here:
  a node's ``inputs`` may name them, they are ignored unless some node makes them.  A port
  without a graph (a tensor dump) may give its tensors as a chain, each made from the one
  before it, in the order they were dumped;
- the graph inputs' shapes and dtypes: :meth:`input_shape`, :meth:`input_dtype`;
- :meth:`run_all`: every tensor for the given inputs;
- :meth:`run_part`: the sub-graph that makes one tensor from given tensors, fed given
  values (the port's own arithmetic for one layer, on Caffe's values of what it reads);
- optionally :meth:`name_hints` ({Caffe blob: tensor}, a map the port carries) and
  :meth:`constants` (the weights a part reads: lets the diagnosis say "the port's weights
  are not the net's"); ``notes`` (lines for the comparison: what was done to run the port).

A port that cannot re-run a part (a dump of tensors from another runtime) sets
``can_rerun = False``: the comparer then measures a layer's own error the other way round,
by running the engine's layer on the *port's* values of the tensors it reads and comparing
with the port's value.

The interface is stable: the ONNX port and the torch ports (engine/ports' torch side) both
implement it; the comparer uses nothing else of a port.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Set

import numpy as np


@dataclass
class PortNode:
    """One op of a port: its type, the tensors it reads and writes, and a name for messages.

    ``op`` is best given as the ONNX op type the op is (``Conv``, ``BatchNormalization``,
    ``Relu``, ``Gemm``, ``MaxPool``, ...; a torch port maps ``nn.Conv2d`` / ``F.conv2d`` to
    ``Conv``): where values cannot be told apart by value, the matching prefers the tensor
    made by a layer type's usual ONNX lowering (``compare.COMPAT`` / ``PRIMARY``). Any other
    name still pairs by value and topology."""
    op: str
    inputs: List[str]
    outputs: List[str]
    name: str = ""
    attrs: Dict[str, object] = field(default_factory=dict)


class PortGraph:
    """A port, as the comparer uses it (subclass and implement the four ``run``/``input``
    methods; the topology comes from the nodes given to ``__init__``)."""

    #: whether :meth:`run_part` works (False: a tensor dump; own errors are then measured by
    #: running the engine's layer on the port's values)
    can_rerun = True

    def __init__(self, label: str, inputs: Sequence[str], nodes: Sequence[PortNode]):
        self.label = label
        self.inputs: List[str] = list(inputs)
        self.nodes: List[PortNode] = list(nodes)
        #: after :meth:`run_all`: None, or where a port that could not run whole stopped
        self.failure: Optional[str] = None
        #: lines for the comparison's notes (what was done to the port to run it)
        self.notes: List[str] = []
        self.producer: Dict[str, int] = {}       # tensor -> index of the node making it
        self.order: List[str] = []               # tensors the inputs reach, in a topological order
        self.bit: Dict[str, int] = {}            # tensor -> its position in ``order``
        self.anc: Dict[str, int] = {}            # tensor -> bitmask (over ``bit``) of its ancestors
        for name in self.inputs:
            self._add(name, 0)
        for k, node in enumerate(self.nodes):
            live = [i for i in node.inputs if i in self.bit]
            for o in node.outputs:
                if not o:
                    continue
                self.producer[o] = k
                if live:
                    m = 0
                    for i in live:
                        m |= self.anc[i] | (1 << self.bit[i])
                    self._add(o, m)

    def _add(self, name, anc):
        if name in self.bit:
            return
        self.bit[name] = len(self.order)
        self.order.append(name)
        self.anc[name] = anc

    def failure_note(self) -> Optional[str]:
        """The comparison's note when the port could not run whole (``failure`` set), or None
        where the caller says it itself (a PyTorch module: compare_torch)."""
        return None

    # ------------------------------------------------------------------ topology
    def op(self, tensor: str) -> Optional[str]:
        """The type of the op making ``tensor`` (None for a graph input or constant)."""
        k = self.producer.get(tensor)
        return None if k is None else self.nodes[k].op

    def node_of(self, tensor: str) -> Optional[PortNode]:
        k = self.producer.get(tensor)
        return None if k is None else self.nodes[k]

    def depends(self, tensor: str, other: str) -> bool:
        """Whether ``tensor`` is computed from ``other``."""
        return other in self.bit and bool((self.anc.get(tensor, 0) >> self.bit[other]) & 1)

    def leaves(self) -> List[str]:
        """The tensors no node reads (the port's results)."""
        read = {i for node in self.nodes for i in node.inputs}
        return [t for t in self.order if t not in read and t not in self.inputs]

    def op_masks(self) -> Dict[str, int]:
        """{op: bitmask (over ``bit``) of the tensors made by an op of that type}."""
        if getattr(self, "_op_masks", None) is None:
            masks: Dict[str, int] = {}
            for t, k in self.producer.items():
                if t in self.bit:
                    op = self.nodes[k].op
                    masks[op] = masks.get(op, 0) | (1 << self.bit[t])
            self._op_masks = masks
        return self._op_masks

    def reader_masks(self) -> Dict[str, int]:
        """{tensor: bitmask of the tensors made by nodes that read it} (a Shape or Size node
        reads only its shape: not counted)."""
        if getattr(self, "_reader_masks", None) is None:
            masks: Dict[str, int] = {}
            for node in self.nodes:
                if node.op in ("Shape", "Size"):
                    continue
                outs = 0
                for o in node.outputs:
                    if o in self.bit:
                        outs |= 1 << self.bit[o]
                for i in node.inputs:
                    if i in self.bit:
                        masks[i] = masks.get(i, 0) | outs
            self._reader_masks = masks
        return self._reader_masks

    def consumers(self, tensor: str) -> List[str]:
        """The tensors made by nodes that read ``tensor`` directly."""
        out = []
        for node in self.nodes:
            if tensor in node.inputs:
                out.extend(o for o in node.outputs if o in self.bit)
        return out

    # ------------------------------------------------------------------ to implement
    def input_shape(self, name: str) -> Optional[List[Optional[int]]]:
        """The declared shape of graph input ``name`` (None for an unknown dimension), or None."""
        return None

    def input_dtype(self, name: str) -> np.dtype:
        return np.dtype(np.float32)

    def run_all(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """{tensor: value} for every tensor the inputs ``feeds`` ({graph input: array}) reach
        (the feeds included).  A port that stops part way returns what it computed and sets
        ``self.failure`` to a line saying where and why."""
        raise NotImplementedError

    def run_part(self, inputs: Sequence[str], output: str, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """The value of ``output`` computed by the port's ops between the tensors ``inputs``
        and ``output`` alone, the tensors ``inputs`` fed ``values[name]``; any other tensor
        the part still reads (a graph input it reaches not through ``inputs``) is taken from
        ``values`` too.  Raises ``engine.ports.activations.PortError`` when it cannot run."""
        raise NotImplementedError

    def constants(self, inputs: Sequence[str], output: str) -> Dict[str, np.ndarray]:
        """The constants (weights) the port's part from ``inputs`` to ``output`` reads, by
        name; {} when the port cannot say (optional: used to tell "the port's weights are
        not the net's" from an arithmetic mistake)."""
        return {}

    def constant_sizes(self) -> Optional[Set[int]]:
        """The element counts of the port's constants (its weights), or None when the port
        cannot say (used to tell a port of another net from a port with mistakes)."""
        return None

    def name_hints(self) -> Dict[str, str]:
        """{Caffe blob: tensor holding the blob after Forward}, when the port carries such a
        map (export-onnx writes one); paired before anything else."""
        return {}


__all__ = ["PortGraph", "PortNode"]
