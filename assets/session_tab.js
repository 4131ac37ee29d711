/* Caffe Inspector: one server session per browser tab.
 *
 * The page keeps its session id in sessionStorage (the dcc.Store "session-id", inspector/ids.py
 * SESSION), so that a reload goes on with the same session.  A browser copies sessionStorage into
 * a duplicated tab (and into a tab opened by window.open), which would make two tabs drive one
 * session.  A tab that is being left marks sessionStorage ("inspector-leaving"); a page that
 * starts without the mark is a new tab, and drops the copied id before the page reads it.
 * This runs before Dash renders the page (assets load before the renderer starts).
 *
 * It also tells the server which kind of tab asks for the page's layout (the cookie
 * "inspector-tab", read in inspector/callbacks/first_view.py): a new tab gets the default net's
 * first view drawn into the page; a tab that returns with a session of its own does not.
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
