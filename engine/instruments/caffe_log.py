"""Read a Caffe glog log (training, test, time) into the engine's record types.

    log = read_caffe_log("train.log")        # or parse_caffe_log(text)
    log.nets          # one LogNet per "Initializing net from parameters" (layers, shapes, memory, ...)
    log.steps         # StepRecords from the debug_info lines ([Forward] / [Backward] / [Update])
    log.train         # TrainPoints: iteration, loss, lr, train net outputs, speed
    log.test          # TestPoints: iteration, test net, test loss, outputs
    log.series("loss"), log.series("accuracy", test=True)   # (iterations, values)
    log.timing        # ``caffe time`` per-layer averages, when present

Lines are glog's: ``I1121 19:30:28.165 24645 net.cpp:53] message`` (with or
without the year; any file name, so the engine's own glog-like output reads
too); a line without that prefix continues the previous message.

debug_info lines become :class:`engine.instruments.debug.LayerRecord`\\ s whose
:class:`~engine.instruments.debug.BlobStats` carry only Caffe's number (``asum_mean``, the
mean |x|; shape and count from the "Top shape" lines when known; every other
statistic NaN).  Consecutive [Forward] lines form one forward step, [Backward]
lines one backward step; the "All net params" line goes into the backward
step's ``meta``.  Steps get the iteration of the next "Iteration N" line.
Blob indices come from the net printed in the Init transcript (with Caffe's
Split layers re-inserted), so records line up with the engine's.
"""
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from engine.instruments.debug import BlobRecord, BlobStats, LayerRecord, StepRecord
from engine.proto import caffe_pb2

GLOG = re.compile(r"^([IWEF])(\d{4,8}) (\d\d:\d\d:\d\d\.\d+)\s+(\d+) ([^:\]\s]+):(\d+)\] ?(.*)$")
_NUM = r"([-+]?(?:nan|inf|[0-9.]+(?:e[-+]?\d+)?))"
FWD_TOP = re.compile(r"^\s*\[Forward\] Layer (.+?), top blob (.+?) data: " + _NUM + r"$")
FWD_PARAM = re.compile(r"^\s*\[Forward\] Layer (.+?), param blob (.+?) data: " + _NUM + r"$")
BWD_BOTTOM = re.compile(r"^\s*\[Backward\] Layer (.+?), bottom blob (.+?) diff: " + _NUM + r"$")
BWD_PARAM = re.compile(r"^\s*\[Backward\] Layer (.+?), param blob (\d+) diff: " + _NUM + r"$")
BWD_ALL = re.compile(r"^\s*\[Backward\] All net params \(data, diff\): L1 norm = \(" + _NUM + ", " + _NUM +
                     r"\); L2 norm = \(" + _NUM + ", " + _NUM + r"\)$")
# the per-blob debug_info lines: (pattern, step kind, blob role, data or diff)
_BLOB_LINES = ((FWD_TOP, "forward", "top", "data"), (FWD_PARAM, "forward", "param", "data"),
               (BWD_BOTTOM, "backward", "bottom", "diff"), (BWD_PARAM, "backward", "param", "diff"))
UPD_OWN = re.compile(r"^\s*\[Update\] Layer (.+?), param (.+?) data: " + _NUM + "; diff: " + _NUM + "$")
UPD_SHARED = re.compile(r"^\s*\[Update\] Layer (.+?), param blob (.+?) \(owned by layer (.+?), param (.+?)\) "
                        r"diff: " + _NUM + "$")
ITER_LOSS = re.compile(r"^Iteration (\d+)(?: \(" + _NUM + r" iter/s, " + _NUM + r"s/(\d+) iters\))?, loss = "
                       + _NUM + "$")
ITER_LR = re.compile(r"^Iteration (\d+), lr = " + _NUM + "$")
TESTING = re.compile(r"^Iteration (\d+), Testing net \(#(\d+)\)$")
TRAIN_OUT = re.compile(r"^\s*Train net output #(\d+): (.+?) = " + _NUM + r"(?: \(\* " + _NUM + " = " + _NUM +
                       r" loss\))?$")
