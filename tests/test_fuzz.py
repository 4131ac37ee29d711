"""Fuzzing: bad prototxts, caffemodels, binaryprotos and layer parameters.

Three campaigns, each driven by hypothesis:

- ``test_fuzz_prototxt``: the bundled ``examples/**/*.prototxt`` nets (and, when
  ``../shared`` is beside the repo, the zoo and Caffe's test nets) mutated line
  by line (delete / duplicate / swap lines, rename strings and enum values, flip
  numbers, insert fields, truncate, flip characters or raw bytes, swap / delete /
  duplicate layer blocks), then ``Net(...)`` and, for small nets, forward and
  backward with random inputs.
- ``test_fuzz_caffemodel`` / ``test_fuzz_hdf5_weights`` / ``test_fuzz_blobproto``:
  caffemodels and ``.h5`` weights saved from the bundled nets, and small BlobProto
  mean files, truncated, byte-flipped, spliced, padded (caffemodels also edited as
  messages: blob shapes, value counts, names); then ``copy_from`` (which must leave
  every param as it was when it raises) and the readers.
- ``test_fuzz_layers``: every registered layer type (Python layers aside) built
  with random parameters, blob counts, shapes, dtypes and values (NaN, Inf,
  huge), then SetUp, Forward, Backward and a Forward after a reshape.

The rule: nothing leaves the engine but a subclass of
:class:`engine.core.errors.CaffeError`; no example hangs (a per-example SIGALRM
timeout records a hang), no RuntimeWarning leaks out of a layer, and no
prefetch thread is left behind.  Each example runs under a soft address-space
limit (``FUZZ_MEMORY_GB`` above the current size, default 4), so a model that
asks for absurd amounts of memory gets a MemoryError instead of the OOM killer;
:func:`engine.core.backend.translate_gpu_errors` (the call the Net ranges are meant to
make) turns that into a DeviceError.  Findings are collected for the whole
campaign and reported together at the end (with reproducers written to
``FUZZ_FINDINGS_DIR`` when set).

Size: the default is the CI campaign (deterministic, a few hundred examples,
well under 90 s in all).  ``FUZZ_EXAMPLES=5000`` runs that many examples per
campaign with a random seed (``FUZZ_SEED`` fixes it); ``FUZZ_TIMEOUT`` sets the
per-example timeout in seconds (default 120: a hang guard, never a speed target).
"""
import collections
import contextlib
import datetime
import gc
import logging
import os
import re
import resource
import signal
import threading
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from engine.core import backend
from engine.core.blob import Blob
from engine.core.errors import CaffeError
from engine.core.net import TEST, TRAIN, Net
from engine.proto import caffe_pb2

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CAFFE_SHARED", ROOT.parent / "shared"))

LONG_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0") or 0)
FUZZ_SEED = os.environ.get("FUZZ_SEED")
TIMEOUT_S = float(os.environ.get("FUZZ_TIMEOUT", "120"))   # a hang guard: CI examples take milliseconds
MEMORY_HEADROOM = int(float(os.environ.get("FUZZ_MEMORY_GB", "4")) * (1 << 30))
FINDINGS_DIR = os.environ.get("FUZZ_FINDINGS_DIR")

# CI sizes (examples per campaign); the long campaign uses FUZZ_EXAMPLES for each.
# (halved from 1200/500/100/500/1500 when CI neared its 15 minutes: the same deterministic
# campaigns, their first halves; the long runs of docs/fuzzing.md are where the volume is)
CI_EXAMPLES = {"prototxt": 600, "caffemodel": 250, "hdf5": 60, "blobproto": 250, "layers": 800}

# Nets bigger than this are built but not run forward (time, not correctness).
MAX_RUN_ELEMENTS = 4_000_000
MAX_RUN_PARAMS = 4_000_000
MAX_LAYER_TOP = 1_000_000


# =========================================================================== harness
class FuzzTimeout(BaseException):
    """Raised by the per-example alarm (a BaseException so that no ``except
    Exception`` in the engine swallows it)."""


def _on_alarm(signum, frame):
    raise FuzzTimeout("example ran longer than %.0f s" % TIMEOUT_S)


def _vm_size():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


