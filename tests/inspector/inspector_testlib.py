"""Nets and helpers shared by the inspector tests (imported by name, so it is
not confused with another folder's conftest)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LENET = ROOT / "examples" / "lenet" / "lenet_train_test.prototxt"
SIAMESE = ROOT / "examples" / "shared_stages" / "siamese_stages.prototxt"
RESNET_TINY = ROOT / "examples" / "resnet_tiny" / "resnet_tiny.prototxt"


OVERFLOW_NET = """
name: "Overflow"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "scale_up" type: "Power" bottom: "data" top: "big"
        power_param { power: 1 scale: 1 shift: 100 } }
layer { name: "exp1" type: "Exp" bottom: "big" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "fc" type: "InnerProduct" bottom: "e2" top: "fc"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""

# a deploy net (Input, no loss): it opens in TEST
DEPLOY_NET = """name: "TinyDeploy"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" dropout_param { dropout_ratio: 0.5 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""

# TEST feeds it from Input; the TRAIN-only Data layer names a file outside any model root, which a net
# opened from the page may not read (the file-access check runs after filtering)
PHASED_NET = """name: "Phased"
layer { name: "train_data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        data_param { source: "/etc/passwd_lmdb" backend: LMDB batch_size: 2 } }
layer { name: "test_data" type: "Input" top: "data" include { phase: TEST }
        input_param { shape { dim: 2 dim: 3 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
"""

# PHASED_NET with a TRAIN-only layer reading a blob nobody makes: TRAIN fails in Init, TEST builds
PHASED_BROKEN_TRAIN = PHASED_NET + """layer { name: "bad" type: "ReLU" bottom: "nope" top: "bad"
                                      include { phase: TRAIN } }
"""

SYNTAX_ERROR_NET = """name: "Broken"
layer {
  name: "in"
  type: "Input"
  top: "data"
  input_param { shape { dim: 1 dim: 3 } }
}
layer {
  name: "fc"
  type: "InnerProduct"
  bottom: "data"
  top: "fc"
  inner_product_param { num_output: 2
}
"""


def build_loaded(path, phase="TRAIN", level=0, stages=()):
    from inspector.state import loading
    from inspector.state.sessions import ModelSpec
    return loading.build(ModelSpec(model=str(path), phase=phase, level=level, stages=tuple(stages)))


def data_url(text_or_bytes, mime="text/plain"):
    import base64
    b = text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
    return "data:%s;base64,%s" % (mime, base64.b64encode(b).decode())
