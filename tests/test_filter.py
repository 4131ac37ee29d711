"""engine.core.filter against Caffe's FilterNetTest cases, its logs, and small nets of our own."""
import json
import logging
import os
import re

import pytest
from google.protobuf import text_format

from engine.core.errors import NetError
from engine.core.filter import DroppedLayer, filter_net, rule_text, state_meets_rule
from engine.proto import caffe_pb2
from tests.proto_helpers import parse, pure_and_idempotent, same

NetParameter = caffe_pb2.NetParameter


def net_messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "engine.core.net"]


# ---------------------------------------------------------------------------
# Caffe's own cases (../shared/caffe_tests/Test*)
# ---------------------------------------------------------------------------

FILTER_CASES = [
    "TestNoFilter", "TestFilterLeNetTrainTest__train", "TestFilterLeNetTrainTest__test",
    "TestFilterOutByStage", "TestFilterOutByStage2", "TestFilterInByStage",
    "TestFilterInByStage2", "TestFilterOutByMultipleStage", "TestFilterInByMultipleStage",
    "TestFilterInByMultipleStage2", "TestFilterInByNotStage", "TestFilterOutByNotStage",
    "TestFilterOutByMinLevel", "TestFilterOutByMaxLevel", "TestFilterInByMinLevel",
    "TestFilterInByMinLevel2", "TestFilterInByMaxLevel", "TestFilterInByMaxLevel2",
    "TestFilterInOutByIncludeMultiRule__train", "TestFilterInOutByIncludeMultiRule__test",
    "TestFilterInByIncludeMultiRule__train", "TestFilterInByIncludeMultiRule__test",
    "TestFilterInOutByExcludeMultiRule__train", "TestFilterInOutByExcludeMultiRule__test",
    "TestAllInOneNetTrain", "TestAllInOneNetVal", "TestAllInOneNetDeploy",
]


def _layer_label(name):
    # INDEX/state.json tell same-named layers apart as "mnist[#0 mnist-train-leveldb]"
    return re.sub(r"\[.*\]$", "", name)


@pytest.mark.parametrize("case", FILTER_CASES)
def test_caffe_filter_net(shared_dir, case):
    d = shared_dir / "caffe_tests"
    inp = parse((d / ("%s.input.prototxt" % case)).read_text())
    exp = parse((d / ("%s.expected.prototxt" % case)).read_text())
    state = json.loads((d / ("%s.state.json" % case)).read_text())
    if case.startswith("TestAllInOneNet"):
        # NetTest: the Net constructor writes phase, stages and level into param.state
        inp.state.phase = caffe_pb2.Phase.Value(state["phase"])
        inp.state.stage.extend(state["stages"])
        inp.state.level = state["level"]
    else:
        assert caffe_pb2.Phase.Name(inp.state.phase) == state["phase"]
        assert inp.state.level == state["level"]
        assert list(inp.state.stage) == state["stages"]
    out, dropped = pure_and_idempotent(filter_net, inp, exp)
    assert [d.name for d in dropped] == [_layer_label(n) for n in state["dropped_layers"]]
    assert [l.name for l in out.layer] == [_layer_label(n) for n in state["kept_layers"]]


def test_caffe_filter_cases_all_covered(shared_dir):
    names = sorted(p.name[:-len(".state.json")]
                   for p in (shared_dir / "caffe_tests").glob("*.state.json"))
    assert names == sorted(FILTER_CASES)


def test_filter_lenet_messages(shared_dir, caplog):
    caplog.set_level(logging.INFO, logger="engine.core.net")
    d = shared_dir / "caffe_tests"
    inp = parse((d / "TestFilterLeNetTrainTest__train.input.prototxt").read_text())
    out, dropped = filter_net(inp)
    assert net_messages(caplog) == [
        "The NetState phase (0) differed from the phase (1) specified by a rule in layer mnist",
        "The NetState phase (0) differed from the phase (1) specified by a rule in layer "
        "accuracy",
    ]
    assert [(x.index, x.name, x.type, x.rule_kind, x.rule_index, x.rule) for x in dropped] == [
        (1, "mnist", "Data", "include", 0, "phase: TEST"),
        (4, "accuracy", "Accuracy", "include", 0, "phase: TEST"),
    ]


