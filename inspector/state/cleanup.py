"""What the server leaves on disk, and in its memory, and how none of it stays.

The server writes two kinds of folders in the system's temporary folder: each session's
uploads (``inspector-<pid>-<session>-*``, inspector.state.sessions) and, without
``--cache-dir``, the long actions' cache (``caffe-inspector-jobs-<pid>-*``,
inspector.state.jobs).  Each is made by :func:`owned_tempdir`, which names the server's
process in the folder's name and writes an ``.owner`` file inside (its pid and start time).

- A session's folder goes with the session; at a normal exit, SIGTERM or SIGINT the server
  closes every session and removes the job cache (inspector.cli installs the handlers;
  create_app registers the exit).
- Whatever is stuck at the end (a thread in a read, a child process being joined by Python's
  exit), a server given SIGTERM, SIGINT or SIGHUP ends within inspector.cli's
  ``EXIT_GRACE_SECONDS``: it then removes its own folders (:func:`remove_own`) and exits.
- A server killed with SIGKILL removes nothing; the next server to start calls :func:`sweep`,
  which removes the folders of ours whose owner process is gone (no process of that pid, or
  another process that has reused it since: its start time differs).  Folders of a live
  process, another program's, or of ours without an ``.owner`` file are never touched.
"""
import ctypes
import ctypes.util
import logging
import os
import shutil
import tempfile

log = logging.getLogger("inspector")

OWNER_FILE = ".owner"
PREFIXES = ("inspector-", "caffe-inspector-jobs-")


def _start_time(pid):
    """When process ``pid`` started (psutil's create_time), or None when there is no such process."""
    import psutil
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:
        return -1.0                  # there, but not ours to look at: alive


def owned_tempdir(prefix, tag=""):
    """A new folder in the temporary folder, ``<prefix><pid>-<tag>*``, marked as this process's."""
    pid = os.getpid()
    path = tempfile.mkdtemp(prefix="%s%d-%s" % (prefix, pid, tag))
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        f.write("%d %r\n" % (pid, _start_time(pid)))
    return path


def _owner(path):
    """(pid, start time) from the folder's ``.owner`` file, or None: not marked, not known to be ours."""
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            pid_text, started_text = f.read().split()[:2]
        return int(pid_text), float(started_text)
    except (OSError, ValueError):
        return None


def owner_gone(path):
    """Whether the folder ``path`` is ours (it has an ``.owner`` file) and its owner has ended."""
    owner = _owner(path)
    if owner is None:
        return False
    now = _start_time(owner[0])
    return now is None or (now > 0 and abs(now - owner[1]) > 1.0)


def _remove_folders(folder, prefixes, which):
    """Remove the folders (not links) in ``folder`` (the temporary folder) whose names start
    with one of ``prefixes`` and for which ``which(path)`` holds.  Returns them."""
    folder = folder or tempfile.gettempdir()
    gone = []
    try:
        names = os.listdir(folder)
    except OSError:
        return gone
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(prefixes) and os.path.isdir(path) and not os.path.islink(path) and which(path):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def sweep(folder=None):
    """Remove the folders a killed server left in ``folder`` (the temporary folder): those of
    ours (:data:`PREFIXES`, an ``.owner`` file) whose owner process has ended.  Returns them."""
    gone = _remove_folders(folder, PREFIXES, owner_gone)
    if gone:
        log.warning("removed %d folders left by servers that ended without removing them: %s", len(gone),
                    ", ".join(gone))
    return gone


def remove_own(folder=None):
    """Remove this process's own folders (:data:`PREFIXES` with its pid, its ``.owner`` file
    naming it) from ``folder`` (the temporary folder): what :func:`sweep` would remove after it
    ended, removed by the process itself as it ends.  Returns them."""
    pid = os.getpid()
    return _remove_folders(folder, tuple("%s%d-" % (prefix, pid) for prefix in PREFIXES),
                           lambda path: (_owner(path) or (None,))[0] == pid)


# ---------------------------------------------------------------------- memory handed back
_M_MMAP_THRESHOLD = -3      # glibc's mallopt parameter
_MMAP_FROM = 256 << 10      # buffers from this size get their own mapping, unmapped when freed
_libc = []


def _glibc():
    if not _libc:
        try:
            name = ctypes.util.find_library("c")
            lib = ctypes.CDLL(name) if name else None
            _libc.append(lib if lib is not None and hasattr(lib, "malloc_trim") else None)
        except OSError:
            _libc.append(None)
    return _libc[0]


def keep_big_buffers_apart():
    """glibc maps each buffer of 128 KiB and more on its own and unmaps it when it is freed, but
    raises that threshold to the largest buffer freed so far (up to 32 MiB): after the first big
    upload, an upload's copies (its JSON, its base64, its bytes: three times the file) come from
    the heap and stay in the server's RSS once freed.  A fixed threshold keeps them apart, so each
    is given back at once.  Nothing on other C libraries."""
    lib = _glibc()
    if lib is not None and hasattr(lib, "mallopt"):
        lib.mallopt(_M_MMAP_THRESHOLD, _MMAP_FROM)


def give_memory_back():
    """Hand the heap's free pages back to the system (glibc's malloc_trim): after an upload, what
    its request allocated and freed leaves the server's RSS."""
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)
