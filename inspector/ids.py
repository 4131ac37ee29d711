"""Component ids of the inspector page, one constant each.

Every layout builder and callback refers to components through these names,
so an id is spelled in exactly one place.
"""

# ---------------------------------------------------------------- stores (ids and cursors only)
SESSION = "session-id"            # the server-side session's id
NET_VERSION = "net-version"       # bumped by the server when a net is (re)loaded
RUN_VERSION = "run-version"       # bumped by the server after every run / input change
PANELS_NET = "panels-net"         # NET_VERSION, passed on once the graph of that net is drawn (graph.js)
SELECTION = "selection"           # {"kind": "layer"|"blob", "name": str}
EXPANDED_BLOCKS = "expanded-blocks"   # list of expanded block ids (owner: the graph)

# ---------------------------------------------------------------- the address (inspector/state/urlstate.py)
URL = "page-url"                  # dcc.Location: the query string the page was opened with
URL_POP = "url-pop"               # {"search", "n"}: set by the browser's back/forward buttons
URL_STATE = "url-state"           # {"search", "net"}: the address the page should show now
URL_WRITTEN = "url-written"       # what the clientside writer last put into the address bar

# ---------------------------------------------------------------- page chrome
ERROR_BANNER = "error-banner"
ERROR_TEXT = "error-text"
ERROR_DISMISS = "error-dismiss"

# ---------------------------------------------------------------- loading
EXAMPLE = "example-select"
MODEL_PATH = "model-path"
MODEL_PATH_OPEN = "model-path-open"
UPLOAD_MODEL = "upload-model"
UPLOAD_WEIGHTS = "upload-weights"
UPLOAD_SOLVER = "upload-solver"
UPLOAD_MEAN = "upload-mean"
PHASE = "phase"
LEVEL = "level"
STAGES = "stages"
DEVICE = "device"
LOAD_STATUS = "load-status"
LOAD_ERROR = "load-error"
# structure-only nets: data layers whose source is missing, stood in by Inputs (engine.core.standins)
STANDIN_BOX = "standin-box"           # shown while the net has stand-ins
STANDIN_TEXT = "standin-text"         # which source is missing, what was assumed
STANDIN_FORM = "standin-form"         # one shape box per stood-in top
STANDIN_SHAPE = "standin-shape"       # pattern-matching id type: {"type": STANDIN_SHAPE, "top": name}
STANDIN_APPLY = "btn-standin-apply"   # rebuild the net with the shapes typed

# ---------------------------------------------------------------- graph
GRAPH = "net-graph"
COLOUR_BY = "colour-by"
BLOB_MODE = "blob-mode"
GRAPH_OPTIONS = "graph-options"   # checklist: fold splits / fold in-place / labels
IMAGE_FORMAT = "image-format"
IMAGE_FORMAT_APPLIED = "image-format-applied"   # the format the graph's camera button saves now
GRAPH_HOLDER = "net-graph-holder"     # wraps the graph (aria-label "Network graph"), the minimap, the hover box
GRAPH_TITLE = "graph-title"
GRAPH_LEGEND = "graph-legend"
MINIMAP = "graph-minimap"             # the overview canvas with the visible window
MINIMAP_TOGGLE = "graph-minimap-toggle"   # hides / shows the overview (assets/graph.js)
ONNX_SAVE = "btn-onnx-save"           # saves the loaded net as an ONNX model (engine.ports)
ONNX_DOWNLOAD = "download-onnx"
ONNX_STATUS = "onnx-status"            # what Save ONNX answered (saved, or why the net cannot be exported)
IMAGE_SAVE = "btn-image-save"         # saves the graph as PNG (cytoscape) or SVG (the server draws it)
GRAPH_DOWNLOAD = "graph-download"     # dcc.Download of the SVG
SEARCH_BOX = "graph-search-box"       # wrapper of the search input (aria-label "Search layers and blobs")
SEARCH = "graph-search"
SEARCH_RESULTS = "graph-search-results"
SEARCH_PICK = "graph-search-pick"     # {"kind", "name", "n"}: a match chosen (click or Enter)
FOCUS = "graph-focus"                 # {"kind", "name", "n"}: centre the view on this (clientside)
FIT_NET = "btn-fit-net"
FIT_SELECTION = "btn-fit-selection"
EXPAND = "btn-expand"                 # the selected block (or the folded block around the selection)
COLLAPSE = "btn-collapse"
EXPAND_ALL = "btn-expand-all"
COLLAPSE_ALL = "btn-collapse-all"
BLOCK_TOGGLE = "block-toggle"         # {"id", "n"}: a double-click on a block (clientside)
GRAPH_META = "graph-meta"             # {"net", "n"}: sent with the elements (a new net: the first view)
GRAPH_CLIENT = "graph-client"         # written by the clientside graph callbacks (what they last did)
VIEW_MENU = "graph-view-menu"         # the navigation bar's menus (html.Details): blobs and display options,
SAVE_MENU = "graph-save-menu"         # and the image format with Save image