@contextlib.contextmanager
def _limits():
    """Per-example timeout (SIGALRM) and soft address-space cap; warnings recorded."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield caught
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        except (ValueError, OSError):
            pass


def _engine_frame(tb):
    """(file, function, line, class of ``self`` or "") of the innermost engine frame."""
    where = ("?", "?", 0, "")
    while tb is not None:
        code = tb.tb_frame.f_code
        fname = code.co_filename.replace(os.sep, "/")
        if "/engine/" in fname:
            obj = tb.tb_frame.f_locals.get("self")
            where = (fname.split("/engine/")[-1], code.co_name, tb.tb_lineno,
                     type(obj).__name__ if obj is not None else "")
        tb = tb.tb_next
    return where


# Escapes that are known and reported to the owners of the code (engine/core/layers/*): bugs in
# a layer's arithmetic on unusual shapes where Caffe computes a result, not error handling.
# They are counted and printed, not failed on (FUZZ_STRICT=1 fails on them too).  An entry:
# (exception type, engine file, class of ``self`` in the innermost engine frame or "" for
# any, regex on the message, reason).  Remove an entry when its bug is fixed.
KNOWN = [
    ("ZeroDivisionError", "layers/neuron.py", "PReLULayer", r"",
     "PReLU on a bottom with a zero dimension; Caffe runs an empty loop"),
    ("ValueError", "layers/neuron.py", "PReLULayer", r"cannot reshape array",
     "PReLU reshaped to a channel count other than its slopes'; Caffe reads slope[c] for the new "
     "channels (the first ones when fewer; out of bounds when more)"),
    ("ValueError", "layers/common.py", "", r"zero-size array to reduction operation",
     "Softmax over an axis of size 0; Caffe runs empty loops"),
]


def _known(exc, f, cls):
    for etype, efile, ecls, pattern, reason in KNOWN:
        if (type(exc).__name__ == etype and f == efile and (not ecls or ecls == cls)
                and re.search(pattern, str(exc))):
            return reason
    return None


STRICT = os.environ.get("FUZZ_STRICT") == "1"


class Campaign:
    """Runs examples, counts outcomes, collects findings (deduplicated)."""

    def __init__(self, name):
        self.name = name
        self.outcomes = collections.Counter()
        self.findings = collections.OrderedDict()   # key -> [count, message, repro file]
        self.known, self.known_text = {}, {}           # known escapes (see KNOWN) -> count
        self.examples = 0
        self.t0 = time.perf_counter()

    def run(self, fn, repro):
        """Run ``fn()``; ``repro()`` returns (suffix, bytes) reproducing the example."""
        self.examples += 1
        outcome = "ok"
        try:
            with _limits() as caught:
                try:
                    with backend.translate_gpu_errors():
                        fn()
                except CaffeError as e:
                    outcome = type(e).__name__
                    if getattr(e, "oom", False):
                        outcome += "(out of memory)"
            for w in caught:
                if issubclass(w.category, RuntimeWarning):
                    self._finding("RuntimeWarning %s (%s:%d)" % (w.message, os.path.basename(w.filename),
                                                                 w.lineno), str(w.message), repro)
        except KeyboardInterrupt:
            raise
        except FuzzTimeout as e:  # pragma: no cover - only when something hangs
            outcome = "timeout"
            f, fn, line, _ = _engine_frame(e.__traceback__)
            self._finding("timeout in %s:%s (line %d)" % (f, fn, line), str(e), repro)
        except BaseException as e:  # noqa: BLE001 - this is the point of the campaign
            if type(e).__module__.startswith("hypothesis"):
                raise   # hypothesis' own control flow (StopTest, ...)
            f, fn, line, cls = _engine_frame(e.__traceback__)
            known = _known(e, f, cls)
            outcome = ("known " if known else "escaped ") + type(e).__name__
            key = "%s in %s:%s (line %d%s)" % (type(e).__name__, f, fn, line, ", " + cls if cls else "")
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-3000:]
            if known and not STRICT:
                self.known[key] = self.known.get(key, 0) + 1
                if self.known[key] == 1:
                    self.known_text[key] = known
            else:
                self._finding(key, text, repro)
        self.outcomes[outcome] += 1
        return outcome

    def _finding(self, key, message, repro):
        if key in self.findings:
            self.findings[key][0] += 1
            return
        path = None
        if FINDINGS_DIR:
            os.makedirs(FINDINGS_DIR, exist_ok=True)
            suffix, payload = repro()
            stem = os.path.join(FINDINGS_DIR, "%s-%03d" % (self.name, len(self.findings) + 1))
            path = stem + suffix
            with open(path, "wb") as f:
                f.write(payload)
            with open(stem + ".txt", "w") as f:
                f.write(key + "\n\n" + message + "\n")
        self.findings[key] = [1, message, path]

    def summary(self):
        secs = time.perf_counter() - self.t0
        lines = ["fuzz %s: %d examples in %.1f s; outcomes: %s" % (
            self.name, self.examples, secs, ", ".join("%s=%d" % kv for kv in self.outcomes.most_common()))]
        for key, count in self.known.items():
            lines.append("known x%d: %s -- %s" % (count, key, self.known_text[key]))
        for key, (count, message, path) in self.findings.items():
            lines.append("FINDING x%d: %s%s\n%s" % (count, key, " (repro: %s)" % path if path else "",
                                                   message))
        return "\n".join(lines)

    def check(self):
        text = self.summary()
        print(text)
        report = os.environ.get("FUZZ_REPORT")
        if report:
            with open(report, "a") as f:
                f.write(text + "\n\n")
        assert not self.findings, text


def fuzz_settings(campaign):
    n = LONG_EXAMPLES or CI_EXAMPLES[campaign]
    s = settings(max_examples=n, deadline=datetime.timedelta(seconds=2 * TIMEOUT_S + 5),
                 derandomize=not LONG_EXAMPLES, database=None,
                 phases=(Phase.explicit, Phase.generate),
                 suppress_health_check=list(HealthCheck), print_blob=False)
    return s


def _with_seed(fn):
    if LONG_EXAMPLES and FUZZ_SEED:
        return hypothesis_seed(int(FUZZ_SEED))(fn)
    return fn


@pytest.fixture
def quiet_engine(tmp_path, monkeypatch):
    """Run in a scratch directory (HDF5Output and relative paths write there) with
    the engine's loggers above WARNING (Init logs every layer; fuzzing would drown)."""
    monkeypatch.chdir(tmp_path)
    logger = logging.getLogger("engine")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    backend.set_mode_cpu()
    yield tmp_path
    logger.setLevel(old)


def _assert_no_prefetch_threads():
    gc.collect()
    deadline = time.time() + 120     # a hang guard: returns as soon as they are gone
    while time.time() < deadline:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("prefetch-") and t.is_alive()]
        if not alive:
            return
        time.sleep(0.1)
        gc.collect()
    raise AssertionError("prefetch threads left running: %s" % alive)


def _close_layers(layers):
    for layer in layers:
        close = getattr(layer, "close", None)
        if close is not None:
            try:
                close()
            except CaffeError:
                pass


# =========================================================================== inputs
def _fill_inputs(net, rng, mode):
    for name in net.inputs:
        blob = net.blobs[name]
        if blob.count == 0:
            continue
        if "label" in name or name in ("sim", "y"):
            blob.data[...] = rng.integers(0, 4, blob.shape)
        elif mode == "nan":
            a = rng.normal(size=blob.shape)
            a.reshape(-1)[rng.integers(0, blob.count)] = np.nan
            blob.data[...] = a
        elif mode == "huge":
            blob.data[...] = rng.normal(size=blob.shape) * 1e37
        else:
            blob.data[...] = rng.normal(size=blob.shape)


def _param_count(net):
    return sum(b.count for l in net.layers for b in l.blobs)


def _exercise(net, rng, mode):
    """Forward (and backward when a layer needs it) a small net with random inputs."""
    try:
        if net.memory_used > MAX_RUN_ELEMENTS or _param_count(net) > MAX_RUN_PARAMS:
            return
        _fill_inputs(net, rng, mode)
        net.forward()
        if any(net.layer_need_backward):
            net.backward()
    finally:
        _close_layers(net.layers)


# =========================================================================== prototxt
def _absolutise(text, folder):
    """Data sources and mean files that exist (beside the repo root or the net) -> absolute."""
    def fix(m):
        key, path = m.group(1), m.group(2)
        for base in (ROOT, folder):
            cand = base / path
            if cand.exists():
                return '%s: "%s"' % (key, cand)
        return m.group(0)
    return re.sub(r'\b(source|mean_file)\s*:\s*"([^"]*)"', fix, text)


def _prototxt_seeds():
    files = sorted(ROOT.glob("examples/**/*.prototxt"))
    if SHARED.is_dir():
        files += sorted((SHARED / "zoo").glob("**/*.prototxt"))
        files += sorted((SHARED / "caffe_tests").glob("*.prototxt"))
    from engine.core.io import parse_prototxt
    seeds = []
    for f in files:
        if "solver" in f.name.lower():
            continue
        rel = str(f)
        if not LONG_EXAMPLES and ("/zoo/models/" in rel or "net_surgery" in rel):
            continue   # ImageNet-sized: seconds per Init; long campaign only
        text = f.read_text(errors="replace")
        try:
            parse_prototxt(text, caffe_pb2.NetParameter)
        except CaffeError:
            continue   # not a NetParameter (e.g. SolverParameter test files)
        seeds.append((f.name, _absolutise(text, f.parent)))
    return seeds


