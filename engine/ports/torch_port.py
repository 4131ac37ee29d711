"""A user's own PyTorch ``nn.Module`` as a port graph: its tensors, the op that makes each, and
its parts re-run on given values -- what the port debugger (:mod:`engine.ports.compare`)
needs to pair the module's tensors with the values a Caffe net computes, measure each
layer's own error and re-enact the suspected bugs.

    module, label = load_torch_module("resnet.py:make_resnet", state_dict="resnet.pth")
    graph = TorchGraph(module, label)
    values = graph.run_all({"x": array})          # every tensor the forward computes, by name
    graph.run_part({"conv1": array}, "relu1")     # one part, fed other values

The graph comes from ``torch.fx`` (a symbolic trace: one node per submodule call, function
or method; the modules of ``torch.nn`` are leaves, a user's own module is traced through).
A module that does not trace (Python control flow on tensor values, say) is recorded
instead while it runs: forward hooks on every ``torch.nn`` module and a
``TorchFunctionMode`` for the functions and methods called between them (the path taken on
this input; re-running a node calls the same module or function again).

Tensor names: a module call is named by the module's qualified name (``layer1.0.conv1``; a
second call of the same module ``relu_1``), a function or method by fx's name for it
(``add``, ``flatten``, ``add_1``).  Each node's op is given as the ONNX op it corresponds to
(``Conv``, ``BatchNormalization``, ``Relu``, ``Gemm``...), so that the matching's table of
which op can make a Caffe layer type's top holds for PyTorch ports as it does for ONNX.

A module that expects its input as N x H x W x C is run on the net's input transposed (a
``Transpose`` node put in front of it, and a note saying so), and a module that raises is a
:class:`PortError` naming the module (or function) and the exception.
"""
import inspect
import operator
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engine.ports.activations import PortError, require
from engine.ports.port_graph import PortGraph, PortNode

_MODULE_OPS = {
    "Conv1d": "Conv", "Conv2d": "Conv", "Conv3d": "Conv", "LazyConv2d": "Conv",
    "ConvTranspose1d": "ConvTranspose", "ConvTranspose2d": "ConvTranspose", "ConvTranspose3d": "ConvTranspose",
    "Linear": "Gemm", "LazyLinear": "Gemm", "Bilinear": "Gemm",
    "BatchNorm1d": "BatchNormalization", "BatchNorm2d": "BatchNormalization", "BatchNorm3d": "BatchNormalization",
    "InstanceNorm1d": "InstanceNormalization", "InstanceNorm2d": "InstanceNormalization",
    "ReLU": "Relu", "ReLU6": "Clip", "LeakyReLU": "LeakyRelu", "PReLU": "PRelu", "ELU": "Elu", "Sigmoid": "Sigmoid",
    "Tanh": "Tanh", "Softplus": "Softplus", "Hardtanh": "Clip",
    "MaxPool1d": "MaxPool", "MaxPool2d": "MaxPool", "MaxPool3d": "MaxPool",
    "AvgPool1d": "AveragePool", "AvgPool2d": "AveragePool", "AvgPool3d": "AveragePool",
    "AdaptiveAvgPool1d": "GlobalAveragePool", "AdaptiveAvgPool2d": "GlobalAveragePool",
    "AdaptiveAvgPool3d": "GlobalAveragePool", "AdaptiveMaxPool2d": "GlobalMaxPool",
    "LocalResponseNorm": "LRN", "CrossMapLRN2d": "LRN",
    "Softmax": "Softmax", "Softmax2d": "Softmax", "LogSoftmax": "LogSoftmax",
    "Dropout": "Dropout", "Dropout1d": "Dropout", "Dropout2d": "Dropout", "Dropout3d": "Dropout",
    "AlphaDropout": "Dropout", "Flatten": "Flatten", "Unflatten": "Reshape", "Identity": "Identity",
    "ZeroPad2d": "Pad", "ConstantPad2d": "Pad", "ReflectionPad2d": "Pad", "Upsample": "Resize",
}

