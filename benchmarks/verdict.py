"""Does a net build and run?  One process per side, asked by benchmarks/fuzz_caffe.py.

Runs under either interpreter: ``--side caffe`` under the Python that has real Caffe's pycaffe
(Debian's ``/usr/bin/python3`` with ``PYTHONPATH=/work/caffe/python``), ``--side engine`` under
the project's.  It imports its side once, then reads one request a line on stdin (JSON:
``path``, ``phase``, ``level``, ``stages``, ``timeout``) and forks a child per request, which
builds ``Net(path, phase, level, stages)``, runs ``forward()`` on the inputs as Init left them
(zeros, as Caffe's memory starts) and ``backward()`` (the layers that need it, as Caffe's Backward).  A CHECK failure
ends Caffe's child with SIGABRT: its glog lines say why.  The answer, one line of JSON on
stdout: ``status`` (``accept``; ``reject``: Caffe's fatal CHECK or a raised error; ``crash``:
another signal, e.g. a segmentation fault; ``hang``: past ``timeout``, killed), ``message``
(the reason's last lines) and ``error`` (the exception's type, for the engine).

Both sides fork from a process with no other threads (OPENBLAS_NUM_THREADS=1 is set for it),
so a child inherits no lock held elsewhere.
"""
import json
import os
import signal
import sys
import tempfile
import time


def _load(side):
    if side == "caffe":
        os.environ.setdefault("GLOG_minloglevel", "0")
        import caffe
        caffe.set_mode_cpu()
        return caffe
    import logging
    logging.disable(logging.CRITICAL)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import engine
    engine.layer_type_list()
    return engine


def _child(mod, side, req, err_path):
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)                       # glog and tracebacks go to the request's file
    os.close(fd)
    try:
        stages = list(req.get("stages") or [])
        phase = mod.TRAIN if req["phase"] == 0 else mod.TEST
        if side == "caffe":
            net = mod.Net(req["path"], phase, level=int(req.get("level", 0)), stages=stages)
        else:
            net = mod.Net(req["path"], phase, level=int(req.get("level", 0)), stages=stages, allow_python=False)
        net.forward()
        net.backward()              # BackwardFromTo(last, 0): the layers that need it, as Caffe runs them
    except BaseException as e:  # noqa: BLE001 - every failure is the answer
        with open(err_path, "a") as f:
            f.write("\n%s: %s\n" % (type(e).__module__ + "." + type(e).__name__, e))
        with open(err_path + ".type", "w") as f:
            f.write(type(e).__module__ + "." + type(e).__name__)
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _tail(path, lines=6, chars=600):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    keep = [l for l in text.splitlines() if l.strip()]
    fatal = [l for l in keep if (l.startswith("F") and "] " in l) or "Check failed" in l
             or l.startswith(("engine.", "caffe.")) or "Error" in l.split(":")[0]]
    out = "\n".join((fatal or keep)[-lines:])
    return out[-chars:]


def serve(side):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    mod = _load(side)
    folder = tempfile.mkdtemp(prefix="verdict-%s-" % side)
    import atexit
    import shutil
    atexit.register(shutil.rmtree, folder, True)        # the children's stderr files go with us
    print(json.dumps({"ready": side, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        err_path = os.path.join(folder, "stderr.txt")
        if os.path.exists(err_path + ".type"):
            os.remove(err_path + ".type")
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(mod, side, req, err_path)
        deadline = t0 + float(req.get("timeout", 60))
        status = None
        while status is None:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "hang"
            else:
                time.sleep(0.01)
        message = _tail(err_path)
        if status == "hang":
            answer = {"status": "hang", "message": "ran past %s s" % req.get("timeout", 60)}
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            answer = {"status": "accept"}
        elif os.WIFEXITED(status):
            try:
                with open(err_path + ".type") as f:
                    error = f.read().strip()
            except OSError:
                error = ""
            answer = {"status": "reject", "message": message, "error": error}
        else:
            sig = os.WTERMSIG(status)
            answer = {"status": "reject" if sig == signal.SIGABRT else "crash", "signal": sig, "message": message}
        answer["seconds"] = round(time.monotonic() - t0, 3)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve(sys.argv[sys.argv.index("--side") + 1] if "--side" in sys.argv else "engine")