SEEDS = _prototxt_seeds()

NUMBERS = ["0", "1", "-1", "2", "3", "5", "7", "64", "-3", "255", "1000", "65536", "2147483647",
           "-2147483648", "4294967296", "99999999999999999999", "0.5", "-0.5", "1.5", "1e-30",
           "1e30", "3.4e38", "1e39", "nan", "inf", "-inf", "0x10", "1e", ""]
WORDS = ["data", "label", "loss", "conv1", "ip1", "pool1", "x", "", "TRAIN", "TEST", "MAX", "AVE",
         "STOCHASTIC", "SUM", "PROD", "LMDB", "LEVELDB", "CAFFE", "CUDNN", "DEFAULT", "PERMISSIVE",
         "STRICT", "gaussian", "xavier", "constant", "msra", "bilinear", "FULL", "VALID", "NONE",
         "BATCH_SIZE", "ASUM", "SUMSQ", "MEAN", "ACROSS_CHANNELS", "WITHIN_CHANNEL", "deploy",
         "AbsVal", "Accuracy", "ArgMax", "BatchNorm", "Concat", "Convolution", "Crop",
         "Deconvolution", "Dropout", "DummyData", "Eltwise", "Embed", "Flatten", "InnerProduct",
         "Input", "LRN", "LSTM", "Pooling", "Python", "RNN", "ReLU", "Reshape", "Scale", "Slice",
         "Softmax", "SoftmaxWithLoss", "Split", "Tile", "Bogus", "data\x00", "\u00e9", "a\"b"]
SNIPPETS = ['propagate_down: true', 'propagate_down: false', 'loss_weight: 1', 'loss_weight: -2.5',
            'include { phase: TRAIN }', 'exclude { phase: TEST }', 'include { stage: "deploy" }',
            'include { min_level: 1 }', 'exclude { not_stage: "x" }', 'param { name: "shared_w" }',
            'param { lr_mult: 0 decay_mult: 3 }', 'param { name: "shared_w" share_mode: PERMISSIVE }',
            'bottom: "data"', 'top: "data"', 'bottom: "label"', 'top: "extra"', 'force_backward: true',
            'debug_info: true', 'blobs { shape { dim: 2 } data: 1 data: 2 }', 'phase: TRAIN',
            'layer { name: "r" type: "ReLU" bottom: "data" top: "data" }',
            'layer { name: "s" type: "Silence" bottom: "data" }',
            'layer { name: "d" type: "DummyData" top: "data" dummy_data_param { shape { dim: 2 dim: 3 } } }',
            'input: "data" input_dim: 1 input_dim: 2 input_dim: 3 input_dim: 4',
            'input_shape { dim: 2 }', 'state { phase: TRAIN }', 'engine: CUDNN',
            'layers { name: "v1" type: RELU bottom: "data" top: "data" }',
            '}', '{', 'layer {', '"', '#', 'name: "dup"', 'type: "Bogus"']
OPS = ["delete", "duplicate", "swap", "string", "number", "ident", "insert", "truncate", "char",
       "swap_layers", "delete_layer", "dup_layer"]


def _layer_spans(text):
    """(start, end) character spans of top-level ``layer {...}`` / ``layers {...}`` blocks."""
    spans, depth, start, i, n = [], 0, None, 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c == "{":
            if depth == 0:
                m = re.search(r"(layers?)\s*$", text[max(0, i - 40):i])
                start = (i - len(text[max(0, i - 40):i]) + m.start()) if m else None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start is not None:
                spans.append((start, i + 1))
                start = None
            if depth < 0:
                depth = 0
        i += 1
    return spans


def _mutate_text(data, text):
    draw = data.draw
    lines = text.split("\n")
    op = draw(st.sampled_from(OPS), label="op")
    pick = lambda: draw(st.integers(0, max(0, len(lines) - 1)), label="line")  # noqa: E731
    if op == "delete" and lines:
        del lines[pick()]
    elif op == "duplicate" and lines:
        i = pick()
        lines.insert(i, lines[i])
    elif op == "swap" and lines:
        i, j = pick(), pick()
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "string":
        idx = [k for k, l in enumerate(lines) if '"' in l]
        if idx:
            k = draw(st.sampled_from(idx), label="line")
            others = re.findall(r'"([^"]*)"', text)
            word = draw(st.sampled_from(WORDS + others[:50]), label="word")
            lines[k] = re.sub(r'"[^"]*"', lambda m: '"%s"' % word, lines[k], count=1)
    elif op == "number":
        idx = [k for k, l in enumerate(lines) if re.search(r":\s*-?[\d.]", l)]
        if idx:
            k = draw(st.sampled_from(idx), label="line")
            num = draw(st.sampled_from(NUMBERS), label="number")
            lines[k] = re.sub(r"(:\s*)-?[\d.][\w.+-]*", lambda m: m.group(1) + num, lines[k], count=1)
    elif op == "ident":
        idx = [k for k, l in enumerate(lines) if re.search(r":\s*[A-Za-z_]", l)]
        if idx:
            k = draw(st.sampled_from(idx), label="line")
            word = draw(st.sampled_from(WORDS), label="word")
            lines[k] = re.sub(r"(:\s*)[A-Za-z_]\w*", lambda m: m.group(1) + word, lines[k], count=1)
    elif op == "insert":
        lines.insert(pick(), draw(st.sampled_from(SNIPPETS), label="snippet"))
    elif op == "truncate":
        return text[:draw(st.integers(0, len(text)), label="cut")]
    elif op == "char" and text:
        i = draw(st.integers(0, len(text) - 1), label="pos")
        c = draw(st.sampled_from(list('{}":#\n\\ -0aZ\x00\u00ff\u2028')), label="char")
        return text[:i] + c + text[i + 1:]
    elif op in ("swap_layers", "delete_layer", "dup_layer"):
        spans = _layer_spans(text)
        if spans:
            a = draw(st.integers(0, len(spans) - 1), label="layer")
            b = draw(st.integers(0, len(spans) - 1), label="layer2")
            (s1, e1), (s2, e2) = sorted([spans[a], spans[b]])
            if op == "swap_layers" and (s1, e1) != (s2, e2):
                return text[:s1] + text[s2:e2] + text[e1:s2] + text[s1:e1] + text[e2:]
            if op == "delete_layer":
                return text[:s1] + text[e1:]
            if op == "dup_layer":
                return text[:e2] + "\n" + text[s1:e1] + text[e2:]
    return "\n".join(lines)


