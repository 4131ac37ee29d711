"""Caffe's key-value stores (src/caffe/util/db*.cpp): LMDB and LevelDB.

    db = open_db(path, "lmdb" | "leveldb", READ | NEW | WRITE)
    cursor = db.cursor()          # key(), value(), valid(), next(), seek_to_first()
    txn = db.transaction()        # put(key, value), commit()
    db.close()

Both open as Caffe opens them: a NEW LMDB is a directory made first (an error
when it exists), its map doubled whenever a commit overflows it; a NEW LevelDB
must not exist yet (``error_if_exists``), with Caffe's block size (64 KiB) and
write buffer (256 MiB); READ opens read-only and never creates.  Each open logs
Caffe's "Opened lmdb PATH" / "Opened leveldb PATH".  Keys iterate in byte order
in both, as Caffe's cursors do.

LMDB comes with the project (``lmdb``); LevelDB needs ``plyvel``, the
``leveldb`` extra: without it, opening a LevelDB raises :class:`MissingLevelDB`
naming the extra.
"""
import os
import threading

from engine.core.errors import DBError
from engine.core.log import check_failed as _check_failed
from engine.core.log import io_log

READ, WRITE, NEW = "read", "write", "new"
BACKENDS = ("lmdb", "leveldb")
LEVELDB_HINT = "pip install 'caffe-inspector[leveldb]' (or: pip install plyvel)"


class MissingLevelDB(DBError):
    """plyvel (the ``leveldb`` extra) is not installed."""


def backend_name(backend):
    """'lmdb' / 'leveldb' from a name or a DataParameter.DB value (LEVELDB = 0, LMDB = 1)."""
    if isinstance(backend, int):
        return "leveldb" if backend == 0 else "lmdb"
    name = str(backend).lower()
    if name not in BACKENDS:
        raise DBError("Unknown database backend: %s (known: lmdb, leveldb)" % backend)
    return name


