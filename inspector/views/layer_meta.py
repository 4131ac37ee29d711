"""What the inspector shows for each Caffe layer type.

The facts (category, one-line summary, the LayerParameter fields holding the settings)
live on the layer classes (``Layer.category``, ``summary``, ``param_fields``); this
module only adds the display table: a colour per category (Tableau 10, readable by most
colour-blind people; engine.instruments.folded_graph's, so reports match the page).  Unknown
types fall back to ``OTHER``.
"""
from dataclasses import dataclass
from functools import lru_cache

import engine
from engine.instruments.folded_graph import CATEGORY_COLOURS

COLOURS = CATEGORY_COLOURS      # the reports' graphs use the same palette
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
