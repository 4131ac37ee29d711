/* Caffe Inspector: a file over the server's upload limit (--max-upload-mb), chosen or dropped on an
 * upload button of the load bar, is not sent (dcc.Upload's max_size drops it without a word): the
 * load error box says so, as the server says of an upload over the limit (inspector/state/
 * loading.py too_large_message; a request cut off by the server, Flask's 413, gets the same box:
 * inspector/app.py).  The limit is the load bar's data-max-bytes. */
(function () {
    var BOX = 'load-error';                     // inspector/ids.py LOAD_ERROR

    function limitOf(el) {
        var holder = el && el.closest ? el.closest('[data-max-bytes]') : null;
        return holder ? parseInt(holder.getAttribute('data-max-bytes'), 10) : NaN;
    }

    function say(file, max) {
        var mb = max / 1048576;
        var msg = 'upload of ' + file.size.toLocaleString('en-US') + ' bytes larger than the limit of ' + max +
            ' bytes (--max-upload-mb ' + (Math.round(mb * 1e6) / 1e6) + '): refused before it was sent (' +
            file.name + ')';
        var h = function (type, props) { return {type: type, namespace: 'dash_html_components', props: props}; };
        var box = h('Div', {id: 'load-error-box', className: 'load-error', children: [
            h('Div', {children: [h('B', {children: 'Could not load: '}),
                                 h('Span', {className: 'err-kind', children: 'PathRefused'})]}),
            h('Pre', {className: 'err-message', children: msg}),
            h('Div', {className: 'muted err-shown',
                      children: "Still shown: this tab's net, the last net that loaded; it stays usable."})]});
        if (window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props(BOX, {children: box});
        }
    }

    function check(target, files) {
        var max = limitOf(target);
        if (!files || isNaN(max) || max <= 0) { return; }
        for (var i = 0; i < files.length; i++) {
            if (files[i].size > max) { say(files[i], max); return; }
        }
    }

    document.addEventListener('change', function (e) {
        var t = e.target;
        if (t && t.type === 'file') { check(t, t.files); }
    }, true);
    document.addEventListener('drop', function (e) {
        if (e.dataTransfer) { check(e.target, e.dataTransfer.files); }
    }, true);
})();
