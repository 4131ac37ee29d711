"""engine.instruments.blocks: the blocks a person folds in ResNet, GoogLeNet,
MobileNet, FCN-8s and the bundled examples, found from names and from the
graph's structure."""
from pathlib import Path

import pytest

from benchmarks import netgen
from engine.core.upgrade import read_net_params
from engine.instruments.blocks import (
    find_blocks,
    innermost,
    name_key,
    net_layers,
    param_layers,
    stage_key,
    with_sections,
)

ROOT = Path(__file__).resolve().parents[1]


def _by_id(blocks):
    return {b.id: b for b in blocks}


def _names(layers, block):
    return [layers[i][0] for i in block.layers]


def _check_family(layers, blocks):
    """Ids unique, parents contain their children, blocks nest or are disjoint,
    and no path leaves a block and comes back into it."""
    ids = [b.id for b in blocks]
    assert len(ids) == len(set(ids))
    by = _by_id(blocks)
    for b in blocks:
        s = set(b.layers)
        if b.parent is not None:
            assert s < set(by[b.parent].layers), (b.id, b.parent)
        for o in blocks:
            t = set(o.layers)
            assert not (s & t) or s <= t or t <= s, (b.id, o.id)
    # closed: a blob written outside after the block's first layer never feeds back in
    for b in blocks:
        inside = set(b.layers)
        first, last = min(inside), max(inside)
        for i in range(first, last + 1):
            if i in inside:
                continue
            reads_inside = set(layers[i][2]) & {t for k in inside if k < i for t in layers[k][3]}
            writes = set(layers[i][3])
            fed_later = any(set(layers[k][2]) & writes for k in inside if k > i)
            assert not (reads_inside and fed_later), (b.id, layers[i][0])


def test_name_keys():
    assert name_key("res4b22_branch2a") == "res4b22"
    assert name_key("res4b22") == "res4b22"
    assert name_key("inception_4a/1x1") == "inception_4a"
    assert name_key("conv5_3/dw/bn") == "conv5_3"
    assert name_key("conv1_2") == "conv1"
    assert name_key("score_pool4") == "score_pool4"       # no digit before the first "_"
    assert stage_key("res4b22") == "res4" and stage_key("inception_4a") == "inception_4"
    assert stage_key("conv5_3") == "conv5" and stage_key("pool1") is None


@pytest.mark.parametrize("depth, counts", [(50, (3, 4, 6, 3)), (152, (3, 8, 36, 3))])
def test_resnet_blocks_and_stages(depth, counts):
    layers = param_layers(netgen.resnet(depth, fillers=False))
    blocks = find_blocks(layers)
    by = _by_id(blocks)
    _check_family(layers, blocks)
    residual = [b for b in blocks if b.kind == "name"]
    assert len(residual) == sum(counts)
    for s, n in zip(range(2, 6), counts):
        stage = by["res%d" % s]
        assert stage.kind == "stage" and stage.parent is None
        assert len([b for b in residual if b.parent == stage.id]) == n
    tag = "4b22" if depth == 152 else "4b"
    b = by["res" + tag]
    assert b.parent == "res4"
    assert _names(layers, b) == [
        "res%s_branch2a" % tag, "bn%s_branch2a" % tag, "scale%s_branch2a" % tag, "res%s_branch2a_relu" % tag,
        "res%s_branch2b" % tag, "bn%s_branch2b" % tag, "scale%s_branch2b" % tag, "res%s_branch2b_relu" % tag,
        "res%s_branch2c" % tag, "bn%s_branch2c" % tag, "scale%s_branch2c" % tag, "res" + tag, "res%s_relu" % tag]
    prev = "res4b21" if depth == 152 else "res4a"
    assert b.inputs == (prev,) and b.outputs == ("res" + tag,)
    assert len(by["res2a"].layers) == 16          # with the projection shortcut
    # stem and head stay outside every block
    inner = innermost(blocks)
    names = [l[0] for l in layers]
    for n in ("conv1", "pool1", "pool5", "fc1000", "prob"):
        assert names.index(n) not in inner


def test_resnet_blocks_on_the_engines_net_with_splits():
    import engine
    net = engine.Net(_write(netgen.resnet_prototxt(50, train=True, fillers=False)), engine.TRAIN)
    layers = net_layers(net)
    blocks = find_blocks(layers)
    by = _by_id(blocks)
    _check_family(layers, blocks)
    names = _names(layers, by["res3b"])
    assert names[0] == "res3b_branch2a" and "res3b" in names and "res3b_relu" in names
    assert any(n.endswith("_split") for n in names)      # the Split after the block's output goes with it
    assert {b.id for b in blocks if b.kind == "stage"} == {"res2", "res3", "res4", "res5"}


def _write(text):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
        f.write(text)
    return f.name


def test_googlenet_inception_modules(shared_dir):
    for name, extra in (("deploy.prototxt", ()), ("train_val.prototxt", ("loss1", "loss2"))):
        param = read_net_params(str(shared_dir / "zoo" / "models" / "bvlc_googlenet" / name))
        layers = param_layers(param)
        blocks = find_blocks(layers)
        by = _by_id(blocks)
        _check_family(layers, blocks)
        modules = [b for b in blocks if b.id.startswith("inception_") and b.kind == "name"]
        assert [b.id for b in modules] == ["inception_%s" % k for k in
                                           ("3a", "3b", "4a", "4b", "4c", "4d", "4e", "5a", "5b")]
        m = by["inception_4a"]
        assert len(m.layers) == 14 and m.outputs == ("inception_4a/output",)
        assert all(n.startswith("inception_4a/") for n in _names(layers, m))
        assert by["inception_5"].kind == "stage" and by["inception_5b"].parent == "inception_5"
        for e in extra:                                  # the auxiliary classifiers
            assert set(by[e].outputs) >= {"%s/loss1" % e if e == "loss1" else "%s/loss2" % e}


