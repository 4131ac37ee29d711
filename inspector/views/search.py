"""Search in a net: any part of a layer, blob, layer-type or block name.
Pure: a NetGraph and blocks in, ranked matches out."""
from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class Match:
    kind: str          # "layer", "blob" or "block"
    name: str
    type: str          # the layer's type; "blob"; "block"
    shape: str         # the top / blob / block output shape
    where: str         # the block it sits in ("" : none)
    score: Tuple       # smaller first


def _shape(shape):
    return "×".join(str(d) for d in shape) if shape else "scalar"


def _rank(text, needle):
    """0 exact, 1 prefix, 2 after a separator, 3 anywhere; None when absent."""
    t = text.lower()
    if t == needle:
        return 0
    if t.startswith(needle):
        return 1
    k = t.find(needle)
    if k < 0:
        return None
    return 2 if t[k - 1] in "/_-." else 3


def search(graph, text, blocks=(), limit=30):
    """(matches, total): the best ``limit`` matches of ``text`` (case-insensitive
    substring) among layer names and types, blob names and block names; a
    name match beats a type match, an exact or prefix match beats the rest."""
    needle = (text or "").strip().lower()
    if not needle:
        return [], 0
    innermost = {}
    for b in sorted(blocks, key=lambda b: -len(b.layers)):
        for i in b.layers:
            innermost[i] = b.id
    found: List[Match] = []
    for l in graph.layers:
        if l.is_split:
            continue
        r = _rank(l.name, needle)
        rt = _rank(l.type, needle)
        if r is None and rt is None:
            continue
        score = (r, 0, l.index) if r is not None else (10 + rt, 0, l.index)
        top = graph.blobs[l.top_ids[0]].shape if l.top_ids else ()
        found.append(Match("layer", l.name, l.type, _shape(top), innermost.get(l.index, ""), score))
    split_tops = {t for s in graph.splits for t in s.tops}
    for b in graph.blobs:
        if b.name in split_tops:
            continue
        r = _rank(b.name, needle)
        if r is None:
            continue
        w = b.writers[0] if b.writers else -1
        found.append(Match("blob", b.name, "blob", _shape(b.shape), innermost.get(w, ""), (r, 1, max(w, 0))))
    for b in blocks:
        r = _rank(b.id, needle)
        if r is None:
            continue
        out = b.outputs[-1] if b.outputs else ""
        shape = _shape(graph.blob(out).shape) if out and graph.has_blob(out) else ""
        found.append(Match("block", b.id, "block of %d layers" % len(b.layers), shape, b.parent or "",
                           (r, -1, b.layers[0])))
    found.sort(key=lambda m: m.score)
    return found[:limit], len(found)


def blocks_to_open(graph, blocks, kind, name):
    """The block ids to expand so that ``kind`` ``name`` is drawn on its own:
    every block holding the layer (for a blob: its first writer), or every
    block around the block."""
    by_id = {b.id: b for b in blocks}
    if kind == "block":
        out, p = [], by_id[name].parent if name in by_id else None
        while p is not None:
            out.append(p)
            p = by_id[p].parent
        return out
    if kind == "layer" and graph.has_layer(name):
        idx = graph.layer(name).index
    elif kind == "blob" and graph.has_blob(name) and graph.blob(name).writers:
        idx = graph.blob(name).writers[0]
    else:
        return []
    return [b.id for b in blocks if idx in b.layers]
