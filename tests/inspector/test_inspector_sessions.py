"""SessionStore: eviction, isolation, locks; the last good net kept."""
import os
import threading

from inspector_testlib import data_url

from inspector import ids
from inspector.callbacks import load as load_cb
from inspector.state.sessions import SessionStore, new_session_id, valid_session_id


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_ids():
    sid = new_session_id()
    assert valid_session_id(sid) and not valid_session_id("../etc") and not valid_session_id(None)


def test_unknown_or_bad_ids_get_a_session():
    store = SessionStore(4, 100)
    sid = new_session_id()
    s, created = store.get_or_create(sid)
    assert created and s.id == sid
    s2, created = store.get_or_create(sid)
    assert s2 is s and not created
    s3, created = store.get_or_create("not a session id")
    assert created and valid_session_id(s3.id) and s3.id != "not a session id"


def test_idle_eviction_closes_sessions():
    clock = Clock()
    store = SessionStore(8, idle_seconds=10, clock=clock)
    a, _ = store.get_or_create(new_session_id())
    folder = a.upload_dir
    assert os.path.isdir(folder)
    clock.t = 5
    b, _ = store.get_or_create(new_session_id())
    clock.t = 12
    assert store.evict_idle() == 1
    assert a.id not in store and b.id in store
    assert not os.path.exists(folder) and a.loaded is None


def test_bounded_count_evicts_least_recently_used():
    clock = Clock()
    store = SessionStore(max_sessions=2, idle_seconds=1e9, clock=clock)
    a, _ = store.get_or_create(new_session_id())
    clock.t = 1
    b, _ = store.get_or_create(new_session_id())
    clock.t = 2
    store.get(a.id)                      # a used more recently than b
    clock.t = 3
    c, _ = store.get_or_create(new_session_id())
    assert len(store) == 2 and a.id in store and c.id in store and b.id not in store
    assert store.evicted == 1


def test_sessions_are_isolated(app_ctx):
    s1, s2 = new_session_id(), new_session_id()
    load_cb.handle_load(app_ctx, s1, None)
    load_cb.handle_load(app_ctx, s2, None)
    a, b = app_ctx.store.get(s1), app_ctx.store.get(s2)
    assert a.loaded.net is not b.loaded.net and a.lock is not b.lock
    from inspector.state import runner
    with app_ctx.store.use(s1) as s:
        runner.forward_range(s, 0, 3)
    assert a.loaded.recorder.steps and not b.loaded.recorder.steps
    assert len(a.loaded.runlog.forward) == 4 and len(b.loaded.runlog.forward) == 1   # b: only its inputs


def test_failed_load_keeps_the_last_good_net(app_ctx, broken_net):
    sid = new_session_id()
    v, err, s, _ = load_cb.handle_load(app_ctx, sid, None)
    assert err is None and s.loaded.graph.name == "LeNetDigits" and v == 1
    good = s.loaded
    v, err, s, _ = load_cb.handle_load(app_ctx, sid, ids.UPLOAD_MODEL,
                                       upload=(data_url(broken_net.read_text()), "broken.prototxt"))
    assert v == 1 and s.loaded is good                       # still the good net
    assert err.where == "broken.prototxt:14:1" and err.kind == "ParseError"
    assert s.upload_dir not in err.message
    # and it still runs
    from inspector.state import runner
    with app_ctx.store.use(sid) as ss:
        assert "ForwardFromTo(0, 2)" in runner.forward_range(ss, 0, 2)


def test_session_lock_serialises_users():
    store = SessionStore(4, 100)
    sid = new_session_id()
    order = []

    def work(tag):
        with store.use(sid):
            order.append(tag + "-in")
            order.append(tag + "-out")

    ts = [threading.Thread(target=work, args=(str(i),)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for k in range(0, len(order), 2):
        assert order[k].split("-")[0] == order[k + 1].split("-")[0]


def test_a_long_run_lets_a_waiting_callback_in_at_its_next_step():
    """A run that takes the session's lock once per step (a solver run) lets a callback
    that waits for the session in between two steps, however often it asks again: the
    tab's other panels answer while it runs.  Counted in steps, not in seconds."""
    store = SessionStore(4, 100)
    sid = new_session_id()
    steps = []
    waiting_from = []
    got_in_after = []
    holding = threading.Event()

    def run():
        for k in range(200):
            if got_in_after:
                break
            with store.use(sid):
                holding.set()
                steps.append(k)
                t_end = threading.Event()
                t_end.wait(0.005)              # a step's work, under the lock
            store.let_in(sid, limit=60.0)

    def callback():
        holding.wait()
        waiting_from.append(len(steps))
        with store.use(sid):
            got_in_after.append(len(steps))

    r = threading.Thread(target=run)
    c = threading.Thread(target=callback)
    r.start()
    c.start()
    c.join(120)
    r.join(120)
    assert got_in_after, "the callback never got the session"
    # it asked during step waiting_from[0] (or the one after): it got in right after that step
    assert got_in_after[0] <= waiting_from[0] + 1, (waiting_from, got_in_after)
    assert store.get(sid).waiting == 0
