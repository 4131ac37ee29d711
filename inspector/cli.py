"""The inspector's command line: ``caffe-inspector [MODEL] [--weights W] ...``
(also ``python app.py ...`` from a checkout).

Binds 127.0.0.1 by default (the page runs nets and reads files under
``--model-root``: expose it on a network only on purpose).
"""
import argparse
import logging
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Caffe Inspector: see the net Caffe builds, step through it.")
    p.add_argument("model", nargs="?", help="net prototxt (default: the bundled LeNet example)")
    p.add_argument("--weights", help="caffemodel (or .h5) to load into the net")
    p.add_argument("--solver", help="solver prototxt (enables solver iterations)")
    p.add_argument("--phase", choices=["TRAIN", "TEST"], default=None,
                   help="NetState phase (default: TEST for a deploy net - Input layers and no loss -, else TRAIN)")
    p.add_argument("--stage", action="append", default=[], help="NetState stage (repeatable)")
    p.add_argument("--level", type=int, default=0, help="NetState level")
    p.add_argument("--gpu", action="store_true", help="start sessions on the GPU (CuPy)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050)
    p.add_argument("--model-root", default=None,
                   help="folder the page may open models from by path (default: the working directory)")
    p.add_argument("--allow-python-layers", action="store_true",
                   help="run Python layers (they execute the model author's code) and PyTorch .py files "
                        "uploaded to the Compare tab (the uploader's code)")
    p.add_argument("--max-upload-mb", type=int, default=256, help="size limit of one uploaded file")
    p.add_argument("--max-sessions", type=int, default=8,
                   help="browser tabs kept at once (each holds its own net; least recently used goes first)")
    p.add_argument("--idle-minutes", type=float, default=60, help="drop a tab's session after this idle time")
    p.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, dev tools)")
    p.add_argument("--serve", choices=["dev", "waitress"], default="dev",
                   help="dev: Flask's development server (the quick local default); waitress: a production "
                        "WSGI server for a team (docs/serving.md)")
    p.add_argument("--threads", type=int, default=8, help="worker threads of the waitress server")
    p.add_argument("--no-prebuild", action="store_true",
                   help="build no net ahead: neither the default net for the next browser tab nor a net in "
                        "its other phase (saves their memory; a new tab and a phase switch then wait for Init)")
    p.add_argument("--cache-dir", default=None,
                   help="folder of the background-callback cache (long actions' progress and results; "
                        "default: a temporary folder removed at exit)")
    p.add_argument("--timeline-budget-mb", type=int, default=256,
                   help="memory each tab's timeline may keep (records of past steps, pinned arrays; default 256)")
    p.add_argument("--max-net-mb", type=int, default=None,
                   help="memory one net may need (its blobs' data and diff, params and buffers, as counted at "
                        "Init before anything is allocated); a bigger net is refused with a message and the "
                        "server goes on (default: half of this machine's memory; 0: no limit)")
    p.add_argument("--spare-mb", type=int, default=None,
                   help="memory the tabs' spare nets may need all together: a net opened from a path, an "
                        "upload or an address is built ahead in its other phase (one per tab) when it fits, "
                        "so that a phase switch takes it at once (default: 2 GiB or a quarter of this "
                        "machine's memory, the lesser; 0: none)")
    p.add_argument("--max-layers", type=int, default=None,
                   help="layers a net may have (default 50000; 0: no limit): refused as its text is read")
    p.add_argument("--max-tops", type=int, default=None,
                   help="tops a net's layers may have (default 100000; 0: no limit)")
    p.add_argument("--max-text-mb", type=int, default=None,
                   help="size of a net's prototxt in MB (default 16; 0: no limit)")
    p.add_argument("--max-layer-fields", type=int, default=None,
                   help="fields written in one layer: rules, params, ... (default 10000; 0: no limit)")
    p.add_argument("--load-seconds", type=float, default=30,
                   help="a net opened from the page (upload, path, address) is first built in a child process "
                        "with this much CPU time and the memory of --max-net-mb, and refused past them; the "
                        "server and the other tabs go on (default 30; 0: no such check)")
    p.add_argument("--load-workers", type=int, default=2, help="such checks at once (default 2)")
    p.add_argument("--run-seconds", type=float, default=120,
                   help="a run asked from the page (Forward, Backward, Step, Continue, a solver step) stops "
                        "after the first layer (a solver step's test pass: the test iteration) that ends past this "
                        "many seconds, as at a breakpoint: the "
                        "request is answered and Continue goes on (default 120; 0: no limit)")
    p.add_argument("--max-layer-gflop", type=float, default=2000,
                   help="a run from the page is refused before it starts when one of its layers needs more "
                        "than this many GFLOP for one forward pass of its batch (a layer cannot be stopped "
                        "halfway; default 2000; 0: no limit)")
    args = p.parse_args(argv)
    for name in ("spare_mb", "max_net_mb", "max_layers", "max_tops", "max_text_mb", "max_layer_fields",
                 "load_seconds", "run_seconds", "max_layer_gflop"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            p.error("--%s must be 0 (%s) or more" % (name.replace("_", "-"), "no spares" if name == "spare_mb"
                                                      else "no check" if name == "load_seconds" else "no limit"))
    if args.load_workers < 1:
        p.error("--load-workers must be 1 or more")
    return args


def config_from_args(args):
    import os

    from inspector.config import InspectorConfig, default_max_net_bytes, default_spare_bytes
    from inspector.state.netstate import default_phase
    max_net_mb = getattr(args, "max_net_mb", None)
    max_net = default_max_net_bytes() if max_net_mb is None else (int(max_net_mb) << 20 or None)
    spare_mb = getattr(args, "spare_mb", None)
    spare = default_spare_bytes() if spare_mb is None else int(spare_mb) << 20
    import engine
    limits = engine.NetLimits().with_flags(text_mb=getattr(args, "max_text_mb", None),
                                           layers=getattr(args, "max_layers", None),
                                           tops=getattr(args, "max_tops", None),
                                           fields=getattr(args, "max_layer_fields", None))
    return InspectorConfig(
        net_limits=limits, load_seconds=getattr(args, "load_seconds", 30.0),
        load_workers=getattr(args, "load_workers", 2),
        run_seconds=getattr(args, "run_seconds", 120.0), max_layer_gflop=getattr(args, "max_layer_gflop", 2000.0),
        model=args.model, weights=args.weights, solver=args.solver,
        phase=args.phase or (default_phase(args.model) if args.model else None),
        stages=tuple(args.stage), level=args.level, gpu=args.gpu, host=args.host, port=args.port,
        model_root=os.path.abspath(args.model_root or os.getcwd()),
        allow_python_layers=args.allow_python_layers, max_upload_bytes=args.max_upload_mb * 2 ** 20,
        max_sessions=args.max_sessions, idle_seconds=args.idle_minutes * 60.0,
        cache_dir=getattr(args, "cache_dir", None), prebuild=not getattr(args, "no_prebuild", False),
        timeline_budget_mb=args.timeline_budget_mb, max_net_bytes=max_net, spare_bytes=spare)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config = config_from_args(args)
    from inspector import create_app
    settle_startup()
    app = create_app(config)
    stop_on_signals()
    print("Caffe Inspector on http://%s:%d/" % (config.host, config.port), file=sys.stderr)
    try:
        if args.serve == "waitress":
            serve_waitress(app, config.host, config.port, args.threads)
        else:
            app.run(host=config.host, port=config.port, debug=args.debug)
    except KeyboardInterrupt:
        pass
    finally:
        app.shutdown()         # sessions (their uploads), load checks, spare nets, the job cache


#: seconds a server has, after SIGTERM, SIGINT or SIGHUP, to end by itself (its sessions closed,
#: its job cache and uploads removed, Python's exit run); past them, whatever is stuck (a
#: thread in a read, a child process joined by Python's exit), it removes its own folders and ends
EXIT_GRACE_SECONDS = 30.0


def stop_on_signals(grace=EXIT_GRACE_SECONDS):
    """SIGTERM, SIGINT (Ctrl+C) and SIGHUP end the server: the servers stop serving and the
    server's files go (app.shutdown), and the process ends within ``grace`` seconds even when
    something in it hangs (:func:`_end_within`); a kill -9 leaves its files to the next start's
    sweep."""
    import signal

    def stop(signum, _frame):
        _end_within(grace, 128 + signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)


_deadline = []


def _end_within(seconds, code):
    """From the first stop signal on: a daemon thread that, ``seconds`` later, removes the
    server's own folders (inspector.state.cleanup.remove_own) and ends the process with ``code``
    (a process that ended by itself before then never gets there)."""
    import os
    import threading
    import time

    if _deadline:
        return

    def end():
        time.sleep(seconds)
        from inspector.state import cleanup
        try:
            cleanup.remove_own()
        finally:
            sys.stderr.write("the server had not ended %g s after the signal; its folders were removed and it "
                             "ends now\n" % seconds)
            sys.stderr.flush()
            os._exit(code)
    t = threading.Thread(target=end, name="inspector-exit-deadline", daemon=True)
    _deadline.append(t)
    t.start()


def settle_startup():
    """Import what the server runs (Dash, Plotly, the engine's layers, every callback) and
    move those long-lived objects out of the garbage collector's sight (``gc.freeze``):
    a full collection then walks only what was made since, the nets and the page's
    objects.  Each net built (ResNet-152: some 20,000 objects) sets off one, which walked
    the 120,000 objects of the imports too: 0.15 s of every phase switch, more under load.
    Called before the app starts building nets: no net is ever frozen (its memory could
    not be freed)."""
    import gc

    import engine
    import inspector.app  # noqa: F401
    engine.layer_type_list()
    gc.collect()
    gc.freeze()


def serve_waitress(app, host, port, threads=8, **kw):
    """Serve ``app`` (a Dash app) with waitress: ``threads`` worker threads, one
    process (sessions and nets live in its memory; long actions run in threads
    of it, their progress in the on-disk cache)."""
    try:
        from waitress import serve
    except ImportError:  # pragma: no cover - waitress is in requirements.txt
        raise SystemExit("--serve waitress needs waitress: pip install waitress") from None
    serve(app.server, host=host, port=port, threads=int(threads), ident="caffe-inspector", **kw)


def serve_main(argv=None):
    """``inspector-serve``: the inspector under waitress (``--serve waitress``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--serve" not in argv:
        argv = ["--serve", "waitress"] + argv
    return main(argv)