@pytest.mark.skipif(not SEEDS, reason="no seed nets")
def test_fuzz_prototxt(quiet_engine):
    tmp = quiet_engine
    camp = Campaign("prototxt")
    names = [n for n, _ in SEEDS]
    texts = dict(SEEDS)

    @_with_seed
    @fuzz_settings("prototxt")
    @given(st.data())
    def run(data):
        name = data.draw(st.sampled_from(names), label="seed")
        text = texts[name]
        for _ in range(data.draw(st.integers(1, 4), label="mutations")):
            text = _mutate_text(data, text)
        raw = text.encode("utf-8", "surrogatepass")
        if data.draw(st.integers(0, 9), label="raw?") == 0 and raw:
            i = data.draw(st.integers(0, len(raw) - 1), label="rawpos")
            raw = raw[:i] + bytes([data.draw(st.integers(0, 255), label="rawbyte")]) + raw[i + 1:]
        phase = data.draw(st.sampled_from([TRAIN, TEST]), label="phase")
        stages = data.draw(st.sampled_from([[], ["deploy"], ["no-norm"]]), label="stages")
        level = data.draw(st.sampled_from([0, 1]), label="level")
        mode = data.draw(st.sampled_from(["normal", "normal", "nan", "huge"]), label="inputs")
        path = tmp / ("fuzz_" + name)
        path.write_bytes(raw)
        rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16), label="rng"))

        def body():
            net = Net(str(path), phase, level=level, stages=stages, allow_python=False)
            _exercise(net, rng, mode)

        camp.run(body, lambda: (".prototxt", raw))

    run()
    _assert_no_prefetch_threads()
    camp.check()


# =========================================================================== caffemodel / binaryproto
_MODEL_NETS = [("examples/lenet/lenet_train_test.prototxt", TEST),
               ("examples/resnet_tiny/resnet_tiny.prototxt", TRAIN),
               ("examples/shared_stages/siamese_stages.prototxt", TRAIN)]


def _model_seeds():
    rng = np.random.default_rng(7)
    out = []
    logger = logging.getLogger("engine")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        for rel, phase in _MODEL_NETS:
            path = ROOT / rel
            if not path.exists():
                continue
            net = Net(str(path), phase)
            for blobs in net.params.values():
                for b in blobs:
                    b.data[...] = rng.normal(size=b.shape)
            out.append((rel, net, net.ToProto().SerializeToString()))
    finally:
        logger.setLevel(old)
    return out