# ---------------------------------------------------------------------------
# Against Caffe's recorded logs (../shared/golden): upgrade + filter messages and
# the filtered net Caffe printed ("Initializing net from parameters")
# ---------------------------------------------------------------------------

def _golden_cases(shared_dir):
    cases = []
    for path in sorted((shared_dir / "golden" / "cases").glob("*.json")):
        case = json.loads(path.read_text())
        if "solver" in case:          # the solver builds its nets its own way
            continue
        record = shared_dir / "golden" / "caffe" / path.name
        if record.exists():
            cases.append((path.stem, case, json.loads(record.read_text())))
    return cases


def test_golden_upgrade_and_filter_logs(shared_dir, caplog):
    from engine.core.splits import insert_splits
    from engine.core.upgrade import read_net_params
    problems = []
    cases = _golden_cases(shared_dir)
    assert cases
    for name, case, record in cases:
        caplog.clear()
        caplog.set_level(logging.INFO, logger="engine.core.net")
        caplog.set_level(logging.INFO, logger="engine.core.upgrade")
        path = os.path.normpath(str(shared_dir / "zoo" / case["prototxt"]))
        error = None
        try:
            param = read_net_params(path)
            # pycaffe's Net(file, phase, level=0, stages=...) writes the state
            param.state.phase = caffe_pb2.Phase.Value(case["phase"])
            param.state.stage.extend(case.get("stages", []))
            param.state.level = 0
            filtered, _ = filter_net(param)
            insert_splits(filtered)
        except NetError as exc:
            error = str(exc)
        init = record["log"].get("init", [])
        want = [re.sub(r"/tmp/\S+\.prototxt", "<file>", m) for f, m in init
                if f == "upgrade_proto.cpp" or (f == "net.cpp" and m.startswith("The NetState"))]
        got = [r.getMessage().replace(path, "<file>") for r in caplog.records
               if r.name in ("engine.core.net", "engine.core.upgrade")]
        if got != want:
            problems.append("%s: messages %r, Caffe %r" % (name, got, want))
        # Caffe died in InsertSplits or in FilterNet's include/exclude CHECK
        fatal = [m for f, m in init if f == "insert_splits.cpp"
                 or "Specify either include rules or exclude rules" in m]
        if fatal:
            expect = record.get("expect_error") or fatal[0].split("\n")[0]
            if error is None or expect not in error:
                problems.append("%s: error %r lacks %r" % (name, error, expect))
            continue
        if error is not None:
            problems.append("%s: unexpected error %s" % (name, error))
            continue
        printed = [m for f, m in init if m.startswith("Initializing net from parameters")]
        if not printed:
            continue
        caffe_net = NetParameter()
        try:
            text_format.Parse(printed[0].split("\n", 1)[1], caffe_net)
        except text_format.ParseError:
            continue                  # glog truncated a very long message (GoogLeNet)
        for msg in (caffe_net, filtered):
            # the recording harness switches these on for its own purposes
            msg.ClearField("debug_info")
            msg.ClearField("force_backward")
        if caffe_net != filtered:
            problems.append("%s: filtered net differs from the one Caffe printed" % name)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------
# StateMeetsRule, rule by rule
# ---------------------------------------------------------------------------

def state(text):
    return parse(text, caffe_pb2.NetState)


def rule(text):
    return parse(text, caffe_pb2.NetStateRule)


