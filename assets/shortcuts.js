/* Caffe Inspector: the debugger's keyboard shortcuts and their help overlay.
 * F8 / c: Continue · F10 / o: Step over · Ctrl+F10 / r: Run to cursor · s: Step ▶ · ?: this list.
 * A shortcut clicks the page's own button (a real click: the same callback, the same refusals);
 * letter keys only while no text box has the focus (a radio button or a checkbox is no text box). */
(function () {
    var BUTTONS = {continue: 'btn-continue', over: 'btn-step-over', cursor: 'btn-run-to-selected',
                   step: 'btn-step-forward', help: 'btn-shortcuts'};
    var OVERLAY = 'shortcuts-overlay';
    var TEXT = {text: 1, search: 1, number: 1, email: 1, password: 1, url: 1, tel: 1};

    function typing(t) {
        if (!t || !t.tagName) { return false; }
        var tag = t.tagName.toLowerCase();
        if (tag === 'textarea' || tag === 'select' || t.isContentEditable) { return true; }
        return tag === 'input' && !!TEXT[(t.getAttribute('type') || 'text').toLowerCase()];
    }

    function press(key) {
        var b = document.getElementById(BUTTONS[key]);
        if (b && !b.disabled) { b.click(); }
        return !!b;
    }

    function overlay(show) {
        var o = document.getElementById(OVERLAY);
        if (!o) { return; }
        var open = o.style.display !== 'none';
        if (show === undefined) { show = !open; }
        o.style.display = show ? 'flex' : 'none';
        if (show) { var c = o.querySelector('.shortcuts-close'); if (c) { c.focus(); } }
    }

    document.addEventListener('keydown', function (ev) {
        var t = ev.target, mod = ev.metaKey || ev.altKey;
        if (ev.key === 'Escape') { overlay(false); return; }
        if (mod) { return; }
        var key = null;
        if (ev.key === 'F8') { key = 'continue'; }
        else if (ev.key === 'F10') { key = ev.ctrlKey ? 'cursor' : 'over'; }
        else if (!ev.ctrlKey && !typing(t)) {
            if (ev.key === 'c') { key = 'continue'; }
            else if (ev.key === 'o') { key = 'over'; }
            else if (ev.key === 'r') { key = 'cursor'; }
            else if (ev.key === 's') { key = 'step'; }
            else if (ev.key === '?') { ev.preventDefault(); overlay(); return; }
        }
        if (key && press(key)) { ev.preventDefault(); ev.stopPropagation(); }
    }, true);

    document.addEventListener('click', function (ev) {
        var el = ev.target;
        if (!el || !el.closest) { return; }
        if (el.closest('#' + BUTTONS.help)) { overlay(); return; }
        var o = document.getElementById(OVERLAY);
        if (o && o.style.display !== 'none' && (el.closest('.shortcuts-close') || el === o)) { overlay(false); }
    }, true);
})();
