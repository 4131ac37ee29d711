"""engine.core.db: Caffe's LMDB and LevelDB wrappers (db_lmdb.cpp, db_leveldb.cpp):
opening modes, byte-ordered cursors, transactions (LMDB's map doubling), the
backend names, and LevelDB readers sharing one handle in a process."""
import os

import pytest

from engine.core import db
from engine.core.errors import DBError

BACKENDS = ["lmdb", pytest.param("leveldb", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("plyvel") is None, reason="plyvel (the leveldb extra) missing"))]


def _write(path, backend, items, per_commit=1000):
    store = db.open_db(str(path), backend, db.NEW)
    txn = store.transaction()
    for i, (k, v) in enumerate(items, 1):
        txn.put(k, v)
        if i % per_commit == 0:
            txn.commit()
            txn = store.transaction()
    txn.commit()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_in_key_order(tmp_path, backend, caplog):
    items = [("%08d_x" % i, b"v%d" % i) for i in (3, 1, 2, 10)]
    with caplog.at_level("INFO"):
        _write(tmp_path / "d", backend, items)
    assert "Opened %s %s" % (backend, tmp_path / "d") in caplog.text
    assert db.detect_backend(str(tmp_path / "d")) == backend
    assert db.read_records(str(tmp_path / "d")) == sorted((k.encode(), v) for k, v in items)
    store = db.open_db(str(tmp_path / "d"), backend, db.READ)
    cur = store.cursor()
    keys = []
    while cur.valid():
        keys.append(cur.key())
        cur.next()
    cur.seek_to_first()
    assert cur.valid() and cur.key() == keys[0] and len(keys) == 4
    cur.close()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_never_creates_and_new_never_overwrites(tmp_path, backend):
    with pytest.raises(DBError):
        db.open_db(str(tmp_path / "none"), backend, db.READ)
    assert not (tmp_path / "none").exists()
    _write(tmp_path / "d", backend, [("a", b"1")])
    with pytest.raises(DBError):
        db.open_db(str(tmp_path / "d"), backend, db.NEW)
    assert db.read_records(str(tmp_path / "d"), backend) == [(b"a", b"1")]


def test_lmdb_map_doubles_when_full(tmp_path, caplog):
    """The map starts at LMDB's 10 MiB; 24 MiB of records still commit in one transaction."""
    blob = os.urandom(1 << 20)
    _write(tmp_path / "big", "lmdb", [("%04d" % i, blob) for i in range(24)], per_commit=100)
    records = db.read_records(str(tmp_path / "big"), "lmdb")
    assert len(records) == 24 and all(v == blob for _, v in records)


def test_backend_names():
    assert db.backend_name(0) == "leveldb" and db.backend_name(1) == "lmdb"   # DataParameter.DB
    assert db.backend_name("LMDB") == "lmdb"
    with pytest.raises(DBError, match="Unknown database backend: hdf5"):
        db.backend_name("hdf5")


def test_leveldb_readers_share_one_handle(tmp_path):
    pytest.importorskip("plyvel")
    _write(tmp_path / "d", "leveldb", [("a", b"1"), ("b", b"2")])
    a = db.open_db(str(tmp_path / "d"), "leveldb", db.READ)
    b = db.open_db(str(tmp_path / "d"), "leveldb", db.READ)
    assert a.db is b.db
    ca, cb = a.cursor(), b.cursor()
    ca.next()
    assert (ca.key(), cb.key()) == (b"b", b"a")          # cursors of their own
    ca.close()
    a.close()
    assert cb.value() == b"1" and b.db is not None and not b.db.closed
    cb.close()
    b.close()
    # the last reader closed it: a writer may open it again
    store = db.open_db(str(tmp_path / "d"), "leveldb", db.WRITE)
    store.close()


@pytest.mark.parametrize("kept,other", [("lmdb", "leveldb"), ("leveldb", "lmdb")])
def test_a_store_open_as_one_backend_is_not_read_as_the_other(tmp_path, kept, other):
    """Found by benchmarks/fuzz_caffe.py (seed 20261207): with an LMDB open for reading in
    the process, a Data layer naming the same folder with backend LEVELDB got the LMDB's
    shared handle and read it, where Caffe's LevelDB refuses the folder."""
    pytest.importorskip("plyvel")
    _write(tmp_path / "d", kept, [("a", b"1")])
    store = db.open_db(str(tmp_path / "d"), kept, db.READ)
    try:
        with pytest.raises(DBError, match="Failed to open %s" % other if other == "leveldb" else "LMDB"):
            db.open_db(str(tmp_path / "d"), other, db.READ)
        assert db.open_db(str(tmp_path / "d"), kept, db.READ).cursor().value() == b"1"
    finally:
        store.close()