TEST_OUT = re.compile(r"^\s*Test net output #(\d+): (.+?) = " + _NUM + r"(?: \(\* " + _NUM + " = " + _NUM +
                      r" loss\))?$")
TEST_LOSS = re.compile(r"^Test loss: " + _NUM + "$")
BATCH = re.compile(r"^Batch (\d+), (.+?) = " + _NUM + "$")
SCORE_LOSS = re.compile(r"^Loss: " + _NUM + "$")
TIME_LAYER = re.compile(r"^\s*(.+?)\t(forward|backward): " + _NUM + " ms\\.$")
TIME_AVG = re.compile(r"^Average (Forward pass|Backward pass|Forward-Backward): " + _NUM + " ms\\.$")
TIME_TOTAL = re.compile(r"^Total Time: " + _NUM + " ms\\.$")
TIME_ITER = re.compile(r"^Iteration: (\d+) forward-backward time: " + _NUM + " ms\\.$")
TOP_SHAPE = re.compile(r"^Top shape: ((?:\d+ )*)\((\d+)\)$")
MEMORY = re.compile(r"^Memory required for data: (\d+)$")
NEEDS = re.compile(r"^(.+?) (needs|does not need) backward computation\.$")
OUTPUT = re.compile(r"^This network produces output (.+)$")


def _f(s):
    return float(s) if s is not None else None


@dataclass
class LogMessage:
    level: str
    date: str
    time: str
    thread: int
    file: str
    line: int
    text: str
    lineno: int          # 1-based line number in the log


@dataclass
class LogNet:
    """What one Net Init said."""
    name: str = ""
    phase: Optional[str] = None
    layers: List[dict] = field(default_factory=list)   # {"name", "type", "bottoms", "tops", "params"}
    top_shapes: Dict[str, List[int]] = field(default_factory=dict)
    memory_required: Optional[int] = None
    need_backward: Dict[str, bool] = field(default_factory=dict)
    outputs: List[str] = field(default_factory=list)
    transcript: List[tuple] = field(default_factory=list)     # (level, message) of net.cpp's lines
    done: bool = False

    def layer(self, name):
        for l in self.layers:
            if l["name"] == name:
                return l
        return None

    def to_dict(self):
        return asdict(self)


@dataclass
class TrainPoint:
    iteration: int
    loss: Optional[float] = None
    lr: Optional[float] = None
    iters_per_s: Optional[float] = None
    seconds: Optional[float] = None
    outputs: Dict[str, List[float]] = field(default_factory=dict)


@dataclass
class TestPoint:
    iteration: Optional[int]
    net_id: int
    loss: Optional[float] = None
    outputs: Dict[str, List[float]] = field(default_factory=dict)


@dataclass
class CaffeLog:
    path: Optional[str] = None
    messages: List[LogMessage] = field(default_factory=list)
    nets: List[LogNet] = field(default_factory=list)
    steps: List[StepRecord] = field(default_factory=list)
    train: List[TrainPoint] = field(default_factory=list)
    test: List[TestPoint] = field(default_factory=list)
    scores: dict = field(default_factory=dict)      # ``caffe test``: {"batches": {name: [...]}, "loss", "means"}
    timing: dict = field(default_factory=dict)      # ``caffe time``: {"layers": {name: {"forward", "backward"}}, ...}
    fatal: List[str] = field(default_factory=list)

    def series(self, name="loss", test=False, net_id=0):
        """(iterations, values) of the training loss / lr / an output, or of a test output."""
        xs, ys = [], []
        if test:
            for p in self.test:
                if p.net_id != net_id:
                    continue
                v = p.loss if name == "loss" and "loss" not in p.outputs else \
                    (p.outputs.get(name, [None])[0] if name in p.outputs else None)
                if v is not None:
                    xs.append(p.iteration)
                    ys.append(v)
            return xs, ys
        for p in self.train:
            if name in ("loss", "lr") and (name != "loss" or "loss" not in p.outputs or p.loss is not None):
                v = getattr(p, name)
            else:
                v = p.outputs.get(name, [None])[0]
            if v is not None:
                xs.append(p.iteration)
                ys.append(v)
        return xs, ys

    def net_for_layer(self, name):
        for n in self.nets:
            if n.layer(name) is not None:
                return n
        return None

    def to_dict(self):
        return {"path": self.path, "nets": [n.to_dict() for n in self.nets],
                "steps": [s.to_dict() for s in self.steps],
                "train": [asdict(p) for p in self.train], "test": [asdict(p) for p in self.test],
                "scores": self.scores, "timing": self.timing, "fatal": list(self.fatal)}