@pytest.mark.parametrize("st, rl, met, reason", [
    ("phase: TRAIN", "phase: TRAIN", True, None),
    ("phase: TRAIN", "phase: TEST", False,
     "The NetState phase (0) differed from the phase (1) specified by a rule in layer L"),
    ("", "phase: TRAIN", False,          # NetState's default phase is TEST
     "The NetState phase (1) differed from the phase (0) specified by a rule in layer L"),
    ("level: 3", "min_level: 3", True, None),
    ("level: 2", "min_level: 3", False,
     "The NetState level (2) is above the min_level (3) specified by a rule in layer L"),
    ("level: -7", "max_level: -7", True, None),
    ("level: 1", "max_level: 0", False,
     "The NetState level (1) is above the max_level (0) specified by a rule in layer L"),
    ("stage: 'a' stage: 'b'", "stage: 'b' stage: 'a'", True, None),
    ("stage: 'a'", "stage: 'a' stage: 'b'", False,
     "The NetState did not contain stage 'b' specified by a rule in layer L"),
    ("stage: 'a'", "not_stage: 'b'", True, None),
    ("stage: 'a' stage: 'b'", "not_stage: 'c' not_stage: 'b'", False,
     "The NetState contained a not_stage 'b' specified by a rule in layer L"),
    # the first broken condition, in Caffe's order, is the one reported
    ("phase: TRAIN level: 0", "phase: TEST min_level: 1 stage: 'x'", False,
     "The NetState phase (0) differed from the phase (1) specified by a rule in layer L"),
    ("phase: TEST level: 0", "phase: TEST min_level: 1 stage: 'x'", False,
     "The NetState level (0) is above the min_level (1) specified by a rule in layer L"),
    ("phase: TEST level: 5", "min_level: 1 max_level: 4 stage: 'x'", False,
     "The NetState level (5) is above the max_level (4) specified by a rule in layer L"),
    ("phase: TEST level: 2 stage: 'y'", "min_level: 1 max_level: 4 stage: 'x' not_stage: 'y'",
     False, "The NetState did not contain stage 'x' specified by a rule in layer L"),
    ("", "", True, None),
])
def test_state_meets_rule(caplog, st, rl, met, reason):
    caplog.set_level(logging.INFO, logger="engine.core.net")
    assert state_meets_rule(state(st), rule(rl), "L") == (met, reason)
    assert net_messages(caplog) == ([] if reason is None else [reason])