def _mutate_bytes(data, raw, others):
    draw = data.draw
    b = bytearray(raw)
    op = draw(st.sampled_from(["truncate", "flip", "bitflip", "splice", "insert", "dup", "ff", "zero",
                               "nanfloat", "delete", "empty"]), label="op")
    n = len(b)
    pos = lambda: draw(st.integers(0, max(0, n - 1)), label="pos")  # noqa: E731
    if op == "truncate":
        return bytes(b[:draw(st.integers(0, n), label="cut")])
    if op == "empty":
        return b""
    if n == 0:
        return bytes(b)
    if op == "flip":
        for _ in range(draw(st.integers(1, 8), label="count")):
            b[pos()] = draw(st.integers(0, 255), label="byte")
    elif op == "bitflip":
        i = pos()
        b[i] ^= 1 << draw(st.integers(0, 7), label="bit")
    elif op == "splice":
        other = draw(st.sampled_from(others), label="other")
        i, j = pos(), draw(st.integers(0, len(other)), label="pos2")
        return bytes(b[:i]) + other[j:]
    elif op == "insert":
        i = pos()
        k = draw(st.integers(1, 16), label="len")
        return bytes(b[:i]) + bytes(draw(st.integers(0, 255), label="byte") for _ in range(k)) + bytes(b[i:])
    elif op == "dup":
        i, j = sorted((pos(), pos()))
        return bytes(b[:j]) + bytes(b[i:j]) + bytes(b[j:])
    elif op in ("ff", "zero"):
        i = pos()
        k = draw(st.integers(1, 10), label="len")
        b[i:i + k] = (b"\xff" if op == "ff" else b"\x00") * len(b[i:i + k])
    elif op == "nanfloat":
        i = pos() & ~3
        b[i:i + 4] = draw(st.sampled_from([b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\xff\xff\x7f\x7f"]),
                          label="float")
    elif op == "delete":
        i, j = sorted((pos(), pos()))
        del b[i:j]
    return bytes(b)


def _mutate_model(data, raw, target_names):
    """Mutations that keep the bytes a valid NetParameter: blob shapes, value counts,
    layer names (to the target's names), blob order, legacy shapes, double values."""
    draw = data.draw
    param = caffe_pb2.NetParameter()
    param.ParseFromString(raw)
    for _ in range(draw(st.integers(1, 3), label="edits")):
        with_blobs = [l for l in param.layer if len(l.blobs)]
        if not with_blobs:
            break
        layer = draw(st.sampled_from(with_blobs), label="layer")
        blob = draw(st.sampled_from(list(layer.blobs)), label="blob")
        op = draw(st.sampled_from(["dim", "drop_values", "extra_values", "rename", "del_blob", "add_blob",
                                   "swap_blobs", "legacy", "double", "diff", "huge_dim", "neg_dim",
                                   "nan_values", "dup_layer"]), label="model op")
        if op == "dim" and len(blob.shape.dim):
            i = draw(st.integers(0, len(blob.shape.dim) - 1), label="axis")
            blob.shape.dim[i] = draw(st.sampled_from([0, 1, 2, min(blob.shape.dim[i] + 1, 1 << 62)]),
                                     label="dim")
        elif op == "drop_values" and len(blob.data):
            del blob.data[draw(st.integers(0, len(blob.data) - 1), label="cut"):]
        elif op == "extra_values":
            blob.data.extend([1.0] * draw(st.integers(1, 5), label="n"))
        elif op == "rename":
            layer.name = draw(st.sampled_from(list(target_names) + ["", "nope"]), label="name")
        elif op == "del_blob":
            del layer.blobs[-1]
        elif op == "add_blob":
            layer.blobs.add().CopyFrom(blob)
        elif op == "swap_blobs" and len(layer.blobs) > 1:
            a, b = caffe_pb2.BlobProto(), caffe_pb2.BlobProto()
            a.CopyFrom(layer.blobs[0])
            b.CopyFrom(layer.blobs[1])
            layer.blobs[0].CopyFrom(b)
            layer.blobs[1].CopyFrom(a)
        elif op == "legacy" and all(-(1 << 31) <= d < (1 << 31) for d in blob.shape.dim):
            dims = list(blob.shape.dim) + [1] * 4
            blob.ClearField("shape")
            blob.num, blob.channels, blob.height, blob.width = [int(d) for d in dims[:4]]
        elif op == "double":
            vals = list(blob.data)
            blob.ClearField("data")
            blob.double_data.extend(v * draw(st.sampled_from([1.0, 1e300]), label="scale") for v in vals)
        elif op == "diff":
            blob.diff.extend([0.5] * draw(st.sampled_from([len(blob.data), 1, 0]), label="n"))
        elif op == "huge_dim" and len(blob.shape.dim):
            blob.shape.dim[0] = draw(st.sampled_from([1 << 31, 1 << 40, (1 << 63) - 1]), label="dim")
        elif op == "neg_dim" and len(blob.shape.dim):
            blob.shape.dim[0] = draw(st.sampled_from([-1, -2, -(1 << 40)]), label="dim")
        elif op == "nan_values" and len(blob.data):
            blob.data[0] = draw(st.sampled_from([float("nan"), float("inf")]), label="value")
        elif op == "dup_layer":
            param.layer.add().CopyFrom(layer)
    return param.SerializeToString()


MODELS = None


def _models():
    """The bundled nets with their weights (built once), or skip."""
    global MODELS
    if MODELS is None:
        MODELS = _model_seeds()
    if not MODELS:
        pytest.skip("no bundled nets")
    return MODELS


def _copy_from_keeping_params(net, path, lost):
    """A campaign body: ``net.copy_from(path)``; a load that raises must leave every param
    as it was (else ``path`` goes to ``lost``)."""
    before = [b.data.copy() for l in net.layers for b in l.blobs]

    def body():
        try:
            net.copy_from(str(path))
        except CaffeError:
            after = [b.data for l in net.layers for b in l.blobs]
            if not all(np.array_equal(x, y, equal_nan=True) for x, y in zip(before, after)):
                lost.append(str(path))
                raise AssertionError("copy_from raised but changed params") from None
            raise
    return body


def test_fuzz_caffemodel(quiet_engine):
    tmp = quiet_engine
    models = _models()
    camp = Campaign("caffemodel")
    raws = [m[2] for m in models]
    lost = []

    @_with_seed
    @fuzz_settings("caffemodel")
    @given(st.data())
    def run(data):
        k = data.draw(st.integers(0, len(models) - 1), label="net")
        target = data.draw(st.integers(0, len(models) - 1), label="target")
        net = models[target][1]
        raw = models[k][2]
        if data.draw(st.booleans(), label="structured?"):
            raw = _mutate_model(data, raw, net.layer_names)
        for _ in range(data.draw(st.integers(0 if raw != models[k][2] else 1, 3), label="mutations")):
            raw = _mutate_bytes(data, raw, raws)
        path = tmp / "fuzz.caffemodel"
        path.write_bytes(raw)
        load = _copy_from_keeping_params(net, path, lost)

        def body():
            from engine.core.io import read_text_or_binary
            from engine.core.upgrade import read_net_params_binary
            try:
                load()
            finally:
                try:
                    read_net_params_binary(str(path))
                finally:
                    read_text_or_binary(str(path), caffe_pb2.NetParameter)

        camp.run(body, lambda: (".caffemodel", raw))

    run()
    camp.check()
    assert not lost


def test_fuzz_hdf5_weights(quiet_engine):
    """Weights saved with save_hdf5, bytes mutated, loaded with copy_from(".h5"): h5py's
    errors on corrupt files (OSError, RuntimeError, KeyError) must become ParseError,
    and a failed load must change no param."""
    h5py = pytest.importorskip("h5py")  # noqa: F841
    tmp = quiet_engine
    models = _models()
    camp = Campaign("hdf5")
    raws = []
    for k, (_rel, net, _) in enumerate(models):
        path = tmp / ("seed%d.h5" % k)
        net.save_hdf5(str(path))
        raws.append(path.read_bytes())
    lost = []

    @_with_seed
    @fuzz_settings("hdf5")
    @given(st.data())
    def run(data):
        k = data.draw(st.integers(0, len(models) - 1), label="net")
        target = data.draw(st.integers(0, len(models) - 1), label="target")
        raw = raws[k]
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            raw = _mutate_bytes(data, raw, raws)
        net = models[target][1]
        path = tmp / "fuzz.h5"
        path.write_bytes(raw)
        camp.run(_copy_from_keeping_params(net, path, lost), lambda: (".h5", raw))

    run()
    camp.check()
    assert not lost


def _blobproto_seeds():
    a = caffe_pb2.BlobProto(num=1, channels=3, height=4, width=4)
    a.data.extend(np.linspace(-1, 1, 48).tolist())
    b = caffe_pb2.BlobProto()
    b.shape.dim.extend([2, 3])
    b.double_data.extend([1, 2, 3, 4, 5, 6])
    b.double_diff.extend([1, 1, 1, 1, 1, 1])
    c = caffe_pb2.BlobProtoVector()
    c.blobs.add().CopyFrom(a)
    c.blobs.add().CopyFrom(b)
    return [a.SerializeToString(), b.SerializeToString(), c.SerializeToString()]


def test_fuzz_blobproto(quiet_engine):
    from engine.core import io as eio
    tmp = quiet_engine
    camp = Campaign("blobproto")
    raws = _blobproto_seeds()

    @_with_seed
    @fuzz_settings("blobproto")
    @given(st.data())
    def run(data):
        raw = data.draw(st.sampled_from(raws), label="seed")
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            raw = _mutate_bytes(data, raw, raws)
        path = tmp / "fuzz.binaryproto"
        path.write_bytes(raw)
        dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")

        def body():
            try:
                eio.blobprotovector_str_to_arraylist(raw)
            except CaffeError:
                pass
            bp = eio.read_blobproto(str(path))
            try:
                eio.blobproto_to_array(bp)
            finally:
                Blob(dtype=dtype).from_proto(bp)

        camp.run(body, lambda: (".binaryproto", raw))

    run()
    camp.check()


# =========================================================================== layers
_PARAM_FIELDS = {
    "Deconvolution": ["convolution_param"], "Im2col": ["convolution_param"],
    "SoftmaxWithLoss": ["softmax_param", "loss_param"], "SigmoidCrossEntropyLoss": ["loss_param"],
    "EuclideanLoss": ["loss_param"], "ContrastiveLoss": ["contrastive_loss_param", "loss_param"],
    "HingeLoss": ["hinge_loss_param", "loss_param"], "InfogainLoss": ["infogain_loss_param", "loss_param"],
    "MultinomialLogisticLoss": ["loss_param"], "RNN": ["recurrent_param"], "LSTM": ["recurrent_param"],
    "Data": ["data_param", "transform_param"], "ImageData": ["image_data_param", "transform_param"],
    "WindowData": ["window_data_param", "transform_param"],
    "MemoryData": ["memory_data_param", "transform_param"], "BatchNorm": ["batch_norm_param"],
    "PReLU": ["prelu_param"], "ELU": ["elu_param"], "SPP": ["spp_param"], "LRN": ["lrn_param"],
    "MVN": ["mvn_param"], "HDF5Data": ["hdf5_data_param"], "HDF5Output": ["hdf5_output_param"],
    "ArgMax": ["argmax_param"], "InnerProduct": ["inner_product_param"], "DummyData": ["dummy_data_param"],
}


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _param_fields(ltype):
    if ltype in _PARAM_FIELDS:
        return _PARAM_FIELDS[ltype]
    f = _snake(ltype) + "_param"
    return [f] if f in caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name else []


SMALL_INTS = st.integers(-1, 5)
BIG_INTS = st.sampled_from([0, 7, 16, 100, 1 << 16, (1 << 31) - 1, -(1 << 31), 1 << 40])
FLOATS = st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, 0.1, 3.0, 1e-8, -0.5])
ODD_FLOATS = st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 1e-45, 3e38])
STRINGS = st.sampled_from(["", "x", "constant", "gaussian", "xavier", "msra", "bilinear", "uniform",
                           "positive_unitball", "data", "/nonexistent/source", "bogus"])
