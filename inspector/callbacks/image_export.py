"""The graph's image export: the camera button saves the format chosen in
the toolbar (ids.IMAGE_FORMAT, PNG or SVG).

dcc.Graph replots only when its figure changes, so a new ``config`` alone
never reaches the plot that is on screen: the camera kept saving PNG after
SVG was chosen.  This clientside callback sets the format on the live plot
(the camera reads it when clicked); graph.py's config callback keeps the
``config`` prop in step for the next replot."""
from dash import Input, Output

from inspector import ids

APPLY_JS = """
function (fmt) {
    fmt = fmt || 'png';
    const holder = document.getElementById('%(graph)s');
    const gd = holder && (holder.classList.contains('js-plotly-plot') ? holder
                          : holder.querySelector('.js-plotly-plot'));
    if (gd && gd._context) {
        const opts = Object.assign({}, gd._context.toImageButtonOptions || {});
        opts.format = fmt;
        opts.filename = opts.filename || 'net';
        gd._context.toImageButtonOptions = opts;
        gd.querySelectorAll('.modebar-btn[data-title^="Download plot"]').forEach(function (b) {
            b.setAttribute('data-title', 'Download plot as ' + fmt.toUpperCase());
        });
    }
    return fmt;
}
""" % {"graph": ids.GRAPH}


def register(dash_app, app):
    dash_app.clientside_callback(APPLY_JS, Output(ids.IMAGE_FORMAT_APPLIED, "data"),
                                 Input(ids.IMAGE_FORMAT, "value"), prevent_initial_call=True)