# ---------------------------------------------------------------- stepping
START = "range-start"
END = "range-end"
SET_START = "set-start-from-selection"
SET_END = "set-end-from-selection"
FORWARD = "btn-forward"
BACKWARD = "btn-backward"
STEP_FORWARD = "btn-step-forward"
STEP_BACKWARD = "btn-step-backward"
RUN_TO = "btn-run-to-selected"       # Run to cursor (aria-label): to the selected layer
CONTINUE = "btn-continue"             # resume after the layer that stopped (F8)
STEP_OVER = "btn-step-over"           # the folded block at the step cursor as one step (F10)
HELP_BUTTON = "btn-shortcuts"         # opens the keyboard shortcuts overlay (also "?")
HELP_OVERLAY = "shortcuts-overlay"
JOB_RESUME = "job-resume"             # dcc.Store {"n"}: Continue asks the job runner to go on with a solver run
FORWARD_BACKWARD = "btn-forward-backward"
RESET = "btn-reset"
SOLVER_STEP = "btn-solver-step"
RUN_MESSAGE = "run-message"
FINDINGS_LOADING = "findings-loading"
RUN_BUSY = "run-busy"                 # "⟳ running…" while a step, range or pass runs on the server
LOAD_BUSY = "load-busy"               # "⟳ loading the net…" while a net (or its other phase) is built
GRAPH_BUSY = "graph-busy"             # "⟳ drawing…" while the server makes the graph's elements
DETAILS_LOADING = "details-loading"   # the details panel's "loading" note while the server builds them
BLOB_BUSY = "blob-busy"               # "⟳ drawing the blob's charts…" (histogram, feature maps, values)
NAN_ALERT = "nan-alert"
NAN_TEXT = "nan-text"
NAN_SELECT = "nan-select"

# ---------------------------------------------------------------- inputs
INPUT_KIND = "input-kind"
INPUT_VALUE = "input-value"
INPUT_SEED = "input-seed"
LABEL_CLASSES = "label-classes"
UPLOAD_NPY = "upload-npy"
UPLOAD_IMAGE = "upload-image"
INPUT_FILE_STATUS = "input-file-status"
PRE_RESIZE = "pre-resize"
PRE_CROP = "pre-crop"
PRE_CHANNEL_SWAP = "pre-channel-swap"
PRE_RAW_SCALE = "pre-raw-scale"
PRE_MEAN = "pre-mean"
APPLY_INPUTS = "btn-apply-inputs"

# ---------------------------------------------------------------- details
TABS = "side-tabs"
DETAILS = "details"
BLOB_VIEW = "blob-view"
BLOB_WHICH = "blob-which"
FMAP_ITEM = "fmap-item"
FMAP_PAGE = "fmap-page"
HISTOGRAM = "blob-histogram"
FEATURE_MAPS = "feature-maps"
VALUE_SLICE = "value-slice"
VALUE_TABLE = "value-table"
VALUE_PIN = "btn-value-pin"           # Pin, offered by the value table of a scrubbed blob whose arrays were not kept