# ---------------------------------------------------------------------- reading
def read_caffe_log(path):
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        log = parse_caffe_log(f.read())
    log.path = str(path)
    return log


def split_messages(text):
    """glog lines -> LogMessages (continuation lines joined with newlines)."""
    out = []
    last = None
    for n, line in enumerate(text.splitlines(), 1):
        m = GLOG.match(line)
        if m:
            last = LogMessage(m.group(1), m.group(2), m.group(3), int(m.group(4)), m.group(5), int(m.group(6)),
                              m.group(7), n)
            out.append(last)
        elif last is not None and not line.startswith("WARNING: Logging before"):
            last.text += "\n" + line
    return out


def _net_from_prototxt(lognet, text):
    """Fill the layer list from the printed (filtered) NetParameter, with Splits inserted."""
    try:
        from google.protobuf import text_format

        from engine.core.splits import insert_splits
        p = caffe_pb2.NetParameter()
        text_format.Parse(text, p)
        lognet.name = p.name
        if p.HasField("state"):
            lognet.phase = "TRAIN" if p.state.phase == 0 else "TEST"
        full, _ = insert_splits(p)
    except Exception:
        return False
    for lp in full.layer:
        lognet.layers.append({"name": lp.name, "type": lp.type, "bottoms": list(lp.bottom),
                              "tops": list(lp.top), "params": [ps.name for ps in lp.param]})
    return True