def test_mobilenet_depthwise_separable_pairs():
    layers = param_layers(netgen.mobilenet())
    blocks = find_blocks(layers)
    by = _by_id(blocks)
    _check_family(layers, blocks)
    b = by["conv5_3"]
    assert _names(layers, b) == ["conv5_3/dw", "conv5_3/dw/bn", "conv5_3/dw/scale", "relu5_3/dw",
                                 "conv5_3/sep", "conv5_3/sep/bn", "conv5_3/sep/scale", "relu5_3/sep"]
    assert b.parent == "conv5" and by["conv5"].kind == "stage"
    assert len([x for x in blocks if x.parent == "conv5"]) == 6
    assert b.inputs == ("conv5_2/sep",) and b.outputs == ("conv5_3/sep",)


def test_fcn8s_vgg_stages_and_skip_fusions():
    layers = param_layers(netgen.fcn8s())
    blocks = find_blocks(layers)
    by = _by_id(blocks)
    _check_family(layers, blocks)
    assert _names(layers, by["conv1"]) == ["conv1_1", "relu1_1", "conv1_2", "relu1_2"]
    assert len(by["conv3"].layers) == 6
    # the skip from pool4 to fuse_pool4 closes a block named after its join, inside the pool3 one
    assert by["fuse_pool4"].kind == "structure" and by["fuse_pool4"].parent == "fuse_pool3"
    assert by["fuse_pool4"].inputs == ("pool4",) and by["fuse_pool4"].outputs == ("fuse_pool4",)
    assert by["conv5"].parent == "fuse_pool4"


def test_structure_alone_finds_residual_blocks():
    """The tiny ResNet with every layer renamed to l0, l1, ...: the blocks come from the graph."""
    param = read_net_params(str(ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt"))
    layers = param_layers(param)
    named = find_blocks(layers)
    anon = find_blocks([("l%d" % i, t, b, tp) for i, (_n, t, b, tp) in enumerate(layers)])
    assert [b.layers for b in anon] == [b.layers for b in named]
    assert [b.kind for b in anon] == ["structure", "structure"]
    assert [b.id for b in named] == ["res1", "res2"]     # named after their join layer
    joins = [layers[b.layers[-2]][0] for b in named]
    assert joins == ["res1", "res2"]


def test_bundled_examples():
    for rel, expected in (("lenet/lenet_train_test.prototxt", []),
                          ("resnet_tiny/resnet_tiny.prototxt", ["res1", "res2"])):
        layers = param_layers(read_net_params(str(ROOT / "examples" / rel)))
        blocks = find_blocks(layers)
        _check_family(layers, blocks)
        assert [b.id for b in blocks] == expected


def test_no_block_swallows_the_net():
    layers = [("layer_%d" % i, "ReLU" if i % 2 else "InnerProduct", ["x%d" % i], ["x%d" % (i + 1)])
              for i in range(20)]
    assert find_blocks(layers) == []                      # one name key for all: not a block
    assert find_blocks([]) == []


def test_zoo_models_when_present(shared_dir):
    """Any ResNet / MobileNet / FCN definition in ../shared/zoo folds into blocks."""
    found = [p for p in (shared_dir / "zoo").rglob("*.prototxt")
             if any(k in str(p).lower() for k in ("resnet", "mobilenet", "fcn"))]
    if not found:
        pytest.skip("no ResNet/MobileNet/FCN prototxt in ../shared/zoo")
    for p in found:
        layers = param_layers(read_net_params(str(p)))
        blocks = find_blocks(layers)
        _check_family(layers, blocks)
        assert blocks, p


def test_sections_before_the_first_stage_and_after_the_last(shared_dir):
    """ResNet-152 reads input, res2 .. res5, head: the stem and the classifier are sections
    (issue 22: names at every zoom); GoogLeNet's stem holds a block (conv2), which the
    section takes as its child; nets without stages get none."""
    layers = param_layers(netgen.deploy(152))
    blocks = with_sections(layers, find_blocks(layers))
    _check_family(layers, blocks)
    outer = [b for b in blocks if b.parent is None]
    assert [(b.id, b.kind) for b in outer] == [("input", "section"), ("res2", "stage"), ("res3", "stage"),
                                               ("res4", "stage"), ("res5", "stage"), ("head", "section")]
    by = _by_id(blocks)
    assert _names(layers, by["input"]) == ["conv1", "bn_conv1", "scale_conv1", "conv1_relu", "pool1"]
    assert _names(layers, by["head"]) == ["pool5", "fc1000", "prob"]
    assert by["head"].outputs == ("prob",)
    param = read_net_params(str(shared_dir / "zoo" / "models" / "bvlc_googlenet" / "deploy.prototxt"))
    layers = param_layers(param)
    blocks = with_sections(layers, find_blocks(layers))
    _check_family(layers, blocks)
    by = _by_id(blocks)
    assert by["conv2"].parent == "input" and by["input"].kind == "section"
    assert [b.id for b in blocks if b.parent is None] == ["input", "inception_3", "inception_4", "inception_5",
                                                         "head"]
    # nets without stages: no sections
    tiny = param_layers(read_net_params(str(ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt")))
    assert [b.id for b in with_sections(tiny, find_blocks(tiny))] == [b.id for b in find_blocks(tiny)]
    lenet = param_layers(read_net_params(str(ROOT / "examples" / "lenet" / "lenet_train_test.prototxt")))
    assert with_sections(lenet, find_blocks(lenet)) == []