FD = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name["bottom"].__class__


def _draw_scalar(data, f):
    t = f.type
    draw = data.draw
    rare = draw(st.integers(0, 19), label="rare") == 0
    if t == FD.TYPE_BOOL:
        return draw(st.booleans())
    if t == FD.TYPE_ENUM:
        return draw(st.sampled_from([v.number for v in f.enum_type.values]))
    if t in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return draw(ODD_FLOATS if rare else FLOATS)
    if t == FD.TYPE_STRING:
        return draw(STRINGS)
    if t == FD.TYPE_BYTES:
        return b""
    v = draw(BIG_INTS if rare else SMALL_INTS)
    if t in (FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_FIXED32, FD.TYPE_FIXED64):
        v = abs(v)
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32, FD.TYPE_UINT32, FD.TYPE_FIXED32):
        v = max(min(v, (1 << 31) - 1 if t not in (FD.TYPE_UINT32, FD.TYPE_FIXED32) else (1 << 32) - 1),
                -(1 << 31) if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32) else 0)
    return v


def _draw_message(data, msg, depth=0, density=3):
    """Set random fields of ``msg``: each with probability density/10."""
    for f in msg.DESCRIPTOR.fields:
        if data.draw(st.integers(0, 9), label="set %s" % f.name) >= density:
            continue
        repeated = f.is_repeated
        if f.message_type is not None:
            if depth >= 2:
                continue
            if repeated:
                for _ in range(data.draw(st.integers(0, 3), label="n")):
                    _draw_message(data, getattr(msg, f.name).add(), depth + 1, density)
            else:
                sub = getattr(msg, f.name)
                sub.SetInParent()
                _draw_message(data, sub, depth + 1, density)
        elif repeated:
            getattr(msg, f.name).extend(_draw_scalar(data, f) for _ in range(data.draw(st.integers(0, 4))))
        else:
            try:
                setattr(msg, f.name, _draw_scalar(data, f))
            except (ValueError, TypeError):
                pass


def _layer_types():
    from engine.core.layers.registry import layer_types
    return [t for t in layer_types() if t != "Python"]


def _counts(cls, data, which):
    def attr(name, default):
        v = getattr(cls, name)
        return v if isinstance(v, int) else default   # properties (recurrent layers): 1..3
    exact = attr("exact_num_" + which, -1)
    lo = attr("min_" + which, 1)
    hi = attr("max_" + which, 3)
    if data.draw(st.integers(0, 4), label="odd count") == 0:
        return data.draw(st.integers(0, 4), label="count")
    if exact >= 0:
        return exact
    lo = max(lo, 0)
    hi = hi if hi >= 0 else lo + 3
    return data.draw(st.integers(lo, max(lo, hi)), label="count")


def _draw_shape(data):
    ndim = data.draw(st.sampled_from([0, 1, 2, 2, 3, 4, 4, 4, 5]), label="ndim")
    return tuple(data.draw(st.sampled_from([1, 2, 3, 4, 5, 2, 3, 0] if i == 0 else [1, 2, 3, 4, 5, 6, 2, 3]),
                           label="dim") for i in range(ndim))


FILL_MODES = st.sampled_from(["normal", "normal", "labels", "unit", "nan", "inf", "huge", "zero"])


def _fill(mode, blob, rng):
    n = blob.count
    if n == 0:
        return
    if mode == "labels":
        a = rng.integers(0, 4, n).astype(np.float64)
    elif mode == "unit":
        a = rng.uniform(0, 1, n)
    elif mode == "zero":
        a = np.zeros(n)
    elif mode == "huge":
        a = rng.normal(size=n) * 1e38
    else:
        a = rng.normal(size=n)
        if mode == "nan":
            a[rng.integers(0, n)] = np.nan
        elif mode == "inf":
            a[rng.integers(0, n)] = np.inf * rng.choice([-1, 1])
    with np.errstate(all="ignore"):
        blob.data[...] = a.reshape(blob.shape)


def test_fuzz_layers(quiet_engine):
    from engine.core.layers.registry import create_layer, layer_class
    camp = Campaign("layers")
    types = _layer_types()

    @_with_seed
    @fuzz_settings("layers")
    @given(st.data())
    def run(data):
        ltype = data.draw(st.sampled_from(types), label="type")
        cls = layer_class(ltype)
        lp = caffe_pb2.LayerParameter(name="fuzz", type=ltype)
        lp.phase = data.draw(st.sampled_from([TRAIN, TEST]), label="phase")
        density = data.draw(st.sampled_from([1, 3]), label="density")
        for field in _param_fields(ltype):
            if data.draw(st.integers(0, 9), label="use " + field) < 8:
                sub = getattr(lp, field)
                sub.SetInParent()
                _draw_message(data, sub, density=density)
        if data.draw(st.integers(0, 9), label="loss_weight?") == 0:
            lp.loss_weight.extend([data.draw(FLOATS)] * data.draw(st.integers(0, 2)))
        nb, nt = _counts(cls, data, "bottom"), _counts(cls, data, "top")
        if cls.equal_num_bottom_top and data.draw(st.integers(0, 4)) > 0:
            nt = nb
        dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
        base = _draw_shape(data)
        shapes = []
        for _ in range(nb):
            k = data.draw(st.integers(0, 5), label="bottom shape")
            if k <= 2:
                shapes.append(base)
            elif k == 3 and base:
                shapes.append(base[:1])
            else:
                shapes.append(_draw_shape(data))
        rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16), label="rng"))
        reshape_to = _draw_shape(data) if data.draw(st.integers(0, 3), label="reshape?") == 0 else None
        pd = [data.draw(st.booleans(), label="propagate_down") for _ in range(nb)]
        modes = [data.draw(FILL_MODES, label="values") for _ in range(nb + 1)]
        holder = {}

        def body():
            bottom = [Blob(s, dtype=dtype) for s in shapes]
            for b, m in zip(bottom, modes):
                _fill(m, b, rng)
            top = [Blob(dtype=dtype) for _ in range(nt)]
            layer = holder["layer"] = create_layer(lp, dtype=dtype)
            try:
                layer.SetUp(bottom, top)
                if any(t.count > MAX_LAYER_TOP for t in top):
                    return
                layer.Forward(bottom, top)
                for t in top:
                    if t.count:
                        t.diff[...] = rng.normal(size=t.shape)
                layer.Backward(top, pd, bottom)
                if reshape_to is not None and bottom:
                    bottom[0].reshape(reshape_to)
                    _fill(modes[-1], bottom[0], rng)
                    layer.Forward(bottom, top)
            finally:
                _close_layers([layer])

        def repro():
            from google.protobuf import text_format
            text = "# dtype %s, bottom shapes %s, tops %d, propagate_down %s, reshape_to %s\n%s" % (
                np.dtype(dtype).name, shapes, nt, pd, reshape_to, text_format.MessageToString(lp))
            return ".prototxt", text.encode()

        camp.run(body, repro)
        holder.clear()

    run()
    _assert_no_prefetch_threads()
    camp.check()


