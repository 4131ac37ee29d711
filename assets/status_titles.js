/* Caffe Inspector: the status line's two parts (the loaded net, the last run's message) are cut
 * with an ellipsis when both do not fit one line; each keeps its full text as its tooltip, and a
 * click (or Enter) on either shows the whole line, wrapped, until the next click. */
(function () {
    var IDS = ['load-status', 'run-message'];      // inspector/ids.py LOAD_STATUS, RUN_MESSAGE

    function cut(el) { return el.scrollWidth > el.clientWidth + 1; }

    function keepTitle(el) {
        var sync = function () {          // the text as it is; whether it is cut is asked only on hover
            el.title = el.textContent || '';
        };
        sync();
        new window.MutationObserver(sync).observe(el, {childList: true, subtree: true, characterData: true});
        el.addEventListener('mouseenter', function () {
            var open = el.parentNode && el.parentNode.classList.contains('open');
            el.title = (el.textContent || '') + (el.textContent && !open && cut(el) ? '\n(click to read it all)' : '');
        });
        el.setAttribute('tabindex', '0');
        el.setAttribute('role', 'button');
        el.setAttribute('aria-expanded', 'false');
        var toggle = function () {
            var row = el.parentNode;
            if (!row) { return; }
            var open = row.classList.toggle('open');
            IDS.forEach(function (id) {
                var e = document.getElementById(id);
                if (e) { e.setAttribute('aria-expanded', open ? 'true' : 'false'); }
            });
            sync();
        };
        el.addEventListener('click', function () {
            var sel = window.getSelection && window.getSelection();
            if (sel && String(sel).length) { return; }       // selecting text to copy: leave it
            toggle();
        });
        el.addEventListener('keydown', function (ev) {
            if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); toggle(); }
        });
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
