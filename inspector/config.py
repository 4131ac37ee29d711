"""The inspector's settings (from the command line or a test)."""
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Tuple

PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name):
    """``assets/`` or ``examples/``: inside the package when installed (pyproject maps them
    there), at the repository root in a checkout."""
    for base in (PACKAGE_DIR, PACKAGE_DIR.parent):
        if (base / name).is_dir():
            return base / name
    return PACKAGE_DIR.parent / name

# label -> (path under examples/, phase)
BUNDLED_EXAMPLES = (
    ("LeNet (digits) — train/test", "lenet/lenet_train_test.prototxt", "TRAIN"),
    ("Siamese — shared weights, stages, level", "shared_stages/siamese_stages.prototxt", "TRAIN"),
    ("Tiny ResNet — splits, in-place BN/Scale/ReLU", "resnet_tiny/resnet_tiny.prototxt", "TRAIN"),
)


def default_max_net_bytes():
    """Half of the machine's memory (engine.half_the_memory): the default budget of one net
    (``--max-net-mb``), so that one tab's net cannot take the server's memory from the others."""
    import engine
    return engine.half_the_memory()


def default_net_limits():
    """The limits a net from the page is read under (engine.NetLimits: text, layers, tops)."""
    import engine
    return engine.NetLimits()


def default_spare_bytes():
    """2 GiB, or a quarter of the machine's memory where that is less: the default budget of
    the tabs' spare nets together (``--spare-mb``), nets built ahead in their other phase."""
    try:
        import psutil
        return int(min(2 << 30, psutil.virtual_memory().total // 4))
    except Exception:  # pragma: no cover - psutil is a requirement
        return 1 << 30


@dataclass
class InspectorConfig:
    model: Optional[str] = None               # prototxt given on the command line
    weights: Optional[str] = None
    solver: Optional[str] = None
    phase: Optional[str] = None               # None: the net's own (inspector.state.netstate.default_phase)
    stages: Tuple[str, ...] = ()
    level: int = 0
    gpu: bool = False
    host: str = "127.0.0.1"
    port: int = 8050
    model_root: str = field(default_factory=os.getcwd)
    allow_python_layers: bool = False
    max_upload_bytes: int = 256 * 2 ** 20     # per file
    max_sessions: int = 8
    idle_seconds: float = 3600.0
    title: str = "Caffe Inspector"
    cache_dir: Optional[str] = None           # background-callback cache (diskcache); None: a temp folder
    job_expire_seconds: int = 3600            # unread job results are dropped after this
    prebuild: bool = False                    # build the default net ahead for the next tab (the command line: on)
    timeline_budget_mb: int = 256             # per loaded net: the timeline's records and pinned arrays
    # per net: what its blobs, params and buffers may declare at Init (engine.memory_budget);
    # a net past it is refused before its memory is allocated.  None: no limit
    max_net_bytes: Optional[int] = field(default_factory=default_max_net_bytes)
    # with ``prebuild``: what the tabs' spare nets (a net opened from a path, an upload or an
    # address, built ahead in its other phase; one per tab, those primed longest ago dropped
    # first) may need all together (net.memory_required_bytes).  0: no tab has a spare
    spare_bytes: int = field(default_factory=default_spare_bytes)
    # a net's text, layers and tops (engine.NetLimits; --max-text-mb, --max-layers, --max-tops)
    net_limits: Any = field(default_factory=default_net_limits)
    # a net from the page is first built in a bounded child process (inspector.state.guard): its CPU
    # seconds (0: no check), and how many such checks run at once
    load_seconds: float = 30.0
    load_workers: int = 2
    # a run asked from the page stops after the first layer that ends past this many seconds
    # (a breakpoint-like stop: Continue goes on; 0: no limit), and is refused before it starts
    # when one layer needs more than this many GFLOP forward (a layer cannot stop halfway; 0: none)
    run_seconds: float = 120.0
    max_layer_gflop: float = 2000.0

    def examples(self):
        """[(label, absolute path, phase)] of the bundled examples that exist."""
        out = []
        for label, rel, phase in BUNDLED_EXAMPLES:
            p = data_dir("examples") / rel
            if p.is_file():
                out.append((label, str(p), phase))
        return out