# =========================================================================== escapes found by benchmarks/fuzz.py
# One test per class of escape the large campaigns (benchmarks/fuzz.py, docs/fuzzing.md "At scale")
# found and the engine now turns into a CaffeError.

def test_an_in_place_layer_that_reshapes_a_top_stops_backward_with_an_engine_error(quiet_engine):
    """A Reduction (or any layer that reshapes its top) written in place after a layer: Caffe
    lets it reshape the shared blob, then the first layer's Backward reads and writes past
    the blob's data.  The engine raised NumPy's ValueError from Bias's backward.  Now the
    in-place Reduction stops Init at its SetUp (see the Tile test below), and a top whose
    shape changed between a layer's Forward and its Backward (here by hand) stops Backward
    with a ShapeError naming the blob and both shapes."""
    from engine.core.errors import ShapeError
    path = quiet_engine / "inplace_reshape.prototxt"
    path.write_text(
        'layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 } } }\n'
        'layer { name: "bias" type: "Bias" bottom: "x" top: "y" bias_param { axis: 1 num_axes: 1 } }\n'
        'layer { name: "loss" type: "Reduction" bottom: "y" top: "y" loss_weight: 1 '
        'reduction_param { operation: SUMSQ } }\n')
    with pytest.raises(ShapeError, match=r"from 2 3 4 \(24\) to \(1\).*\(layer 'loss', type Reduction\)"):
        Net(str(path), TRAIN)
    ok = quiet_engine / "ok.prototxt"
    ok.write_text(path.read_text().replace('top: "y" loss_weight', 'top: "l" loss_weight'))
    net = Net(str(ok), TRAIN)
    net.blobs["x"].data[...] = 1.0
    net.forward()
    net.blobs["y"].reshape(4, 6)                        # behind the layers' backs
    with pytest.raises(ShapeError) as ei:
        net.backward()
    e = ei.value
    assert e.layer == "bias" and e.blob == "y"
    assert str(e) == ("Backward: top blob 'y' has shape 4 6 (24) at Backward, not the 2 3 4 (24) its Forward gave "
                      "it: Caffe reads and writes past the blob's data here (layer 'bias', type Bias)")
    # a reshape through the net (Net.Reshape) is the layers' own: Backward then runs
    net.blobs["x"].reshape(4, 3, 2)
    net.reshape()
    net.backward()
    assert net.blobs["x"].diff.shape == (4, 3, 2)


def test_forward_names_an_output_blob_that_never_got_a_shape(quiet_engine):
    """pycaffe's forward() returns the outputs' data: an Input without a shape leaves its
    top unshaped (Caffe: CHECK(data_) on reading it).  The ShapeError now names the blob."""
    from engine.core.errors import ShapeError
    path = quiet_engine / "noshape.prototxt"
    path.write_text('layer { name: "data" type: "Input" top: "data" }\n')
    net = Net(str(path), TEST)
    with pytest.raises(ShapeError) as ei:
        net.forward()
    assert ei.value.blob == "data" and str(ei.value).endswith("(blob 'data')")
    assert "Check failed: data_" in str(ei.value)


def test_closing_a_data_layer_mid_batch_closes_its_database_only_after_its_thread(quiet_engine):
    """A Data layer with a big batch (batch_size 65536 from a mutant) closed while its
    prefetch thread still read the first batch: the close waited 5 s, then closed the LMDB
    under the thread, which crashed the process (SIGSEGV).  Now the thread stops after the
    record it reads, and the database closes after it."""
    import threading

    from engine.core.layers import data
    started, seen = threading.Event(), {}

    def load(batch):                    # a batch that would take ~forever
        started.set()
        for _ in range(10 ** 7):
            data.stopping()
            time.sleep(0.001)

    class Resource:
        def close(self):            # by the thread as it ends, or after it ended: never under it
            seen["under the thread"] = p.thread.is_alive() and threading.current_thread() is not p.thread
            seen["closes"] = seen.get("closes", 0) + 1

    p = data.Prefetcher("mid-batch", load, 1, Resource())
    assert started.wait(120)
    p.stop()
    assert not p.thread.is_alive() and seen == {"under the thread": False, "closes": 1}
    p.stop()                            # again: nothing more to close
    assert seen["closes"] == 1