def test_state_meets_rule_quiet(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.net")
    assert state_meets_rule(state("level: 0"), rule("min_level: 1"), "L", log=False)[0] is False
    assert net_messages(caplog) == []


# ---------------------------------------------------------------------------
# FilterNet on small nets
# ---------------------------------------------------------------------------

NET = """
name: "n"
state { phase: TRAIN level: 1 stage: "s1" }
layer { name: "train_data" type: "Input" top: "x" include { phase: TRAIN } }
layer { name: "test_data" type: "Input" top: "x" include { phase: TEST } }
layer { name: "hi" type: "ReLU" bottom: "x" top: "x" include { min_level: 2 } }
layer { name: "lo" type: "ReLU" bottom: "x" top: "x" include { max_level: 0 } }
layer { name: "staged" type: "ReLU" bottom: "x" top: "x" include { stage: "s1" } }
layer { name: "unstaged" type: "ReLU" bottom: "x" top: "x" exclude { stage: "s1" } }
layer { name: "not_s1" type: "ReLU" bottom: "x" top: "x" include { not_stage: "s1" } }
layer { name: "either" type: "ReLU" bottom: "x" top: "x"
        include { phase: TEST } include { stage: "s2" } include { min_level: 1 } }
layer { name: "neither" type: "ReLU" bottom: "x" top: "x"
        include { phase: TEST } include { stage: "s2" } }
layer { name: "ex2" type: "ReLU" bottom: "x" top: "x"
        exclude { phase: TEST } exclude { max_level: 0 } exclude { stage: "s1" } }
layer { name: "plain" type: "ReLU" bottom: "x" top: "x" }
"""


def test_filter_every_rule_type(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.net")
    net = parse(NET)
    out, dropped = filter_net(net)
    assert [l.name for l in out.layer] == ["train_data", "staged", "either", "plain"]
    same(out.state, net.state)
    assert [d.name for d in dropped] == ["test_data", "hi", "lo", "unstaged", "not_s1",
                                         "neither", "ex2"]
    L = "specified by a rule in layer"
    assert net_messages(caplog) == [
        "The NetState phase (0) differed from the phase (1) %s test_data" % L,
        "The NetState level (1) is above the min_level (2) %s hi" % L,
        "The NetState level (1) is above the max_level (0) %s lo" % L,
        # unstaged: the exclude rule is met, which Caffe does not log
        "The NetState contained a not_stage 's1' %s not_s1" % L,
        "The NetState phase (0) differed from the phase (1) %s either" % L,
        "The NetState did not contain stage 's2' %s either" % L,
        "The NetState phase (0) differed from the phase (1) %s neither" % L,
        "The NetState did not contain stage 's2' %s neither" % L,
        # ex2: excludes are checked while the layer is still in
        "The NetState phase (0) differed from the phase (1) %s ex2" % L,
        "The NetState level (1) is above the max_level (0) %s ex2" % L,
    ]


def test_dropped_records():
    out, dropped = filter_net(parse(NET))
    by_name = {d.name: d for d in dropped}
    d = by_name["test_data"]
    assert isinstance(d, DroppedLayer)
    assert (d.index, d.type, d.rule_kind, d.rule_index, d.rule) == (1, "Input", "include", 0,
                                                                    "phase: TEST")
    assert d.reason == ("The NetState phase (0) differed from the phase (1) specified by a "
                        "rule in layer test_data")
    u = by_name["unstaged"]
    assert (u.index, u.rule_kind, u.rule_index, u.rule) == (5, "exclude", 0, 'stage: "s1"')
    assert "exclude rule 0" in u.reason
    assert [(c.kind, c.index, c.met) for c in u.checks] == [("exclude", 0, True)]
    n = by_name["neither"]
    assert (n.rule_kind, n.rule_index, n.rule) == ("include", 1, 'stage: "s2"')
    assert [(c.kind, c.index, c.met) for c in n.checks] == [("include", 0, False),
                                                            ("include", 1, False)]
    assert "did not contain stage 's2'" in n.reason and "phase (0)" in n.reason
    e = by_name["ex2"]
    assert (e.rule_kind, e.rule_index) == ("exclude", 2)
    assert [c.met for c in e.checks] == [False, False, True]
    assert "ex2" in e.describe() and "exclude rule 2" in e.describe()


def test_include_and_exclude_is_an_error(caplog):
    caplog.set_level(logging.INFO, logger="engine.core.net")
    net = parse('layer { name: "a" type: "ReLU" include { phase: TEST } } '
                'layer { name: "both" type: "ReLU" include { phase: TRAIN } '
                'exclude { phase: TEST } }')
    with pytest.raises(NetError, match="Specify either include rules or exclude rules; "
                                       "not both.") as info:
        filter_net(net)
    assert info.value.layer == "both"
    # the layers before it were checked (and logged) first, as in Caffe
    assert net_messages(caplog) == []
    net.state.phase = caffe_pb2.TRAIN
    caplog.clear()
    with pytest.raises(NetError):
        filter_net(net)
    assert net_messages(caplog) == ["The NetState phase (0) differed from the phase (1) "
                                    "specified by a rule in layer a"]


def test_state_argument_overrides_param_state():
    net = parse(NET)
    out, dropped = filter_net(net, state=state("phase: TEST level: 0"))
    assert [l.name for l in out.layer] == ["test_data", "lo", "unstaged", "not_s1", "either",
                                           "neither", "plain"]
    same(out.state, net.state)     # the net's own state field is carried over unchanged


def test_default_state_is_test_phase():
    net = parse('layer { name: "tr" type: "ReLU" include { phase: TRAIN } } '
                'layer { name: "te" type: "ReLU" include { phase: TEST } }')
    out, dropped = filter_net(net)
    assert [l.name for l in out.layer] == ["te"]
    assert not out.HasField("state")


def test_rule_text():
    assert rule_text(rule("phase: TRAIN stage: 'a' not_stage: 'b'")) == \
        'phase: TRAIN stage: "a" not_stage: "b"'


def test_dropped_record_keeps_bottoms_and_tops():
    from google.protobuf import text_format

    from engine.core.filter import filter_net
    from engine.proto import caffe_pb2
    p = text_format.Parse('state { phase: TRAIN } layer { name: "acc" type: "Accuracy" bottom: "ip" '
                          'bottom: "label" top: "acc" include { phase: TEST } }', caffe_pb2.NetParameter())
    _, dropped = filter_net(p, log=False)
    assert dropped[0].bottoms == ("ip", "label") and dropped[0].tops == ("acc",)