_FUNCTION_OPS = {
    "conv1d": "Conv", "conv2d": "Conv", "conv3d": "Conv", "conv_transpose1d": "ConvTranspose",
    "conv_transpose2d": "ConvTranspose", "conv_transpose3d": "ConvTranspose",
    "linear": "Gemm", "addmm": "Gemm", "matmul": "MatMul", "mm": "MatMul", "bmm": "MatMul",
    "relu": "Relu", "relu_": "Relu", "leaky_relu": "LeakyRelu", "leaky_relu_": "LeakyRelu", "prelu": "PRelu",
    "elu": "Elu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softplus": "Softplus", "hardtanh": "Clip",
    "add": "Add", "iadd": "Add", "add_": "Add", "__add__": "Add", "__radd__": "Add", "__iadd__": "Add",
    "sub": "Sub", "isub": "Sub", "sub_": "Sub", "rsub": "Sub", "__sub__": "Sub", "__rsub__": "Sub",
    "__isub__": "Sub", "mul": "Mul", "imul": "Mul", "mul_": "Mul", "__mul__": "Mul", "__rmul__": "Mul",
    "__imul__": "Mul", "truediv": "Div", "div": "Div", "div_": "Div", "__truediv__": "Div", "__itruediv__": "Div",
    "__rtruediv__": "Div", "itruediv": "Div",
    "cat": "Concat", "concat": "Concat", "concatenate": "Concat", "stack": "Concat",
    "flatten": "Flatten", "view": "Reshape", "reshape": "Reshape", "unflatten": "Reshape", "view_as": "Reshape",
    "reshape_as": "Reshape", "squeeze": "Squeeze", "unsqueeze": "Unsqueeze",
    "permute": "Transpose", "transpose": "Transpose", "t": "Transpose", "movedim": "Transpose",
    "contiguous": "Identity", "clone": "Identity", "float": "Identity", "to": "Identity", "detach": "Identity",
    "type_as": "Identity",
    "softmax": "Softmax", "log_softmax": "LogSoftmax",
    "max_pool1d": "MaxPool", "max_pool2d": "MaxPool", "max_pool3d": "MaxPool",
    "avg_pool1d": "AveragePool", "avg_pool2d": "AveragePool", "avg_pool3d": "AveragePool",
    "adaptive_avg_pool1d": "GlobalAveragePool", "adaptive_avg_pool2d": "GlobalAveragePool",
    "adaptive_max_pool2d": "GlobalMaxPool", "batch_norm": "BatchNormalization",
    "instance_norm": "InstanceNormalization", "local_response_norm": "LRN",
    "dropout": "Dropout", "dropout1d": "Dropout", "dropout2d": "Dropout", "feature_alpha_dropout": "Dropout",
    "split": "Split", "chunk": "Split", "unbind": "Split", "narrow": "Slice",
    "exp": "Exp", "log": "Log", "pow": "Pow", "__pow__": "Pow", "abs": "Abs", "sqrt": "Sqrt", "rsqrt": "Reciprocal",
    "maximum": "Max", "max": "Max", "minimum": "Min", "clamp": "Clip", "clip": "Clip", "where": "Where",
    "mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax", "pad": "Pad", "neg": "Neg", "__neg__": "Neg",
    "flip": "Slice", "interpolate": "Resize",
}


