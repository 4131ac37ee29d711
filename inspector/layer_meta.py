"""What the inspector shows for each Caffe layer type.

The facts (category, one-line summary, the LayerParameter fields holding the settings)
live on the layer classes (``Layer.category``, ``summary``, ``param_fields``); this
module only adds the display table: a colour per category (Tableau 10, readable by most
colour-blind people).  Unknown types fall back to ``OTHER``.
"""
from dataclasses import dataclass
from functools import lru_cache

import engine

COLOURS = {
    "input": "#4e79a7",
    "conv": "#f28e2b",
    "pool": "#59a14f",
    "fc": "#e15759",
    "activation": "#b07aa1",
    "norm": "#edc948",
    "structure": "#9c9c9c",
    "split": "#cfcfcf",
    "recurrent": "#76b7b2",
    "loss": "#ff9da7",
    "output": "#17becf",
    "python": "#9c755f",
    "other": "#bab0ac",
}
# category: (colour, label)
CATEGORIES = {c: (COLOURS[c], label) for c, label in engine.layer_categories().items()}


@dataclass(frozen=True)
class LayerMeta:
    category: str
    description: str
    param_fields: tuple = ()


OTHER = LayerMeta("other", "Layer type unknown to the engine.", ())


@lru_cache(maxsize=None)
def meta(layer_type):
    """The LayerMeta of a type, from its class (``OTHER`` for unknown types)."""
    cls = engine.layer_class(layer_type)
    if cls is None:
        return OTHER
    return LayerMeta(cls.category, cls.summary, tuple(cls.param_fields))


def category(layer_type):
    return meta(layer_type).category


def colour(layer_type):
    return CATEGORIES[meta(layer_type).category][0]


def category_colour(cat):
    return CATEGORIES.get(cat, CATEGORIES["other"])[0]
