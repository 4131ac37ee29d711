"""Imported by the load check's fork server (inspector.state.guard): everything a check runs,
loaded once, so that each check's process starts with it (a fork, milliseconds): the engine,
every layer type, and what a first build imports and fills on its way (stand-ins, fillers,
the upgrade and filter code), by building the bundled LeNet once."""
import engine
from inspector.config import data_dir
from inspector.state import loading
from inspector.state.sessions import ModelSpec

engine.layer_type_list()


def _warm():
    lenet = data_dir("examples") / "lenet" / "lenet_train_test.prototxt"
    if not lenet.is_file():
        return
    try:
        loading.build_net(ModelSpec(model=str(lenet), phase="TRAIN"))
    except Exception:  # noqa: BLE001 - warming is a nicety: a check imports what it needs anyway
        pass


_warm()