def detect_backend(path):
    """'lmdb' or 'leveldb' when ``path`` holds one of them on disk, else None."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "data.mdb")):
            return "lmdb"
        if os.path.exists(os.path.join(path, "CURRENT")):
            return "leveldb"
        return None
    if os.path.isfile(path):
        with open(path, "rb") as f:
            head = f.read(32)
        # An LMDB made without a subdirectory: its meta page carries 0xBEEFC0DE.
        if b"\xde\xc0\xef\xbe" in head:
            return "lmdb"
    return None


def open_db(path, backend="lmdb", mode=READ, log=True):
    """Caffe's db::GetDB(backend)->Open(path, mode); ``log=False``: without its "Opened"
    line (a program of Caffe's that opens the store itself, not through db::DB)."""
    name = backend_name(backend)
    db = LMDB() if name == "lmdb" else LevelDB()
    db.open(str(path), mode, log)
    return db


# One read-only handle per database in a process, counted, each reader with its own
# cursors: LevelDB locks its directory for the whole process (a second open fails even
# for reading) and py-lmdb refuses a second Environment on a path already open, where
# Caffe's LMDB opens it again.  So two nets on one source (the train and test nets,
# two solvers, the inspector's tabs) both read it.
_readers = {}
_readers_lock = threading.Lock()


def _acquire_reader(path, opener, backend):
    """The shared read handle of ``path`` as a ``backend`` store (opened by ``opener()`` the
    first time) and its key.  The backend is part of the key: a folder open as an LMDB is not
    a LevelDB (Caffe opens it with the backend the net names, and LevelDB refuses it)."""
    key = (backend, os.path.realpath(path))
    with _readers_lock:
        entry = _readers.get(key)
        if entry is None:
            entry = _readers[key] = [opener(), 0]
        entry[1] += 1
    return entry[0], key


def _release_reader(key):
    """Drop one reader of ``key``; the last one closes the handle."""
    with _readers_lock:
        entry = _readers[key]
        entry[1] -= 1
        if entry[1] == 0:
            del _readers[key]
            entry[0].close()


# =========================================================================== LMDB
_envid_lock = threading.Lock()


def _open_lmdb_reader(lmdb, path):
    """A read-only, lock-free Environment on ``path``.  py-lmdb (3.x) refuses an
    Environment on files this process already has open (its ``lmdb._envid`` keys), to
    keep LMDB's fcntl locks apart; the engine's readers take no locks, so they open
    without a key: beside a script's own ``lmdb.open`` of the same database, before or
    after it, as Caffe's C++ LMDB opens beside py-lmdb."""
    kwargs = dict(readonly=True, lock=False, readahead=False, subdir=os.path.isdir(path), max_readers=126)
    try:
        import importlib
        envid = importlib.import_module("lmdb._envid")
    except ImportError:            # an older py-lmdb: no file-identity guard to step past
        return lmdb.open(path, **kwargs)
    with _envid_lock:
        keys = envid.env_keys
        envid.env_keys = lambda path, subdir: ()
        try:
            return lmdb.open(path, **kwargs)
        finally:
            envid.env_keys = keys


class LMDB:
    """db::LMDB: an environment in a directory (``data.mdb``, ``lock.mdb``)."""
    backend = "lmdb"

    def __init__(self):
        self.env, self.path, self._shared = None, None, None

    def open(self, path, mode, log=True):
        import lmdb
        self.path = path
        if mode == NEW:
            try:
                os.mkdir(path, 0o744)
            except OSError as e:
                raise DBError(_check_failed("mkdir(source.c_str(), 0744) == 0", -1, 0,
                                            "mkdir %s failed (%s)" % (path, e.strerror or e))) from None
        elif mode == READ and not os.path.exists(path):
            raise DBError("cannot open LMDB at %s: No such file or directory" % path)
        try:
            if mode == READ:
                self.env, self._shared = _acquire_reader(path, lambda: _open_lmdb_reader(lmdb, path), "lmdb")
            else:
                self.env = lmdb.open(path, map_size=10 << 20, subdir=True)
        except lmdb.Error as e:
            raise DBError("cannot open LMDB at %s: %s" % (path, e)) from None
        if log:
            io_log.info("Opened lmdb %s", path)

    def cursor(self):
        return _LMDBCursor(self.env)

    def transaction(self):
        return _LMDBTransaction(self.env)

    def close(self):
        if self.env is not None:
            if self._shared is None:
                self.env.close()
            else:
                _release_reader(self._shared)
            self.env = None


class _LMDBCursor:
    def __init__(self, env):
        self.txn = env.begin(buffers=False)
        self.cur = self.txn.cursor()
        self._valid = self.cur.first()

    def seek_to_first(self):
        self._valid = self.cur.first()

    def next(self):
        self._valid = self.cur.next()

    def valid(self):
        return self._valid

    def key(self):
        return self.cur.key()

    def value(self):
        return self.cur.value()

    def close(self):
        try:
            self.txn.abort()
        except Exception:  # pragma: no cover - the environment went first
            pass


class _LMDBTransaction:
    """db::LMDBTransaction: puts are kept until commit; a full map doubles and retries."""

    def __init__(self, env):
        self.env = env
        self.items = []

    def put(self, key, value):
        self.items.append((_bytes(key), _bytes(value)))

    def commit(self):
        import lmdb
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for k, v in self.items:
                        txn.put(k, v)
                break
            except lmdb.MapFullError:
                size = self.env.info()["map_size"] * 2
                io_log.debug("Doubling LMDB map size to %dMB ...", size >> 20)
                self.env.set_mapsize(size)
        self.items = []


# =========================================================================== LevelDB
def _plyvel():
    try:
        import plyvel
    except ImportError as e:
        raise MissingLevelDB("LevelDB needs plyvel (%s): %s" % (e, LEVELDB_HINT)) from None
    return plyvel


class LevelDB:
    """db::LevelDB: a directory of LevelDB tables."""
    backend = "leveldb"

    def __init__(self):
        self.db, self.path, self._shared = None, None, None

    def open(self, path, mode, log=True):
        plyvel = _plyvel()
        self.path = path
        if mode == READ:
            self.db, self._shared = _acquire_reader(path, lambda: self._open(plyvel, path, mode), "leveldb")
        else:
            self.db = self._open(plyvel, path, mode)
        if log:
            io_log.info("Opened leveldb %s", path)

    @staticmethod
    def _open(plyvel, path, mode):
        if mode == READ and not os.path.isfile(os.path.join(path, "CURRENT")):
            # leveldb's own answer, given before it would make the directory and its LOG
            raise DBError(_check_failed("status.ok()", message="Failed to open leveldb %s: Invalid argument: "
                                        "%s: does not exist (create_if_missing is false)" % (path, path)))
        try:
            return plyvel.DB(path, create_if_missing=mode != READ, error_if_exists=mode == NEW,
                             block_size=65536, write_buffer_size=268435456, max_open_files=100)
        except (plyvel.Error, OSError) as e:
            raise DBError(_check_failed("status.ok()", message="Failed to open leveldb %s: %s"
                                        % (path, _status_text(e)))) from None

    def cursor(self):
        return _LevelDBCursor(self.db)

    def transaction(self):
        return _LevelDBTransaction(self.db)

    def close(self):
        if self.db is None:
            return
        if self._shared is None:
            self.db.close()
        else:
            _release_reader(self._shared)
        self.db = None


def _status_text(error):
    """leveldb's Status::ToString, which plyvel hands over as bytes."""
    arg = error.args[0] if error.args else error
    text = arg.decode("utf-8", errors="replace") if isinstance(arg, bytes) else str(arg)
    return text.strip()


class _LevelDBCursor:
    def __init__(self, db):
        self.db = db
        self.seek_to_first()

    def seek_to_first(self):
        self.it = self.db.iterator()
        self._advance()

    def _advance(self):
        try:
            self.item = next(self.it)
        except StopIteration:
            self.item = None

    def next(self):
        self._advance()

    def valid(self):
        return self.item is not None

    def key(self):
        return self.item[0]

    def value(self):
        return self.item[1]

    def close(self):
        self.it.close()


class _LevelDBTransaction:
    """db::LevelDBTransaction: a WriteBatch written on commit."""

    def __init__(self, db):
        self.db = db
        self.batch = db.write_batch()

    def put(self, key, value):
        self.batch.put(_bytes(key), _bytes(value))

    def commit(self):
        self.batch.write()
        self.batch = self.db.write_batch()


def _bytes(x):
    return x.encode() if isinstance(x, str) else bytes(x)


def read_records(path, backend=None):
    """Every (key, value) of the database at ``path`` (backend detected when None), in order."""
    name = backend_name(backend) if backend is not None else (detect_backend(path) or "lmdb")
    db = open_db(path, name, READ)
    try:
        cur = db.cursor()
        out = []
        while cur.valid():
            out.append((cur.key(), cur.value()))
            cur.next()
        cur.close()
        return out
    finally:
        db.close()
