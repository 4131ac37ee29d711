"""Export a blob's data or diff as a NumPy .npy file: the live array, or, while
the timeline shows an earlier step, the array pinned at that step."""
import io
import re

import numpy as np
from dash import Input, Output, State, dcc, no_update

from inspector import adapters, ids
from inspector.state import debugger

from .common import guarded


class ExportRefused(ValueError):
    pass


def blob_array(app, sid, selection, which):
    """(filename, array) of the selected blob's ``which`` ("data" or "diff")."""
    which = "diff" if which == "diff" else "data"
    with app.store.use(sid) as s:
        ld = s.loaded
        if ld is None:
            raise ExportRefused("no net is loaded")
        if not selection or selection.get("kind") != "blob" or not ld.graph.has_blob(selection.get("name")):
            raise ExportRefused("select a blob in the graph first (a blob node or an edge's label)")
        name = selection["name"]
        step = debugger.viewed_step(ld)
        if step is not None:
            _stats, arr = debugger.recorded_blob_stats(ld, name, which)
            if arr is None:
                raise ExportRefused("step %d did not keep %s's %s (only pinned blobs keep full arrays): pin it, "
                                    "or go back to the live net" % (step.index, name, which))
            arr = np.array(arr, copy=True)
            suffix = "_step%d" % step.index
        else:
            arr = np.array(adapters.blob_values(ld.net.blobs[name], which), copy=True)
            suffix = ""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return "%s_%s%s.npy" % (safe, which, suffix), arr


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def register(dash_app, app):
    @dash_app.callback(
        Output(ids.NPY_DOWNLOAD, "data"), Input(ids.NPY_BUTTON, "n_clicks"),
        State(ids.SELECTION, "data"), State(ids.NPY_WHICH, "value"), State(ids.SESSION, "data"),
        prevent_initial_call=True)
    @guarded(1, "exporting the array")
    def npy_cb(_n, selection, which, sid):
        filename, arr = blob_array(app, sid, selection, which)
        data = npy_bytes(arr)
        return dcc.send_bytes(data, filename) if data else no_update
