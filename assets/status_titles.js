/* Caffe Inspector: the status line's two parts (the loaded net, the last run's message) are cut
 * with an ellipsis when both do not fit one line; each keeps its full text as its tooltip. */
(function () {
    var IDS = ['load-status', 'run-message'];      // inspector/ids.py LOAD_STATUS, RUN_MESSAGE

    function keepTitle(el) {
        var sync = function () { el.title = el.innerText || ''; };
        sync();
        new window.MutationObserver(sync).observe(el, {childList: true, subtree: true, characterData: true});
    }

    var pending = IDS.slice();
    function look() {
        pending = pending.filter(function (id) {
            var el = document.getElementById(id);
            if (el) { keepTitle(el); }
            return !el;
        });
        return pending.length === 0;
    }

    function start() {
        if (look()) { return; }
        var watch = new window.MutationObserver(function () { if (look()) { watch.disconnect(); } });
        watch.observe(document.body, {childList: true, subtree: true});
    }

    if (document.readyState === 'loading') {
        document.addEventListener('DOMContentLoaded', start);
    } else {
        start();
    }
}());
