/* Caffe Inspector: the page's first lines, inline in its <head> (inspector/app.py, index_page):
 * they run before any script is fetched.
 *
 * 1. One server session per browser tab.
 * The page keeps its session id in sessionStorage (the dcc.Store "session-id", inspector/ids.py
 * SESSION), so that a reload goes on with the same session.  A browser copies sessionStorage into
 * a duplicated tab (and into a tab opened by window.open), which would make two tabs drive one
 * session.  A tab that is being left marks sessionStorage ("inspector-leaving"); a page that
 * starts without the mark is a new tab, and drops the copied id before the page reads it.
 * This runs before Dash renders the page.
 *
 * It also tells the server which kind of tab asks for the page's layout (the cookie
 * "inspector-tab", read in inspector/callbacks/first_view.py): a new tab gets the default net's
 * first view drawn into the page; a tab that returns with a session of its own does not.
 *
 * 2. The page's layout and callback list, asked for at once.  Dash's renderer asks for them
 * only when it starts, after every script is fetched and compiled; a new tab's layout holds
 * the default net's first view, which the server then prepares while the scripts load.  The
 * renderer's own two requests get these responses (once each); any other goes to the network.
 */
(function () {
    var SESSION_KEY = 'session-id', LEAVING = 'inspector-leaving', COOKIE = 'inspector-tab';
    function tabKind(kind) {
        document.cookie = COOKIE + '=' + kind + '; path=/; SameSite=Strict';
    }
    tabKind('new');
    try {
        if (window.sessionStorage.getItem(LEAVING) !== '1') {
            window.sessionStorage.removeItem(SESSION_KEY);
            window.sessionStorage.removeItem(SESSION_KEY + '-timestamp');
        } else if (window.sessionStorage.getItem(SESSION_KEY) !== null) {
            tabKind('returning');
        }
        window.sessionStorage.removeItem(LEAVING);
        window.addEventListener('pagehide', function () {
            window.sessionStorage.setItem(LEAVING, '1');
        });
        window.addEventListener('pageshow', function (e) {
            if (e.persisted) { window.sessionStorage.removeItem(LEAVING); }   // back from the bfcache
        });
    } catch (e) { /* no sessionStorage: every load is a new session */ }
})();
(function () {
    var script = document.currentScript;
    var prefix = (script && script.getAttribute('data-prefix')) || '/';
    var early = {}, fetchNow = window.fetch;
    if (!fetchNow) { return; }
    ['_dash-layout', '_dash-dependencies'].forEach(function (path) {
        var url = prefix + path;
        early[url] = fetchNow.call(window, url, {
            method: 'GET', credentials: 'same-origin',
            headers: {Accept: 'application/json', 'Content-Type': 'application/json'}
        });
        early[url].catch(function () { /* the renderer's own request then asks again */ });
    });
    window.fetch = function (input, init) {
        var url = typeof input === 'string' ? input : null;
        var method = (init && init.method) || 'GET';
        if (url !== null && early[url] && method.toUpperCase() === 'GET') {
            var response = early[url];
            delete early[url];
            var again = fetchNow.bind(window, input, init);
            return response.then(function (r) { return r.ok ? r : again(); }, again);
        }
        return fetchNow.apply(window, arguments);
    };
})();