# ---------------------------------------------------------------- findings
TRANSCRIPT_FILTER = "transcript-filter"
TRANSCRIPT = "transcript"
DEBUG_LINES = "debug-lines"
FILTERED_TABLE = "filtered-table"
SPLITS_TABLE = "splits-table"
SHARED_TABLE = "shared-table"
HEALTH_TABLE = "health-table"
MEMORY_CHART = "memory-chart"
TIME_CHART = "time-chart"

# ---------------------------------------------------------------- export
REPORT_FORMAT = "report-format"
REPORT_BUTTON = "btn-report"
DOWNLOAD = "download"

# ---------------------------------------------------------------- the debugger (issue 14)
# timeline
TIMELINE_SLIDER = "timeline-slider"       # dcc.Slider over the timeline's steps
TIMELINE_LIVE = "btn-timeline-live"       # back to the live net
TIMELINE_INFO = "timeline-info"           # what the viewed step did
TIMELINE_TABLE = "timeline-table"         # the steps, one row each
TIMELINE_MEMORY = "timeline-memory"       # records + pinned arrays vs the budget
TIMELINE_DIFF_A = "timeline-diff-a"
TIMELINE_DIFF_B = "timeline-diff-b"
TIMELINE_DIFF_BUTTON = "btn-timeline-diff"
TIMELINE_DIFF = "timeline-diff"           # which blobs changed between two steps
PIN_BLOB = "btn-pin-blob"                 # keep the selected blob's full arrays in the timeline
PIN_STATUS = "pin-status"
VIEW_STEP = "view-step"                   # dcc.Store: the timeline step shown (None: live)
# breakpoints
BREAK_TEXT = "break-text"
BREAK_ADD = "btn-break-add"
BREAK_TABLE = "break-table"
BREAK_SELECT = "break-select"             # the breakpoint to edit / enable / remove
BREAK_TOGGLE = "btn-break-toggle"
BREAK_REMOVE = "btn-break-remove"
BREAK_EDIT = "btn-break-edit"
BREAK_STATUS = "break-status"
BREAK_HIT = "break-hit"                   # where and why the last run stopped
# long actions (background callbacks) and training
JOB_ACTION = "job-action"                 # which long action: solver / forward_backward / ...
JOB_ITERATIONS = "job-iterations"
JOB_RUN = "btn-job-run"
JOB_CANCEL = "btn-job-cancel"
JOB_PROGRESS = "job-progress"             # html.Progress
JOB_STATUS = "job-status"
JOB_DONE = "job-done"                     # dcc.Store: bumped by the job's progress (triggers redraws)
TRAIN_CURVES = "train-curves"
TRAIN_RATIOS = "train-ratios"
TRAIN_SUMMARY = "train-summary"
# compare
COMPARE_KIND = "compare-kind"
COMPARE_A = "compare-a"
COMPARE_B = "compare-b"
COMPARE_UPLOAD = "upload-compare-log"
COMPARE_RTOL = "compare-rtol"
COMPARE_BUTTON = "btn-compare"
COMPARE_CLEAR = "btn-compare-clear"
COMPARE_SUMMARY = "compare-summary"
COMPARE_TABLE = "compare-table"
COMPARE_CHART = "compare-chart"
COMPARE_STEPS = "compare-steps"                  # the Step A / Step B boxes (two timeline steps only)
COMPARE_TORCH_BOX = "compare-torch-box"          # a PyTorch port: the factory's name
COMPARE_FACTORY = "compare-factory"
COMPARE_WEIGHTS_NOTICE = "compare-weights-notice"    # the weights differ: load the caffemodel or copy the port's
COMPARE_WEIGHTS_TEXT = "compare-weights-text"
COMPARE_LOAD_WEIGHTS = "upload-compare-weights"
COMPARE_COPY_WEIGHTS = "btn-compare-copy-weights"
# downloads
NPY_WHICH = "npy-which"
NPY_BUTTON = "btn-npy"
NPY_DOWNLOAD = "npy-download"