class _Ref:
    """A node's value as an argument of another node."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "%" + self.name


class _Node:
    """One call of the forward: ``fn(*args, **kwargs)`` with ``_Ref``s to other nodes."""

    def __init__(self, name, kind, fn, args=(), kwargs=None, where="", op=None):
        self.name = name
        self.kind = kind            # "input", "const", "call"
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.where = where          # for messages: "module 'layer1.0.conv1' (Conv2d)", "function add"
        self.op = op                # the ONNX op it corresponds to (None: from its value, getitem)
        self.refs: List[str] = []
        _collect_refs((self.args, self.kwargs), self.refs)


def _collect_refs(x, out):
    if isinstance(x, _Ref):
        if x.name not in out:
            out.append(x.name)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _collect_refs(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _collect_refs(v, out)
    elif isinstance(x, slice):
        for v in (x.start, x.stop, x.step):
            _collect_refs(v, out)


def _subst(x, env):
    if isinstance(x, _Ref):
        return env[x.name]
    if isinstance(x, tuple):
        return tuple(_subst(v, env) for v in x)
    if isinstance(x, list):
        return [_subst(v, env) for v in x]
    if isinstance(x, dict):
        return {k: _subst(v, env) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(_subst(x.start, env), _subst(x.stop, env), _subst(x.step, env))
    return x


def _one_line(e):
    text = " ".join(str(e).split())[:400]
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def _fn_name(fn):
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return str(name)


# ---------------------------------------------------------------------- loading the user's module
def load_torch_module(spec, state_dict=None, what="compare-port --torch"):
    """The user's module from ``FILE.py:FACTORY`` (FACTORY: a class or function of FILE.py
    returning the ``nn.Module``; without it, the file's only ``nn.Module`` class, or its
    ``__all__[0]``), in eval mode, with ``state_dict`` (a .pth path or a dict) loaded.  Returns
    (module, label).  Runs the file's code: it is the user's own.  An ``nn.Module`` instance
    is returned as it is."""
    torch = require("torch", "torch", what)
    nn = torch.nn
    if isinstance(spec, nn.Module):
        module, label = spec, type(spec).__name__
    else:
        text = os.fspath(spec)
        path, factory = (text, "") if os.path.isfile(text) or ":" not in text else text.rsplit(":", 1)
        if not os.path.isfile(path):
            raise PortError("%s: no such Python file (--torch FILE.py:FACTORY)" % path)
        from engine.ports.torch_export import load_module
        mod = load_module(path)
        factory = factory.strip()
        if not factory:
            factory = _default_factory(mod, nn, path)
        fn = getattr(mod, factory, None)
        if fn is None or not callable(fn):
            raise PortError("%s: no class or function '%s' in the file (--torch FILE.py:FACTORY)" % (path, factory))
        try:
            module = fn()
        except Exception as e:
            raise PortError("%s:%s(): raised %s" % (path, factory, _one_line(e))) from None
        if not isinstance(module, nn.Module):
            raise PortError("%s:%s() returned a %s, not a torch.nn.Module" % (path, factory, type(module).__name__))
        label = "%s:%s" % (os.path.basename(path), factory)
    if state_dict is not None:
        load_state_dict(module, state_dict)
    module.eval()
    return module, label


def _default_factory(mod, nn, path):
    if getattr(mod, "__all__", None):
        return str(mod.__all__[0])
    own = [k for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, nn.Module)
           and v.__module__ == mod.__name__]
    if len(own) == 1:
        return own[0]
    raise PortError("%s: say which class or function makes the module: --torch %s:FACTORY (the file defines %s)"
                    % (path, path, ", ".join(own) if own else "no nn.Module class"))


def load_state_dict(module, state_dict):
    """Load ``state_dict`` (a .pth path, or a dict; a checkpoint {"state_dict"/"model": ...}
    too) into ``module``, strictly; a clear error names the file and the keys that differ."""
    torch = require("torch", "torch", "loading a state_dict")
    label = "the state_dict"
    sd = state_dict
    if isinstance(state_dict, (str, os.PathLike)):
        label = os.fspath(state_dict)
        if not os.path.isfile(label):
            raise PortError("%s: no such state_dict file (--state-dict)" % label)
        try:
            sd = torch.load(label, map_location="cpu", weights_only=True)
        except Exception as e:
            raise PortError("%s: cannot read it as a PyTorch state_dict (torch.save of a dict of tensors, loaded "
                            "with weights_only): %s" % (label, _one_line(e)[:160])) from None
    elif isinstance(state_dict, (bytes, bytearray)):
        import io
        try:
            sd = torch.load(io.BytesIO(bytes(state_dict)), map_location="cpu", weights_only=True)
        except Exception as e:
            raise PortError("%s: cannot read it as a PyTorch state_dict (torch.save of a dict of tensors, loaded "
                            "with weights_only): %s" % (label, _one_line(e)[:160])) from None
    if isinstance(sd, dict) and not any(isinstance(v, torch.Tensor) for v in sd.values()):
        for key in ("state_dict", "model", "model_state_dict", "net"):
            if isinstance(sd.get(key), dict):
                sd = sd[key]
                break
    if not isinstance(sd, dict):
        raise PortError("%s: holds a %s, not a state_dict (a dict of tensors)" % (label, type(sd).__name__))
    own = module.state_dict()
    missing = [k for k in own if k not in sd]
    extra = [k for k in sd if k not in own]
    shapes = [k for k in own if k in sd and isinstance(sd[k], torch.Tensor) and sd[k].numel() != own[k].numel()]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append("missing %s" % ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else ""))
        if extra:
            parts.append("not in the module %s" % ", ".join(extra[:8]) + (" ..." if len(extra) > 8 else ""))
        for k in shapes[:8]:
            parts.append("%s is %s in the file, %s in the module" % (k, _dims(sd[k].shape), _dims(own[k].shape)))
        raise PortError("%s does not fit the module %s: %s" % (label, type(module).__name__, "; ".join(parts)))
    try:
        module.load_state_dict(sd)
    except Exception as e:
        raise PortError("%s does not fit the module %s: %s" % (label, type(module).__name__, _one_line(e)[:300])) \
            from None


# ---------------------------------------------------------------------- the graph
class TorchGraph(PortGraph):
    """A PyTorch module as a port graph (see the module docstring).

    ``inputs``: the forward's tensor arguments; ``order``: every tensor the inputs reach, in
    the order the forward computes them; ``anc[t]``: a bitmask (``bit``) of what ``t``
    depends on; ``op(t)``: the ONNX op the node corresponds to; ``run_all(feeds)``;
    ``run_part(feeds, output)``.  ``how``: "fx" or "hooks"; ``notes``: what was done to run
    it (an input transposed)."""

    kind = "torch"

    def __init__(self, module, label=None):
        self.torch = require("torch", "torch", "compare-port --torch")
        self.module = module
        self.label = label or type(module).__name__
        self.notes: List[str] = []
        self.failure: Optional[str] = None
        self.failure_node: Optional[str] = None
        self.calls: Dict[str, _Node] = {}
        self.raw: Dict[str, Any] = {}          # every node's value of the last run_all
        self.transposed: Dict[str, Tuple[int, ...]] = {}
        self._fx_error = None
        try:
            self._from_fx()
            self.how = "fx"
        except Exception as e:                 # does not trace: recorded while it runs
            self._fx_error = _one_line(e)
            self.how = "hooks"
            self.notes.append("the PyTorch module %s does not trace with torch.fx (%s): it is recorded while it "
                              "runs instead, the path this input takes" % (self.label, self._fx_error[:160]))
            self.calls = {}
            self.inputs = self._forward_args()
        self._index()

    # -------------------------------------------------------------- building
    def _forward_args(self):
        try:
            sig = inspect.signature(self.module.forward)
        except (TypeError, ValueError):
            return ["input"]
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        return names or ["input"]

    def _from_fx(self):
        from torch import fx
        gm = fx.symbolic_trace(self.module)
        mods = dict(gm.named_modules())
        used: Dict[str, int] = {}
        names: Dict[Any, str] = {}
        self.inputs = []
        for n in gm.graph.nodes:
            def ref(x):
                return _Ref(names[x])
            args = fx.node.map_arg(n.args, ref)
            kwargs = fx.node.map_arg(n.kwargs, ref)
            if n.op == "placeholder":
                name = n.name
                self.inputs.append(name)
                node = _Node(name, "input", None, where="input '%s'" % name, op="Input")
            elif n.op == "get_attr":
                name = n.name
                val = _fetch_attr(gm, n.target)
                node = _Node(name, "const", None, where="attribute '%s'" % n.target, op="Constant")
                self.raw[name] = val
            elif n.op == "call_module":
                target = str(n.target)
                # the module's path the first time (fx's own names have no dots); later calls fx's name
                name = target if not used.get(target) else n.name
                sub = mods[target]
                node = _Node(name, "call", sub, args, kwargs, where="module '%s' (%s)" % (target, type(sub).__name__),
                             op=_module_op(sub))
                used[target] = used.get(target, 0) + 1
            elif n.op == "call_function":
                name = n.name
                fname = _fn_name(n.target)
                node = _Node(name, "call", n.target, args, kwargs, where="function %s" % fname,
                             op=None if n.target is operator.getitem else _FUNCTION_OPS.get(fname, fname))
            elif n.op == "call_method":
                name = n.name
                node = _Node(name, "call", _Method(str(n.target)), args, kwargs, where="method .%s()" % n.target,
                             op=_FUNCTION_OPS.get(str(n.target), str(n.target)))
            else:                       # output
                continue
            names[n] = name
            self.calls[name] = node

    def _index(self):
        """The port graph of the calls (PortGraph's order, producer, ancestry): a call's inputs
        are the nodes it reads; a call computed from constants only is a constant."""
        failure, notes = getattr(self, "failure", None), getattr(self, "notes", [])
        nodes = [PortNode(self._op_of(c), list(c.refs), [name], c.where)
                 for name, c in self.calls.items() if c.kind == "call"]
        PortGraph.__init__(self, self.label, self.inputs, nodes)
        self.failure, self.notes = failure, notes

    # -------------------------------------------------------------- what the matching asks
    def _op_of(self, c):
        if c.op is not None:
            return c.op
        src = self.raw.get(c.refs[0]) if c.refs else None       # getitem: of a tuple, or of a tensor
        return "Split" if isinstance(src, (tuple, list)) else "Slice"

    def where(self, tensor):
        node = self.calls.get(tensor)
        return node.where if node is not None else tensor

    # -------------------------------------------------------------- running
    def _tensor(self, arr):
        """A float array as a tensor of the module's float type (float32 unless its weights
        are of another), a copy (the module may write into it in place)."""
        a = np.asarray(arr)
        return self.torch.from_numpy(np.array(a, dtype=self._float if a.dtype.kind == "f" else a.dtype, copy=True))

    @property
    def _float(self):
        for p in self.module.parameters():
            if p.is_floating_point():
                try:
                    return np.dtype(str(p.dtype).replace("torch.", ""))
                except TypeError:             # bfloat16: NumPy has none
                    break
        return np.dtype(np.float32)

    def _snapshot(self, v):
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        if isinstance(v, (tuple, list)):
            return type(v)(self._snapshot(x) for x in v) if not hasattr(v, "_fields") else v
        return v

    def run_all(self, feeds):
        """Every tensor the forward computes on ``feeds`` ({input name: array}), by name, as
        host arrays (float tensors as they are, inputs included).  A module that expects N x H
        x W x C is fed the input transposed (once, the first time; ``notes`` says so).  A
        node that raises stops what depends on it: ``failure`` says where (the others still
        run, with fx)."""
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise PortError("the PyTorch module %s takes inputs %s; no value for %s" % (
                self.label, ", ".join(self.inputs), ", ".join(missing)))
        self._run(feeds)
        if self.failure is not None and not self.transposed:
            first = (self.failure, self.failure_node, dict(self.calls), dict(self.raw))
            for name, arr in feeds.items():
                if arr.ndim != 4 or arr.shape[1] == arr.shape[3]:
                    continue
                self._transpose_input(name, (0, 2, 3, 1))
                self._run(feeds)
                if self.failure is None:
                    self.notes.append("the PyTorch module %s takes its input '%s' as N x H x W x C: the net's N x C x "
                                      "H x W input is transposed for it (a Transpose in front of the module)"
                                      % (self.label, name))
                    break
                self._untranspose(name)
            else:
                self.failure, self.failure_node, self.calls, self.raw = first
        self._index()
        vals = {}
        for name in self.order:
            v = self.raw.get(name)
            if isinstance(v, self.torch.Tensor):
                vals[name] = v.detach().cpu().numpy()
        for name in self.inputs:
            vals[name] = np.asarray(feeds[name])
        return vals

    def _transpose_input(self, name, perm):
        """Put a Transpose (``perm``) between input ``name`` and the nodes that read it."""
        t = name + "/nhwc"
        nodes = {}
        for k, node in self.calls.items():
            if node.kind == "call" and name in node.refs:
                node.args = _rename(node.args, name, t)
                node.kwargs = _rename(node.kwargs, name, t)
                node.refs = [t if r == name else r for r in node.refs]
            nodes[k] = node
            if k == name:
                nodes[t] = _Node(t, "call", _Method("permute"), (_Ref(name), tuple(perm)),
                                 where="the input's transposition to N x H x W x C", op="Transpose")
        self.calls = nodes
        self.transposed[name] = tuple(perm)
        self._index()

    def _untranspose(self, name):
        t = name + "/nhwc"
        for node in self.calls.values():
            if node.kind == "call" and t in node.refs and node.name != t:
                node.args = _rename(node.args, t, name)
                node.kwargs = _rename(node.kwargs, t, name)
                node.refs = [name if r == t else r for r in node.refs]
        self.calls.pop(t, None)
        self.transposed.pop(name, None)
        self._index()

    def _run(self, feeds):
        self.failure = self.failure_node = None
        if self.how == "fx":
            self._run_fx(feeds)
        else:
            self._record(feeds)

    def _run_fx(self, feeds):
        torch = self.torch
        env: Dict[str, Any] = {}
        failed = set()
        raw = {k: v for k, v in self.raw.items() if self.calls.get(k) is not None and self.calls[k].kind == "const"}
        with torch.no_grad():
            for name, node in self.calls.items():
                if node.kind == "input":
                    env[name] = self._tensor(feeds[name])
                    raw[name] = env[name]
                    continue
                if node.kind == "const":
                    env[name] = raw[name]
                    continue
                if any(r in failed for r in node.refs):
                    failed.add(name)
                    continue
                try:
                    v = node.fn(*_subst(node.args, env), **_subst(node.kwargs, env))
                except Exception as e:
                    failed.add(name)
                    if self.failure is None:
                        self.failure = "%s: %s" % (node.where, _one_line(e))
                        self.failure_node = name
                    continue
                env[name] = v
                raw[name] = self._snapshot(v)
        self.raw = raw

    def _record(self, feeds):
        """The forward run on ``feeds`` with every torch.nn module call and every torch
        function between them recorded as a node."""
        torch = self.torch
        from torch.overrides import TorchFunctionMode
        g = self
        nodes: Dict[str, _Node] = {}
        raw: Dict[str, Any] = {}
        ids: Dict[int, str] = {}
        keep: List[Any] = []
        used: Dict[str, int] = {}
        stack: List[str] = []
        busy = [False]
        mod_names = {id(m): n for n, m in self.module.named_modules()}

        def fresh(base):
            k = used.get(base, 0)
            used[base] = k + 1
            return base if k == 0 else "%s_%d" % (base, k)

        def to_refs(x):
            if isinstance(x, torch.Tensor):
                n = ids.get(id(x))
                return _Ref(n) if n is not None else x.detach().clone()
            if isinstance(x, tuple):
                return tuple(to_refs(v) for v in x)
            if isinstance(x, list):
                return [to_refs(v) for v in x]
            if isinstance(x, dict):
                return {k: to_refs(v) for k, v in x.items()}
            return x

        def add(*a):
            busy[0] = True
            try:
                _add(*a)
            finally:
                busy[0] = False

        def _add(base, fn, args, kwargs, out, where, op):
            name = fresh(base)
            node = _Node(name, "call", fn, to_refs(args), to_refs(kwargs), where=where, op=op)
            nodes[name] = node
            raw[name] = g._snapshot(out)
            if isinstance(out, torch.Tensor):
                ids[id(out)] = name
                keep.append(out)
            elif isinstance(out, (tuple, list)):
                for k, v in enumerate(out):
                    if isinstance(v, torch.Tensor):
                        sub = "%s:%d" % (name, k)
                        nodes[sub] = _Node(sub, "call", operator.getitem, (_Ref(name), k), where=where, op="Split")
                        raw[sub] = v.detach().clone()
                        ids[id(v)] = sub
                        keep.append(v)

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if stack or busy[0] or not _returns_tensor(out, torch):
                    return out
                if not any(isinstance(a, torch.Tensor) and id(a) in ids for a in _leaves((args, kwargs))):
                    return out
                fname = _fn_name(func)
                add(fname.strip("_") or "op", func, args, kwargs, out, "function %s" % fname,
                    _FUNCTION_OPS.get(fname, fname))
                return out

        def leaf(m):
            return type(m).__module__.startswith("torch.nn") and type(m).__name__ in _MODULE_OPS or \
                type(m).__module__.startswith("torch.nn.modules") and not list(m.children())

        def pre(m, args, kwargs):
            stack.append(mod_names.get(id(m), type(m).__name__))

        def post(m, args, kwargs, out):
            qual = stack.pop()
            if stack:
                return None
            add(qual, m, args, kwargs, out, "module '%s' (%s)" % (qual, type(m).__name__), _module_op(m))
            return None

        hooks = []
        for m in self.module.modules():
            if leaf(m):
                hooks.append(m.register_forward_pre_hook(pre, with_kwargs=True))
                hooks.append(m.register_forward_hook(post, with_kwargs=True))
        xs = []
        for name in self.inputs:
            x = self._tensor(feeds[name])
            nodes[name] = _Node(name, "input", None, where="input '%s'" % name, op="Input")
            raw[name] = x
            ids[id(x)] = name
            keep.append(x)
            xs.append(x)
        for name, perm in self.transposed.items():
            k = self.inputs.index(name)
            t = name + "/nhwc"
            nodes[t] = _Node(t, "call", _Method("permute"), (_Ref(name), perm), where="the input's transposition "
                             "to N x H x W x C", op="Transpose")
            xs[k] = xs[k].permute(*perm)
            raw[t] = xs[k]
            ids[id(xs[k])] = t
            keep.append(xs[k])
        try:
            with torch.no_grad(), Mode():
                self.module(*xs)
        except Exception as e:
            where = ("module '%s'" % stack[-1]) if stack else "its forward"
            from engine.ports.torch_export import _error_line
            line = _error_line(e, inspect.getsourcefile(type(self.module)) or "")
            self.failure = "%s%s: %s" % (where, line, _one_line(e))
            self.failure_node = None
        finally:
            for h in hooks:
                h.remove()
        self.calls, self.raw = nodes, raw
        self._index()

    def run_part(self, inputs, output, values):
        """The value of ``output`` computed by the module's calls between the tensors ``inputs``
        and ``output``, the tensors ``inputs`` fed ``values[name]`` (a graph input the part
        reaches otherwise is taken from ``values`` too; constants are the module's own)."""
        torch = self.torch
        stop = set(inputs)
        seen = set()
        stack = [output]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            node = self.calls.get(t)
            if node is None:
                raise PortError("the PyTorch module %s has no tensor '%s'" % (self.label, t))
            if t in stop or node.kind != "call" or not any(r in self.bit for r in node.refs):
                continue
            stack.extend(node.refs)
        env: Dict[str, Any] = {}
        with torch.no_grad():
            for name, node in self.calls.items():
                if name not in seen:
                    continue
                if name in stop or node.kind == "input":
                    if name not in values:
                        raise PortError("no value for '%s' to run the PyTorch module's part for '%s'" % (name, output))
                    env[name] = self._tensor(values[name])
                elif node.kind != "call" or not any(r in self.bit for r in node.refs):
                    env[name] = self._snapshot(self.raw.get(name))
                else:
                    try:
                        env[name] = node.fn(*_subst(node.args, env), **_subst(node.kwargs, env))
                    except Exception as e:
                        raise PortError("the PyTorch module %s raised in %s: %s" % (self.label, node.where,
                                                                                     _one_line(e))) from None
        v = env[output]
        if not isinstance(v, torch.Tensor):
            raise PortError("the PyTorch module's '%s' is not a tensor" % output)
        return v.detach().cpu().numpy()


    def constants(self, inputs, output):
        """The weights the part from ``inputs`` to ``output`` reads, by name: the parameters and
        buffers of the modules it calls, the attributes it fetches, the tensors a recorded call
        was given that no other call made (PortGraph.constants)."""
        torch = self.torch
        stop = set(inputs)
        out: Dict[str, np.ndarray] = {}
        seen = set()
        stack = [output]
        while stack:
            t = stack.pop()
            if t in seen or t in stop:
                continue
            seen.add(t)
            node = self.calls.get(t)
            if node is None or node.kind == "input":
                continue
            if node.kind == "const":
                v = self.raw.get(t)
                if isinstance(v, torch.Tensor):
                    out[t] = v.detach().cpu().numpy()
                continue
            if isinstance(node.fn, torch.nn.Module):
                for name, v in list(node.fn.named_parameters()) + list(node.fn.named_buffers()):
                    out["%s.%s" % (t, name)] = v.detach().cpu().numpy()
            for k, v in enumerate(x for x in _leaves((node.args, node.kwargs)) if isinstance(x, torch.Tensor)):
                out["%s:const%d" % (t, k)] = v.detach().cpu().numpy()
            stack.extend(node.refs)
        return out


class _Method:
    """``obj.method(*args, **kwargs)``: fx's call_method as a callable."""

    def __init__(self, name):
        self.name = name
        self.__name__ = name

    def __call__(self, obj, *args, **kwargs):
        return getattr(obj, self.name)(*args, **kwargs)


def _rename(x, old, new):
    if isinstance(x, _Ref):
        return _Ref(new) if x.name == old else x
    if isinstance(x, tuple):
        return tuple(_rename(v, old, new) for v in x)
    if isinstance(x, list):
        return [_rename(v, old, new) for v in x]
    if isinstance(x, dict):
        return {k: _rename(v, old, new) for k, v in x.items()}
    return x


def _dims(shape):
    return "x".join(str(int(d)) for d in shape) if len(shape) else "a scalar"


def _leaves(x):
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from _leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    else:
        yield x


def _returns_tensor(out, torch):
    return any(isinstance(v, torch.Tensor) for v in _leaves(out))


def _module_op(m):
    name = type(m).__name__
    if name.startswith(("AdaptiveAvgPool", "AdaptiveMaxPool")):
        size = getattr(m, "output_size", 1)
        one = size == 1 or (isinstance(size, (tuple, list)) and all(s == 1 for s in size))
        if not one:
            return "AveragePool" if "Avg" in name else "MaxPool"
    return _MODULE_OPS.get(name, name)


def _fetch_attr(root, target):
    obj = root
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------- the comparisons
def _not_explained(result):
    """Whether nothing before the point where the module stopped departs: no departing layer,
    or the first is a value the module did not compute."""
    if result.first_departing is None:
        return True
    try:
        first = result.row(result.first_departing_label) if result.first_departing_label else None
    except KeyError:
        first = None
    return first is not None and first.status in ("not run", "unmatched") and first.tensor_shape is None


class TorchReference(PortGraph):
    """A PyTorch module as the *reference* of a Caffe net converted from it (``--reference
    torch``): the same graph, but each Caffe layer's own error is measured by running the
    engine's layer on the module's values of its inputs and comparing with the module's value
    (``can_rerun = False``), the module's outputs being the truth."""

    kind = "torch-reference"
    can_rerun = False

    def __init__(self, graph):
        self.graph = graph
        super().__init__(graph.label, graph.inputs, graph.nodes)
        self.notes = graph.notes

    def run_all(self, feeds):
        vals = self.graph.run_all(feeds)
        PortGraph.__init__(self, self.graph.label, self.graph.inputs, self.graph.nodes)
        self.failure, self.notes = self.graph.failure, self.graph.notes
        return vals

    def run_part(self, inputs, output, values):
        return self.graph.run_part(inputs, output, values)


def compare_torch(net, module, state_dict=None, inputs=None, preprocess=None, rtol=None, seed=0,
                  reference="caffe"):
    """``net`` against a PyTorch module (an ``nn.Module``, ``"FILE.py:FACTORY"`` or a
    :class:`TorchGraph` of one, with ``state_dict`` loaded): ``reference="caffe"`` checks the
    module as a port of the Caffe net; ``reference="torch"`` checks the Caffe net as a
    conversion of the module.  Returns
    the :class:`~engine.ports.compare.PortComparison`; a module that raises (where no departing
    layer upstream explains it) is a :class:`PortError` naming the module and the exception."""
    from engine.ports.compare import DEFAULT_RTOL, compare_port
    if reference not in ("caffe", "torch"):
        raise PortError("reference must be 'caffe' (the module is a port of the net) or 'torch' (the net is a "
                        "conversion of the module), not %r" % (reference,))
    if isinstance(module, TorchGraph):
        graph, label = module, module.label
        if state_dict is not None:
            load_state_dict(graph.module, state_dict)
    else:
        module, label = load_torch_module(module, state_dict)
        graph = TorchGraph(module, label)
    port = graph if reference == "caffe" else TorchReference(graph)
    result = compare_port(net, port, inputs, preprocess, DEFAULT_RTOL if rtol is None else rtol, seed)
    notes = list(result.notes)
    if graph.failure:
        notes.insert(0, "the PyTorch module %s cannot run whole: it raised in %s" % (label, graph.failure))
    if reference == "torch":
        notes.insert(0, "reference: the PyTorch module %s; the Caffe net %s is checked against it (each Caffe "
                        "layer run on the module's values of its inputs). A diagnosis says what the module does "
                        "that the Caffe layer does not: change the Caffe net to match" % (label, result.net))
    result.notes[:] = list(dict.fromkeys(graph.notes + notes))
    if reference == "torch":                     # the port of the texts is the module, the reference here
        result.reference = "port"
        for d in result.diagnosis:
            d.text = re.sub(r"\bthe port\b", "the PyTorch module", d.text)
    if graph.failure and _not_explained(result):
        raise PortError("the PyTorch module %s raised in %s" % (label, graph.failure))
    return result


__all__ = ["TorchGraph", "TorchReference", "compare_torch", "load_torch_module", "load_state_dict"]
