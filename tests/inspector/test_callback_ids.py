"""Every callback's components and properties are on the page: the check Dash's renderer made
on every page open while suppress_callback_exceptions was off (against a second copy of the
whole page written into each page), made here once, against the page a new tab gets and the
page a returning tab gets."""
import json

import pytest
from inspector_testlib import LENET

from inspector import create_app
from inspector.config import InspectorConfig


@pytest.fixture(scope="module")
def app():
    return create_app(InspectorConfig(model=LENET, prebuild=False))


def _components(tree):
    """id -> the component, for every component of a layout with a string id; the dict ids."""
    found, patterns = {}, []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
            continue
        if not hasattr(node, "_prop_names"):
            continue
        cid = getattr(node, "id", None)
        if isinstance(cid, str):
            assert cid not in found, "two components with the id %r" % cid
            found[cid] = node
        elif isinstance(cid, dict):
            patterns.append(cid)
        for name in node._prop_names:
            value = getattr(node, name, None)
            if isinstance(value, (list, tuple)) or hasattr(value, "_prop_names"):
                stack.append(value)
    return found, patterns


def _parts(output):
    """'..a.x...b.y..' or 'a.x' (an @hash marks allow_duplicate) -> [('a', 'x'), ('b', 'y')]."""
    items = output[2:-2].split("...") if output.startswith("..") else [output]
    out = []
    for item in items:
        cid, prop = item.rsplit(".", 1)
        out.append((cid, prop.split("@", 1)[0]))
    return out


def _uses(dependencies):
    for cb in dependencies:
        for cid, prop in _parts(cb["output"]):
            yield "output", cid, prop
        for role in ("inputs", "state"):
            for dep in cb[role]:
                yield role, dep["id"], dep["property"]


def _has_prop(component, prop):
    return prop in component._prop_names or any(prop.startswith(w) for w in component._valid_wildcard_attributes)


@pytest.mark.parametrize("returning", [False, True], ids=["new tab", "returning tab"])
def test_every_callback_names_a_component_and_a_property_of_the_page(app, returning):
    client = app.server.test_client()
    dependencies = client.get("/_dash-dependencies").get_json()
    assert len(dependencies) > 20
    headers = {"Cookie": "inspector-tab=returning"} if returning else {}
    with app.server.test_request_context("/_dash-layout", headers=headers):
        components, patterns = _components(app.layout())
    missing, unknown, checked = [], [], 0
    for role, cid, prop in _uses(dependencies):
        if cid.startswith("{"):            # a pattern: components of its keys (made by callbacks)
            keys = set(json.loads(cid))
            assert keys, cid
            continue
        checked += 1
        component = components.get(cid)
        if component is None:
            missing.append("%s %s.%s" % (role, cid, prop))
        elif not _has_prop(component, prop):
            unknown.append("%s %s.%s (a %s)" % (role, cid, prop, type(component).__name__))
    assert checked > 150
    assert not missing, "callbacks name components the page does not have: %s" % missing
    assert not unknown, "callbacks name properties their components do not have: %s" % unknown


def test_the_check_finds_a_missing_component_and_a_wrong_property(app):
    """The check above can fail: a callback on an id the page lacks, a property a Div lacks."""
    with app.server.test_request_context("/_dash-layout"):
        components, _ = _components(app.layout())
    deps = [{"output": "..no-such-id.children...%s.no_such_prop.." % next(iter(components)),
             "inputs": [], "state": []}]
    uses = list(_uses(deps))
    assert [u for u in uses if u[1] not in components] == [("output", "no-such-id", "children")]
    first = next(iter(components))
    assert not _has_prop(components[first], "no_such_prop") and _has_prop(components[first], "id")


def test_the_page_carries_no_second_copy_of_itself(app):
    page = app.server.test_client().get("/").get_data(as_text=True)
    config = page[page.index('<script id="_dash-config"'):]
    config = json.loads(config[config.index(">") + 1:config.index("</script>")])
    assert "validation_layout" not in config and config["suppress_callback_exceptions"] is True
