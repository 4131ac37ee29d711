"""What the page shows, built from data: pure functions and frozen dataclasses.

engine.Net → :mod:`.model` (a plain NetGraph) → :mod:`.view_models` (the graph),
:mod:`.panel_models` (details, findings), :mod:`.debug_views` (timeline, training,
compare) → :mod:`.figures`, :mod:`.debug_figures` (Plotly) and :mod:`.cyto`
(cytoscape elements, SVG).  :mod:`.run_state` says which results are fresh,
:mod:`.search` finds names, :mod:`.layer_meta` colours layer types.

Nothing here holds a session, a lock or a Dash component: these modules never
import ``inspector.state``, ``inspector.callbacks`` or ``inspector.layout``
(pyproject.toml's import-linter contracts and tests/inspector/test_inspector_structure.py
check it).
"""