class _Parser:
    def __init__(self):
        self.log = CaffeLog()
        self.net = None          # LogNet being initialised
        self.setting_up = None   # layer whose "Top shape" lines come next
        self.top_k = 0
        self.step = None         # StepRecord being filled
        self.pending = []        # steps waiting for their iteration
        self.train = None        # TrainPoint of the last display
        self.testing = None      # TestPoint being filled
        self.ids = 0

    # ------------------------------------------------------------------ helpers
    def _lookup(self, layer_name):
        for n in reversed(self.log.nets):
            l = n.layer(layer_name)
            if l is not None:
                return n, l
        return None, None

    def _close_step(self):
        if self.step is not None:
            self.log.steps.append(self.step)
            self.pending.append(self.step)
            self.step = None

    def _step_for(self, kind, layer_name):
        s = self.step
        if s is not None and s.kind == kind:
            last = s.layers[-1].layer if s.layers else None
            if last == layer_name or all(l.layer != layer_name for l in s.layers):
                return s
        self._close_step()
        self.ids += 1
        s = self.step = StepRecord(self.ids, kind, -1, -1, "caffe-log",
                                   meta={"source": "caffe-log"})
        if self.testing is not None:
            s.meta["test_net"] = self.testing.net_id
        return s

    def _layer_rec(self, step, layer_name, direction):
        if step.layers and step.layers[-1].layer == layer_name:
            return step.layers[-1]
        net, l = self._lookup(layer_name)
        index = net.layers.index(l) if l is not None else -1
        rec = LayerRecord(index, layer_name, l["type"] if l else "", direction, float("nan"))
        step.layers.append(rec)
        if index >= 0:
            step.start = index if step.start < 0 else (min(step.start, index) if direction == "forward"
                                                        else max(step.start, index))
            step.end = index if step.end < 0 else (max(step.end, index) if direction == "forward"
                                                    else min(step.end, index))
        return rec

    def _stats(self, value, blob_name=None):
        shape = None
        if blob_name is not None:
            for n in reversed(self.log.nets):
                if blob_name in n.top_shapes:
                    shape = n.top_shapes[blob_name]
                    break
        if shape is None:
            return BlobStats.only_asum(value)
        count = 1
        for d in shape:
            count *= d
        return BlobStats.only_asum(value, tuple(shape), count)

    def _blob_index(self, layer_name, role, name):
        _, l = self._lookup(layer_name)
        if l is None:
            return -1
        names = l["bottoms"] if role == "bottom" else l["tops"] if role == "top" else l["params"]
        if role == "param":
            if name.isdigit():
                return int(name)
            return names.index(name) if name in names else -1
        return names.index(name) if name in names else -1

    def _add_blob(self, rec, role, name, which, value, by_shape=True):
        idx = self._blob_index(rec.layer, role, name)
        if idx < 0:
            idx = sum(1 for b in rec.blobs if b.role == role)
        b = rec.blob(role, idx)
        if b is None:
            b = BlobRecord(name, role, idx)
            rec.blobs.append(b)
        setattr(b, which, self._stats(value, name if role != "param" and by_shape else None))
        if rec.direction == "backward" and role in ("bottom", "param"):
            b.propagate = True

    def _set_iteration(self, it):
        for s in self.pending:
            if s.iteration is None:
                s.iteration = it
        self.pending = []

    # ------------------------------------------------------------------ one message
    def feed(self, msg):
        text = msg.text
        lg = self.log
        if msg.level == "F":
            lg.fatal.append(text)
        if text.startswith("Initializing net from parameters:"):
            self._close_step()
            self.net = LogNet()
            lg.nets.append(self.net)
            body = text.split("\n", 1)[1] if "\n" in text else ""
            _net_from_prototxt(self.net, body)
            self.net.transcript.append((msg.level, text))
            return
        if self.net is not None and not self.net.done and msg.file.startswith("net."):
            self._init_line(msg)
            return
        for pattern, kind, role, side in _BLOB_LINES:
            m = pattern.match(text)
            if m:
                rec = self._layer_rec(self._step_for(kind, m.group(1)), m.group(1), kind)
                self._add_blob(rec, role, m.group(2), side, _f(m.group(3)))
                return
        m = BWD_ALL.match(text)
        if m:
            s = self.step if self.step is not None and self.step.kind == "backward" else None
            if s is not None:
                s.meta.update(l1_data=_f(m.group(1)), l1_diff=_f(m.group(2)),
                              l2_data=_f(m.group(3)), l2_diff=_f(m.group(4)))
            self._close_step()
            return
        m = UPD_OWN.match(text) or UPD_SHARED.match(text)
        if m:
            rec = self._layer_rec(self._step_for("update", m.group(1)), m.group(1), "update")
            if m.re is UPD_OWN:
                self._add_blob(rec, "param", m.group(2), "data", _f(m.group(3)))
                self._add_blob(rec, "param", m.group(2), "diff", _f(m.group(4)))
            else:
                self._add_blob(rec, "param", m.group(2), "diff", _f(m.group(5)))
            return
        self._close_step()
        self._solver_line(msg, text)

    def _init_line(self, msg):
        net, text = self.net, msg.text
        net.transcript.append((msg.level, text))
        if text.startswith("Setting up "):
            self.setting_up = text[len("Setting up "):]
            self.top_k = 0
            return
        m = TOP_SHAPE.match(text)
        if m and self.setting_up is not None:
            shape = [int(d) for d in m.group(1).split()]
            l = net.layer(self.setting_up)
            if l is not None and self.top_k < len(l["tops"]):
                net.top_shapes[l["tops"][self.top_k]] = shape
            self.top_k += 1
            return
        m = MEMORY.match(text)
        if m:
            net.memory_required = int(m.group(1))
            return
        m = NEEDS.match(text)
        if m:
            net.need_backward[m.group(1)] = m.group(2) == "needs"
            return
        m = OUTPUT.match(text)
        if m:
            net.outputs.append(m.group(1))
            return
        if text.startswith("Creating Layer ") and net.layer(text[len("Creating Layer "):]) is None:
            net.layers.append({"name": text[len("Creating Layer "):], "type": "", "bottoms": [], "tops": [],
                               "params": []})
            return
        if text == "Network initialization done.":
            net.done = True
            self.setting_up = None

    def _solver_line(self, msg, text):
        lg = self.log
        m = ITER_LOSS.match(text)
        if m:
            it = int(m.group(1))
            self._set_iteration(it)
            self.testing = None
            p = TrainPoint(it, loss=_f(m.group(5)), iters_per_s=_f(m.group(2)), seconds=_f(m.group(3)))
            lg.train.append(p)
            self.train = p
            return
        m = TRAIN_OUT.match(text)
        if m and self.train is not None:
            self.train.outputs.setdefault(m.group(2), []).append(_f(m.group(3)))
            return
        m = ITER_LR.match(text)
        if m:
            it = int(m.group(1))
            self._set_iteration(it)
            if self.train is not None and self.train.iteration == it:
                self.train.lr = _f(m.group(2))
            else:
                self.train = TrainPoint(it, lr=_f(m.group(2)))
                lg.train.append(self.train)
            return
        m = TESTING.match(text)
        if m:
            it = int(m.group(1))
            self._set_iteration(it)
            self.testing = TestPoint(it, int(m.group(2)))
            lg.test.append(self.testing)
            return
        m = TEST_LOSS.match(text)
        if m and self.testing is not None:
            self.testing.loss = _f(m.group(1))
            return
        m = TEST_OUT.match(text)
        if m and self.testing is not None:
            self._set_iteration(self.testing.iteration)
            self.testing.outputs.setdefault(m.group(2), []).append(_f(m.group(3)))
            return
        m = BATCH.match(text)
        if m:
            lg.scores.setdefault("batches", {}).setdefault(m.group(2), []).append(_f(m.group(3)))
            return
        m = SCORE_LOSS.match(text)
        if m:
            lg.scores["loss"] = _f(m.group(1))
            return
        if "batches" in lg.scores and "loss" in lg.scores:     # after caffe test's "Loss: x"
            m = re.match(r"^(.+?) = " + _NUM + r"(?: \(\* " + _NUM + " = " + _NUM + r" loss\))?$", text)
            if m:
                lg.scores.setdefault("means", {})[m.group(1)] = _f(m.group(2))
                return
        m = TIME_ITER.match(text)
        if m:
            lg.timing.setdefault("iterations", []).append(_f(m.group(2)))
            return
        m = TIME_LAYER.match(text)
        if m:
            lg.timing.setdefault("layers", {}).setdefault(m.group(1).strip(), {})[m.group(2)] = _f(m.group(3))
            return
        m = TIME_AVG.match(text)
        if m:
            key = {"Forward pass": "forward_ms", "Backward pass": "backward_ms",
                   "Forward-Backward": "forward_backward_ms"}[m.group(1)]
            lg.timing[key] = _f(m.group(2))
            return
        m = TIME_TOTAL.match(text)
        if m:
            lg.timing["total_ms"] = _f(m.group(1))


def parse_caffe_log(text):
    """A CaffeLog from the text of a glog log."""
    p = _Parser()
    msgs = split_messages(text)
    p.log.messages = msgs
    for msg in msgs:
        p.feed(msg)
    p._close_step()
    return p.log
