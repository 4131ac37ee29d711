"""inspector.layout.common.table: a small table is html components, a big one a single
component holding its HTML (Dash's renderer costs cells x page components otherwise)."""
from dash import dcc, html

from inspector.layout.common import BIG_TABLE_CELLS, table


def _rows(n):
    return [{"layer": "res4b22_branch2c *x*", "blob": "<b>&", "n": i, "ok": i % 2 == 0, "message": "a\nb"}
            for i in range(n)]


def test_a_small_table_is_html_components():
    t = table(_rows(3))
    assert isinstance(t, html.Table) and t.className == "grid"
    head, body = t.children
    assert [th.children for th in head.children.children] == ["layer", "blob", "n", "ok", "message"]
    assert [td.children for td in body.children[0].children] == ["res4b22_branch2c *x*", "<b>&", 0, "yes", "a\nb"]


def test_a_big_table_is_one_component_with_every_row_escaped():
    n = BIG_TABLE_CELLS // 5 + 1
    t = table(_rows(n), cls="grid")
    assert isinstance(t, dcc.Markdown) and t.dangerously_allow_html
    src = t.children
    assert src.startswith('<table class="grid"><thead><tr><th>layer</th>')
    assert src.count("<tr>") == n + 1 and src.count("<td>") == 5 * n
    # the text as written (no markup from a cell, no Markdown emphasis), on one line: a blank
    # line would end Markdown's HTML block
    assert "<td>res4b22_branch2c *x*</td><td>&lt;b&gt;&amp;</td><td>0</td><td>yes</td><td>a&#10;b</td>" in src
    assert "\n" not in src


def test_a_big_table_with_a_component_in_a_cell_stays_html():
    rows = _rows(BIG_TABLE_CELLS)
    rows[0]["layer"] = html.A("conv1", href="#")
    assert isinstance(table(rows), html.Table)


def test_numpy_scalars_and_bools_are_plain_cells():
    import numpy as np

    from inspector.layout.common import cell_table
    t = cell_table([[np.float32(0.5), np.int64(3), True, None]] * (BIG_TABLE_CELLS // 4 + 1))
    assert isinstance(t, dcc.Markdown) and "<td>0.5</td><td>3</td><td>yes</td><td></td>" in t.children


def test_no_rows_says_so():
    t = table([], empty="nothing here")
    assert isinstance(t, html.Div) and t.children == "nothing here"


def test_the_value_table_of_a_blob_is_one_component():
    """16 x 16 values (a blob picked in the graph): one component, no header row."""
    from inspector.layout.side_panels import value_table
    rows = [["%.3g" % (r * 16 + c) for c in range(16)] for r in range(16)]
    t = value_table(rows, (0, 0), (1, 3, 224, 224))
    head, grid = t.children
    assert "showing 16×16 of 1×3×224×224" in head.children
    assert isinstance(grid, dcc.Markdown) and grid.children.startswith('<table class="grid values"><tbody><tr>')
    assert grid.children.count("<td>") == 256 and "<th>" not in grid.children
    small = value_table([["1", "2"]], (0,), (2,))
    assert isinstance(small.children[1], html.Table)