def test_a_data_layer_with_a_huge_batch_closes_cleanly(quiet_engine):
    lmdb = pytest.importorskip("lmdb")
    from engine.core.io import array_to_datum
    db = quiet_engine / "db"
    env = lmdb.open(str(db), map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i, a in enumerate(np.random.default_rng(0).integers(0, 256, (6, 3, 5, 4), dtype=np.uint8)):
            txn.put(b"%08d" % i, array_to_datum(a, i).SerializeToString())
    env.close()
    path = quiet_engine / "big_batch.prototxt"
    path.write_text('layer { name: "d" type: "Data" top: "x" top: "y" transform_param { crop_size: 3 } '
                    'data_param { source: "%s" batch_size: 65536 backend: LMDB } }\n' % db)
    net = Net(str(path), TRAIN)
    layer = net.layers[0]
    thread = layer.prefetcher.thread
    layer.close()                       # while the first batch is being read
    assert not thread.is_alive() and layer.prefetcher.resource.resource is None   # stopped, then closed
    _assert_no_prefetch_threads()


@pytest.mark.parametrize("layer_type, num_output, message", [
    ("LSTM", 4294967295, "Check failed: num_output > 0 (-1 vs. 0) num_output must be positive"),
    ("RNN", 2147483648, "Check failed: num_output > 0 (-2147483648 vs. 0) num_output must be positive"),
])
def test_recurrent_num_output_beyond_int_is_caffes_check(quiet_engine, layer_type, num_output, message):
    """recurrent_param.num_output is a uint32 that Caffe reads into an int: from 2^31 on it is
    negative and CHECK_GT(num_output, 0) stops Init.  The engine took the uint32 as it is and
    then set LSTM's 4 * num_output into the unrolled InnerProduct (ValueError: out of range)."""
    from engine.core.errors import LayerError
    path = quiet_engine / "rnn.prototxt"
    path.write_text(
        'layer { name: "input" type: "Input" top: "x" top: "cont" '
        'input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } } }\n'
        'layer { name: "r" type: "%s" bottom: "x" bottom: "cont" top: "y" '
        'recurrent_param { num_output: %d } }\n' % (layer_type, num_output))
    with pytest.raises(LayerError) as ei:
        Net(str(path), TRAIN)
    assert message in str(ei.value) and ei.value.layer == "r"


def test_spp_with_a_huge_pyramid_stops_at_the_first_level_that_cannot_pool(quiet_engine):
    """spp_param { pyramid_height: 2147483647 } made the engine create 2^31-1 blobs before
    setting up any pooling level (a hang).  The levels are now set up one by one, so the
    pooling CHECK of the first impossible level (here level 2: pad 2 is not < kernel 2 for
    a 5x4 input) stops Init at once."""
    from engine.core.errors import LayerError
    path = quiet_engine / "spp.prototxt"
    path.write_text(
        'layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 5 dim: 4 } } }\n'
        'layer { name: "spp" type: "SPP" bottom: "x" top: "y" spp_param { pyramid_height: 2147483647 } }\n')
    with pytest.raises(LayerError, match=r"Check failed: pad_h_ < kernel_h_ \(2 vs\. 2\)"):
        Net(str(path), TRAIN)
    # 2^32-1 is -1 in Caffe's int pyramid_height_: no levels, and the Concat over none refuses
    path.write_text(path.read_text().replace("2147483647", "4294967295"))
    with pytest.raises(LayerError, match=r"Concat Layer takes at least 1 bottom blob\(s\) as input. \(SPP "
                                         r"pyramid_height must be at least 1, got -1\)"):
        Net(str(path), TRAIN)


_NEURONS = ["AbsVal", "BNLL", "Clip", "Dropout", "ELU", "Exp", "Log", "Power", "ReLU", "Sigmoid", "Swish", "TanH",
            "Threshold"]


@pytest.mark.parametrize("layer, in_place", [(n, False) for n in _NEURONS]
                         + [(n, True) for n in _NEURONS if n != "AbsVal"])      # AbsVal: not in place
def test_neuron_layers_compute_a_0d_blob_like_a_one_element_one(quiet_engine, layer, in_place):
    """A 0-d blob (``shape { }``: one value; a mutant cleared an Input's dims): NumPy makes
    arithmetic on 0-d arrays scalars, so ``out=`` failed (TypeError) in ELU, TanH, BNLL ...
    (it was in KNOWN).  Now Forward and Backward give the numbers of a 1-element blob, and
    the blobs keep their 0-d shape."""
    params = {"Clip": "clip_param { min: -1 max: 1 }", "Power": "power_param { power: 2 shift: 1 }"}

    def run(dims):
        path = quiet_engine / "n.prototxt"
        top = "x" if in_place else "y"
        path.write_text(
            '%s'
            'layer { name: "input" type: "Input" top: "x" input_param { shape { %s } } }\n'
            'layer { name: "n" type: "%s" bottom: "x" top: "%s" %s }\n'
            'layer { name: "loss" type: "Power" bottom: "%s" top: "loss" loss_weight: 1 }\n'
            % ("" if layer == "Threshold" else "force_backward: true\n", dims, layer, top, params.get(layer, ""),
               top))
        net = Net(str(path), TEST)
        net.blobs["x"].data[...] = 0.75
        net.forward()
        y = net.blobs[top].data.copy()
        if layer != "Threshold":            # Caffe's Threshold has no Backward
            net.backward()
        return y, net.blobs["x"].diff.copy(), net.blobs[top].shape

    y0, dx0, shape0 = run("")
    y1, dx1, _ = run("dim: 1")
    assert shape0 == () and y0.shape == () and dx0.shape == ()
    assert y0.reshape(1).tolist() == y1.tolist() and dx0.reshape(1).tolist() == dx1.tolist()


def test_infinite_losses_and_a_huge_transform_scale_give_cs_numbers_without_warnings(quiet_engine):
    """RuntimeWarnings (findings by this file's rules) the campaign logged: a net's losses of
    inf and -inf summed outside np.errstate (ForwardFromTo), and DataTransformer's scale
    overflowing float32 on the prefetch thread.  C gives nan and inf silently; so does the engine."""
    import warnings

    from engine.core.data_transformer import DataTransformer
    path = quiet_engine / "losses.prototxt"
    path.write_text('layer { name: "i" type: "Input" top: "a" top: "b" '
                    'input_param { shape { dim: 1 } shape { dim: 1 } } }\n'
                    'layer { name: "l1" type: "Power" bottom: "a" top: "x" loss_weight: 1 }\n'
                    'layer { name: "l2" type: "Power" bottom: "b" top: "y" loss_weight: -1 }\n')
    net = Net(str(path), TEST)
    net.blobs["a"].data[...] = np.inf
    net.blobs["b"].data[...] = np.inf
    tp = caffe_pb2.TransformationParameter(scale=3e38)
    t = DataTransformer(tp, TEST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(net.ForwardFromTo(0, 2))
        out = t.transform_chw(np.full((1, 2, 2), 255, np.uint8))
    assert out.dtype == np.float32 and np.isinf(out).all()


def test_a_layer_that_changes_its_shape_in_place_is_an_engine_error(quiet_engine):
    """A Tile written in place (``top`` renamed to its bottom by a mutant): its Reshape grows the
    shared blob, then its Forward read the bottom with the new shape (NumPy's ValueError).  Any
    layer whose Reshape (at SetUp or Forward) changes a blob it reads in place now stops with
    a ShapeError; the layers that run in place keep the shape and are untouched."""
    from engine.core.errors import ShapeError
    path = quiet_engine / "tile.prototxt"
    path.write_text(
        'layer { name: "input" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 2 } } }\n'
        'layer { name: "t" type: "Tile" bottom: "x" top: "x" tile_param { axis: 1 tiles: 3 } }\n')
    with pytest.raises(ShapeError) as ei:
        Net(str(path), TEST)                            # at SetUp: an Init error, with its line
    assert ei.value.layer == "t" and str(ei.value) == "%s:2:1: " % path + (
        "bottom 0 is also a top (in place), and Reshape changed its shape from 2 3 2 (12) to 2 9 2 (36): Caffe "
        "then reads the bottom past its data; this layer cannot run in place (layer 't', type Tile)")
    ok = quiet_engine / "relu.prototxt"
    ok.write_text(path.read_text().replace('type: "Tile"', 'type: "ReLU"')
                  .replace(" tile_param { axis: 1 tiles: 3 }", ""))
    net = Net(str(ok), TEST)
    net.blobs["x"].data[...] = -1.0
    net.forward()
    assert net.blobs["x"].shape == (2, 3, 2) and (net.blobs["x"].data == 0).all()
