/* The network graph in the browser (dash-cytoscape's cy instance, reached as
 * the container's _cyreg.cy): the selection marked without a redraw, the first
 * view of a net, centring on a search result, fit-to-net / fit-to-selection,
 * the overview (minimap) with the visible window, small hover boxes, a
 * double-click that folds or opens a block, and the keyboard: "/" focuses the
 * search box, arrows move among the matches, Enter picks one. */
(function () {
    'use strict';
    var IDS = {graph: 'net-graph', holder: 'net-graph-holder', minimap: 'graph-minimap', hover: 'graph-hover',
               mapToggle: 'graph-minimap-toggle',
               search: 'graph-search', results: 'graph-search-results', pick: 'graph-search-pick',
               toggle: 'block-toggle', panels: 'panels-net'};
    var S = {panelsWant: 0, panelsGiven: 0, panelsTimer: null,
             cy: null, net: null, viewed: false, focusN: null, selection: null, focus: null, pickN: 0, toggleN: 0,
             mapImage: null, mapBox: null, mapDirty: true, mapQueued: false, reframeQueued: false, far: null,
             labelsQueued: false, lodTimer: null, lodQueued: false, placeQueued: false, places: null, placesKey: null};

    function cyOf() {
        var el = document.getElementById(IDS.graph);
        if (!el) { return null; }
        if (el._cyreg && el._cyreg.cy) { return el._cyreg.cy; }
        var divs = el.getElementsByTagName('div');
        for (var i = 0; i < divs.length; i++) {
            if (divs[i]._cyreg && divs[i]._cyreg.cy) { return divs[i]._cyreg.cy; }
        }
        return null;
    }

    function setProps(id, data) {
        if (window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props(id, {data: data});
        }
    }

    // ------------------------------------------------------------------ binding to the cy instance
    // Cytoscape 3.28 (dash-cytoscape 1.0) flips a node's :backgrounding state twice in every
    // drawing of a node without background images, and each flip restyles the node, its edges
    // and, for a block's frame, everything inside it: panning the whole of ResNet-152 spent most
    // of its frames restyling.  No node here has a background image: the state stays false.
    var NO_BACKGROUNDING = {get: function () { return false; }, set: function () {}, configurable: true};

    function pinBackgrounding(eles) {
        eles.forEach(function (e) {
            if (e.isNode()) { Object.defineProperty(e._private, 'backgrounding', NO_BACKGROUNDING); }
        });
    }

    function hook() {
        var cy = cyOf();
        if (!cy || cy === S.cy) { return cy; }
        S.cy = cy;
        // a double-click within half a second, as desktops count them (cytoscape's 250 ms missed
        // double-clicks while the page was busy with the first click's selection)
        if (cy.multiClickDebounceTime) { cy.multiClickDebounceTime(450); }
        pinBackgrounding(cy.nodes());
        cy.on('add', 'node', function (e) { pinBackgrounding(e.target); });
        cy.on('mouseover', 'node, edge', showHover);
        cy.on('mouseout', 'node, edge', hideHover);
        cy.on('viewport', function () { hideHover(); queueMap(false); });
        cy.on('zoom', function () { edgeLabels(cy, false); lodLater(cy); });
        cy.on('add data class', 'edge', function () { queueEdgeLabels(cy); });   // new or redrawn edges
        cy.on('add data class', 'node', function () { queueLod(cy); });          // new or redrawn nodes
        cy.on('add remove position data', function () { queueMap(true); });
        cy.on('add', function () {
            if (S.viewed || S.net !== null) { queueReframe(cy); return; }
            window.requestAnimationFrame(function () {   // the first drawing of the page: its first view at once
                if (S.viewed || cy.elements().length === 0) { return; }
                S.viewed = true;
                firstView(cy);
                stampDrawn();
            });
        });
        cy.on('resize', function () { queueMap(true); });
        cy.on('dbltap', 'node.block, node.group', function (e) {
            e.stopPropagation && e.stopPropagation();
            S.toggleN += 1;
            setProps(IDS.toggle, {id: e.target.data('name'), n: S.toggleN});
        });
        queueMap(true);
        return cy;
    }

    // ------------------------------------------------------------------ selection
    function matches(cy, sel) {
        if (!sel || !sel.name) { return cy.collection(); }
        var name = sel.name, kind = sel.kind;
        if (kind === 'blob') {
            return cy.elements().filter(function (e) {
                return e.isEdge() ? e.data('blob') === name
                    : ((e.data('kind') === 'blob' || e.data('kind') === 'output') && e.data('name') === name);
            });
        }
        if (kind === 'block') {
            return cy.nodes().filter(function (n) {
                return (n.data('kind') === 'block' || n.data('kind') === 'group') && n.data('name') === name;
            });
        }
        var needle = '|' + name + '|';
        var own = cy.nodes().filter(function (n) {
            var k = n.data('kind');
            if (k === 'ghost') { return kind === 'ghost' && n.data('name') === name; }
            return kind === 'layer' && (k === 'layer' || k === 'block') &&
                (n.data('members') || '').indexOf(needle) >= 0;
        });
        return own;
    }

    function markSelection(cy, sel) {
        cy.batch(function () {
            cy.elements('.sel').removeClass('sel');
            holding(cy, sel).addClass('sel');
        });
    }

    // ------------------------------------------------------------------ views
    var LABEL_ZOOM = 0.95;     // a first view shows every label: nodes' (10.5 px on screen) and blobs' (9.5 px)
    var TOP = 24;              // screen px kept above the net's top (the first frame's title; the legend is above the graph)

    function viewWidth(cy) {       // the graph's width left of the overview (nodes stay clickable)
        var canvas = document.getElementById(IDS.minimap);
        var map = canvas && canvas.offsetParent !== null ? canvas.offsetWidth + 16 : 0;
        return Math.max(cy.width() - map, cy.width() * 0.5);
    }

    function firstZoom(cy, bb) {   // readable labels, the whole width if it fits, never above 1
        var w = viewWidth(cy), h = cy.height();
        var z = Math.min(1.0, Math.max(LABEL_ZOOM, (w - 60) / bb.w));
        if (bb.h * z < h - 40 && bb.w * z < w - 40) {
            z = Math.min(1.0, (h - 40) / bb.h, (w - 40) / bb.w);
            z = Math.max(z, Math.min(LABEL_ZOOM, (h - 40) / bb.h));
        }
        return z;
    }

    function drawnBox(cy) {        // the drawing's box without labels (their size follows the zoom)
        return cy.elements().boundingBox({includeLabels: false, includeOverlays: false});
    }

    function firstView(cy) {
        var bb = drawnBox(cy);
        if (!isFinite(bb.w) || bb.w <= 0) { return; }
        var z = firstZoom(cy, bb);
        cy.zoom(z);
        cy.pan({x: viewWidth(cy) / 2 - (bb.x1 + bb.w / 2) * z, y: TOP - bb.y1 * z});   // the net's top at the top
        lod(cy);
    }

    // The whole net in the area left of the overview; zoomed out, the room the outermost
    // frames' names need beside them is kept on the right.
    function fitView(cy) {
        var bb = drawnBox(cy), w = viewWidth(cy), h = cy.height();
        if (!isFinite(bb.w) || bb.w <= 0) { return null; }
        var fit = function (room) {
            return Math.max(cy.minZoom(), Math.min((w - 60 - room) / Math.max(bb.w, 1), (h - 90) / Math.max(bb.h, 1),
                                                   cy.maxZoom()));
        };
        var z = fit(0), room = 0;
        if (z < Z_FULL) {
            room = sideRoom(cy);
            z = fit(room);
        }
        return {zoom: z, pan: {x: (w - bb.w * z - room) / 2 - bb.x1 * z, y: TOP + (h - TOP) / 2 - (bb.y1 + bb.h / 2) * z}};
    }

    // Labels by level of detail: cytoscape hides small text only at powers of two of the zoom,
    // so edge labels (blob shapes) are switched off below EDGE_LABEL_ZOOM here.
    var EDGE_LABEL_ZOOM = 0.95;       // blob shapes (10 px) from here: zooming in shows them

    function edgeLabels(cy, always) {
        var far = cy.zoom() < EDGE_LABEL_ZOOM;
        if (far === S.far && !always) { return; }
        S.far = far;
        var change = cy.edges('.srclab, .midlab, .tgtlab').filter(function (e) { return e.hasClass('far') !== far; });
        if (change.nonempty()) {    // toggleClass restyles (and reports) every edge given, changed or not
            cy.batch(function () { change.toggleClass('far', far); });
        }
    }

    function queueEdgeLabels(cy) {     // the page redrew edges (their classes come from the server)
        if (S.labelsQueued) { return; }
        S.labelsQueued = true;
        window.requestAnimationFrame(function () {
            S.labelsQueued = false;
            edgeLabels(cy, true);
            if (!S.lodTimer && !S.lodQueued) { queuePlace(cy); }     // else the level of detail places them
        });
    }

    // Edge labels never cover one another, a frame's title or a node: each goes under the layer
    // that writes the blob (or mid-edge, where one layer writes several: the server's choice,
    // data 'lp'), else to the next free place of the three (under the writer, mid-edge, above
    // the reader); where none is free it is left out (the edge's hover box names the blob and
    // its shape).  Label boxes do not depend on the zoom: placed once per drawing, and put back
    // after the server restyles the edges (their classes come from it).
    var PLACES = ['srclab', 'midlab', 'tgtlab'], PLACE_CLASSES = PLACES.concat(['lblhide']);
    var LABEL_BOX = {includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false,
                     includeUnderlays: false};
    var BODY_BOX = {includeLabels: false, includeOverlays: false, includeUnderlays: false, includeOutlines: false};

    function setPlace(e, place, dx) {        // place: a class of PLACE_CLASSES; dx: a shift sideways
        PLACE_CLASSES.forEach(function (c) { if (e.hasClass(c) !== (c === place)) { e.toggleClass(c, c === place); } });
        if (place !== 'lblhide' && e.hasClass('far') !== !!S.far) { e.toggleClass('far', !!S.far); }
        if (dx && e.data('lx') !== dx) { e.data('lx', dx); }
        if (e.hasClass('shifted') !== !!dx) { e.toggleClass('shifted', !!dx); }
    }

    var NODE_INSET = 5;                        // px of a node's edge (its border) a label may cover

    function inset(b, d) {
        return {x1: b.x1 + d, x2: b.x2 - d, y1: b.y1 + d, y2: b.y2 - d, w: b.w - 2 * d, h: b.h - 2 * d};
    }

    function crosses(p, q, b) {              // whether segment p-q passes through box b (Liang-Barsky)
        var t0 = 0, t1 = 1, dx = q.x - p.x, dy = q.y - p.y;
        var edges = [[-dx, p.x - b.x1], [dx, b.x2 - p.x], [-dy, p.y - b.y1], [dy, b.y2 - p.y]];
        for (var i = 0; i < 4; i++) {
            var pp = edges[i][0], qq = edges[i][1];
            if (pp === 0) { if (qq < 0) { return false; } continue; }
            var r = qq / pp;
            if (pp < 0) { if (r > t1) { return false; } if (r > t0) { t0 = r; } }
            else { if (r < t0) { return false; } if (r < t1) { t1 = r; } }
        }
        return t0 < t1;
    }

    function meets(a, b) { return a.x1 < b.x2 - 0.5 && b.x1 < a.x2 - 0.5 && a.y1 < b.y2 - 0.5 && b.y1 < a.y2 - 0.5; }

    function placeLabels(cy) {
        if (S.far !== false) { return; }          // placed when they show (the frames' titles in full then)
        var edges = cy.edges().filter(function (e) { return !!e.data('lp') && !!e.data('label'); });
        var known = S.places || {}, key = [];
        edges.forEach(function (e) { key.push(e.id()); });
        key = key.join('|');
        if (S.placesKey === key) {                // the same edges: the places found, put back where restyled
            var moved = edges.filter(function (e) {
                var p = known[e.id()];
                return !e.hasClass(p[0]) || e.hasClass('shifted') !== !!p[1];
            });
            if (moved.nonempty()) {
                cy.batch(function () { moved.forEach(function (e) { setPlace(e, known[e.id()][0], known[e.id()][1]); }); });
            }
            return;
        }
        var taken = [];
        cy.nodes().forEach(function (n) {        // frames' titles; nodes' insides (a label may touch a border)
            var b = n.data('kind') === 'group' ? (n.hasClass('nolabel') ? null : n.boundingBox(LABEL_BOX))
                                               : inset(n.boundingBox(BODY_BOX), NODE_INSET);
            if (b && b.w > 0 && b.h > 0) { taken.push(b); }
        });
        var free = function (b) {
            if (!(b.w > 0)) { return false; }
            for (var i = 0; i < taken.length; i++) { if (meets(b, taken[i])) { return false; } }
            return true;
        };
        var lines = cy.edges().map(function (e) {     // every edge's polyline: a label prefers not to lie on one
            var pts = [e.sourceEndpoint()].concat(e.hasClass('seg') ? (e.segmentPoints() || []) : [])
                .concat([e.targetEndpoint()]);
            return {id: e.id(), pts: pts};
        });
        var clear = function (b, own) {
            for (var i = 0; i < lines.length; i++) {
                if (lines[i].id === own) { continue; }
                var p = lines[i].pts;
                for (var k = 1; k < p.length; k++) { if (crosses(p[k - 1], p[k], b)) { return false; } }
            }
            return true;
        };
        var order = edges.toArray().map(function (e) { return [e, e.boundingBox(LABEL_BOX)]; });
        order.sort(function (a, b) { return (a[1].y1 - b[1].y1) || (a[1].x1 - b[1].x1); });
        var places = {};
        order.forEach(function (pair) {
            var e = pair[0], first = e.data('lp'), w = pair[1].w > 0 ? pair[1].w : 60, side = w / 2 + 10;
            var where = [first].concat(PLACES.filter(function (p) { return p !== first; })), tries = [];
            [0, side, -side].forEach(function (dx) { where.forEach(function (p) { tries.push([p, dx]); }); });
            var boxes = [], fallback = -1;           // the first free place clear of other edges' lines,
            for (var i = 0; i < tries.length; i++) {  // else the first free place
                setPlace(e, tries[i][0], tries[i][1]);
                var b = e.boundingBox(LABEL_BOX);
                boxes.push(b);
                if (!free(b)) { continue; }
                if (clear(b, e.id())) { taken.push(b); places[e.id()] = tries[i]; return; }
                if (fallback < 0) { fallback = i; }
            }
            if (fallback >= 0) {
                setPlace(e, tries[fallback][0], tries[fallback][1]);
                taken.push(boxes[fallback]);
                places[e.id()] = tries[fallback];
                return;
            }
            setPlace(e, 'lblhide', 0);
            places[e.id()] = ['lblhide', 0];
        });
        S.places = places;
        S.placesKey = key;
    }

    // Names at every zoom (the stylesheet's classes, inspector/views/cyto.py): from Z_FULL every
    // node's full label; below, a node's name alone at SHORT_PX on screen where it fits
    // inside the node, an outermost frame's summary (name, blocks or layers, output shape)
    // at SIDE_PX beside it, an inner frame's name above it at TOP_PX where it fits.  Sizes
    // are set when a zoom ends (not on every frame of a wheel or a pinch).
    var Z_FULL = 0.86, SHORT_PX = 10, SIDE_PX = 12, TOP_PX = 10, LOD_CLASSES = ['short', 'nolabel', 'side', 'top'];
    var FONT = 'Inter, Segoe UI, Helvetica, Arial, sans-serif', measurer = null;

    function textWidth(text, px, bold) {     // on-screen width of one line of text at px
        measurer = measurer || document.createElement('canvas').getContext('2d');
        measurer.font = (bold ? 'bold ' : '') + px + 'px ' + FONT;
        return measurer.measureText(text).width;
    }

    function linesWidth(text, px, bold) {
        return Math.max.apply(null, String(text || '').split('\n').map(function (t) { return textWidth(t, px, bold); }));
    }

    function sideText(n, z) {                // two lines where the frame is tall enough on screen, else one
        var t = n.data('short') || n.data('label') || '';
        return n.data('h') * z >= 2.6 * SIDE_PX ? t : t.replace(/\n/g, ' · ');
    }

    function sideRoom(cy) {                  // screen px the outermost frames' summaries need beside them
        var room = 0;
        cy.nodes('[outer]').forEach(function (n) {
            room = Math.max(room, linesWidth(n.data('short') || '', SIDE_PX, true) + 20);
        });
        return room;
    }

    function lodOf(n, z) {                   // [class, font size in graph units, side text] at zoom z
        var k = n.data('kind');
        if (z >= Z_FULL) { return ['', null, null]; }
        if (k === 'group') {
            if (n.data('outer')) { return ['side', SIDE_PX / z, sideText(n, z)]; }
            var name = (n.data('label') || '');
            if (z >= 0.4 && textWidth(name, TOP_PX, true) + 8 <= n.data('w') * z) { return ['top', TOP_PX / z, null]; }
            return ['nolabel', null, null];
        }
        var w = n.scratch('_w10');
        if (w === undefined) { w = textWidth(n.data('short') || '', SHORT_PX, false); n.scratch('_w10', w); }
        if (w + 6 <= n.data('w') * z && n.data('h') * z >= SHORT_PX + 2) { return ['short', SHORT_PX / z, null]; }
        return ['nolabel', null, null];
    }

    function lod(cy) {
        var z = cy.zoom();
        cy.batch(function () {
            cy.nodes().forEach(function (n) {
                var want = lodOf(n, z), cls = want[0];
                if (want[1] !== null && n.data('fs') !== want[1]) { n.data('fs', want[1]); n.data('fm', 6 / z); }
                if (want[2] !== null && n.data('side') !== want[2]) { n.data('side', want[2]); }
                LOD_CLASSES.forEach(function (c) {
                    var on = c === cls;
                    if (n.hasClass(c) !== on) { n.toggleClass(c, on); }
                });
            });
        });
        edgeLabels(cy, false);
        queuePlace(cy);
    }

    function queuePlace(cy) {                // after the frame that draws the graph (its first view first)
        if (S.placeQueued) { return; }
        S.placeQueued = true;
        window.requestAnimationFrame(function () { S.placeQueued = false; placeLabels(cy); });
    }

    function lodLater(cy) {                  // when the zoom has stopped changing
        if (S.lodTimer) { window.clearTimeout(S.lodTimer); }
        S.lodTimer = window.setTimeout(function () { S.lodTimer = null; lod(cy); }, 140);
    }

    function queueLod(cy) {                  // the page redrew nodes (their classes come from the server)
        if (S.lodQueued) { return; }
        S.lodQueued = true;
        window.requestAnimationFrame(function () { S.lodQueued = false; lod(cy); });
    }

    // After the drawing changed (folding, options): a view that no longer shows the net, or
    // shows it as a speck (Collapse all after looking at the whole net expanded), starts again
    // from the first view; opening or folding one block leaves the view where it is.
    function queueReframe(cy) {
        if (S.reframeQueued) { return; }
        S.reframeQueued = true;
        window.requestAnimationFrame(function () {
            S.reframeQueued = false;
            var bb = drawnBox(cy), ext = cy.extent();
            if (!isFinite(bb.w) || bb.w <= 0) { return; }
            var away = bb.x2 < ext.x1 || bb.x1 > ext.x2 || bb.y2 < ext.y1 || bb.y1 > ext.y2;
            var speck = bb.w < ext.w * 0.4 && bb.h < ext.h * 0.4 && cy.zoom() < 0.8 * firstZoom(cy, bb);
            if (away || speck) { firstView(cy); }
            keepInView(cy);
        });
    }

    // The selection, or the folded block now holding it, stays in the visible part of the
    // graph through whatever redraws it (expand, collapse, all of them, a phase, a reload).
    function holding(cy, sel) {
        var own = matches(cy, sel);
        if (own.nonempty() || !sel || !sel.name) { return own; }
        var needle = '|' + sel.name + '|';
        if (sel.kind === 'block') {          // folded inside a bigger block
            return cy.nodes('[inner]').filter(function (n) { return n.data('inner').indexOf(needle) >= 0; });
        }
        return cy.collection();
    }

    function keepInView(cy) {
        var eles = holding(cy, S.selection);
        if (eles.empty()) { return; }
        var bb = eles.boundingBox({includeLabels: false, includeOverlays: false}), ext = cy.extent();
        var z = cy.zoom(), right = ext.x1 + viewWidth(cy) / z, top = ext.y1 + TOP / z;     // left of the overview,
        var inside = bb.x1 >= ext.x1 && bb.x2 <= right && bb.y1 >= top && bb.y2 <= ext.y2;   // below the legend
        var big = bb.w > right - ext.x1 || bb.h > ext.y2 - top;
        if (inside || (big && bb.x1 < right && bb.x2 > ext.x1 && bb.y1 < ext.y2 && bb.y2 > top)) { return; }
        var w = viewWidth(cy), h = cy.height();
        var cx = bb.x1 + bb.w / 2, cy_ = big ? bb.y1 + (h - TOP) / (2 * z) - 20 / z : bb.y1 + bb.h / 2;
        cy.pan({x: w / 2 - cx * z, y: TOP + (h - TOP) / 2 - cy_ * z});
    }

    function centreOn(cy, eles, animate) {
        if (!eles || eles.empty()) { return false; }
        var bb = eles.boundingBox();
        var w = viewWidth(cy), h = cy.height();
        var z = Math.max(cy.zoom(), LABEL_ZOOM);     // a readable view: every label, the blobs' shapes too
        z = Math.min(z, 1.6, (w - 80) / Math.max(bb.w, 1), (h - 80) / Math.max(bb.h, 1));
        z = Math.max(z, cy.minZoom());
        var pan = {x: w / 2 - (bb.x1 + bb.w / 2) * z, y: h / 2 - (bb.y1 + bb.h / 2) * z};
        if (animate) {
            cy.stop(true, false);
            cy.animate({zoom: z, pan: pan}, {duration: 220});
        } else {
            cy.zoom(z);
            cy.pan(pan);
        }
        return true;
    }

    function stampDrawn() {        // when the graph was first drawn (ms since navigation start: benchmarks)
        if (!window.inspectorGraphDrawn) { window.inspectorGraphDrawn = window.performance.now(); }
    }

    // ------------------------------------------------------------------ overview
    function queueMap(dirty) {
        if (dirty) { S.mapDirty = true; }
        if (S.mapQueued) { return; }
        S.mapQueued = true;
        window.requestAnimationFrame(function () { S.mapQueued = false; drawMap(); });
    }

    function drawMap() {
        var cy = S.cy, canvas = document.getElementById(IDS.minimap);
        if (!cy || !canvas || cy.destroyed()) { return; }
        var W = canvas.width, H = canvas.height, ctx = canvas.getContext('2d');
        if (S.mapDirty || !S.mapImage) {
            S.mapDirty = false;
            var bb = cy.elements().boundingBox();
            if (!isFinite(bb.w) || bb.w <= 0) { ctx.clearRect(0, 0, W, H); return; }
            var s = Math.min((W - 8) / bb.w, (H - 8) / bb.h);
            var ox = (W - bb.w * s) / 2 - bb.x1 * s, oy = (H - bb.h * s) / 2 - bb.y1 * s;
            S.mapBox = {s: s, ox: ox, oy: oy};
            var off = document.createElement('canvas');
            off.width = W; off.height = H;
            var c = off.getContext('2d');
            c.fillStyle = '#ffffff';
            c.fillRect(0, 0, W, H);
            cy.nodes().forEach(function (n) {
                var b = n.boundingBox({includeLabels: false, includeOverlays: false});
                var x = b.x1 * s + ox, y = b.y1 * s + oy, w = Math.max(b.w * s, 1.5), hh = Math.max(b.h * s, 1.5);
                if (n.data('kind') === 'group') {
                    c.strokeStyle = '#9aa8bd';
                    c.lineWidth = 1;
                    c.strokeRect(x, y, w, hh);
                } else {
                    c.fillStyle = n.data('fill') || '#888';
                    c.fillRect(x, y, w, hh);
                }
            });
            S.mapImage = off;
        }
        ctx.clearRect(0, 0, W, H);
        ctx.drawImage(S.mapImage, 0, 0);
        var m = S.mapBox, ext = cy.extent();
        if (!m) { return; }
        ctx.strokeStyle = '#d62728';
        ctx.lineWidth = 1.5;
        ctx.fillStyle = 'rgba(214,39,40,0.08)';
        var vx = ext.x1 * m.s + m.ox, vy = ext.y1 * m.s + m.oy;
        ctx.fillRect(vx, vy, ext.w * m.s, ext.h * m.s);
        ctx.strokeRect(vx, vy, ext.w * m.s, ext.h * m.s);
    }

    function mapTo(ev) {
        var cy = S.cy, canvas = document.getElementById(IDS.minimap), m = S.mapBox;
        if (!cy || !canvas || !m) { return; }
        var r = canvas.getBoundingClientRect();
        var px = (ev.clientX - r.left) * canvas.width / r.width, py = (ev.clientY - r.top) * canvas.height / r.height;
        var mx = (px - m.ox) / m.s, my = (py - m.oy) / m.s, z = cy.zoom();
        cy.pan({x: cy.width() / 2 - mx * z, y: cy.height() / 2 - my * z});
    }

    // ------------------------------------------------------------------ hover boxes
    function showHover(e) {
        var box = document.getElementById(IDS.hover), holder = document.getElementById(IDS.holder);
        var lines = e.target.data('hover');
        if (!box || !holder || !lines || !lines.length) { return; }
        box.textContent = '';
        lines.forEach(function (line, i) {
            var d = document.createElement('div');
            d.textContent = line;
            if (i === 0) { d.className = 'hover-head'; }
            box.appendChild(d);
        });
        var p = e.renderedPosition || {x: 0, y: 0};
        var cyEl = document.getElementById(IDS.graph), hr = holder.getBoundingClientRect();
        var cr = cyEl ? cyEl.getBoundingClientRect() : hr;
        box.style.display = 'block';
        var x = p.x + (cr.left - hr.left) + 14, y = p.y + (cr.top - hr.top) + 14;
        var bw = box.offsetWidth, bh = box.offsetHeight;
        if (x + bw > hr.width - 4) { x = Math.max(4, p.x + (cr.left - hr.left) - bw - 14); }
        if (y + bh > hr.height - 4) { y = Math.max(4, hr.height - bh - 4); }
        box.style.left = x + 'px';
        box.style.top = y + 'px';
    }

    function hideHover() {
        var box = document.getElementById(IDS.hover);
        if (box) { box.style.display = 'none'; }
    }

    // ------------------------------------------------------------------ search keyboard
    function hits() {
        var ul = document.getElementById(IDS.results);
        return ul ? Array.prototype.slice.call(ul.querySelectorAll('li.search-hit')) : [];
    }

    function choose(li) {
        if (!li) { return; }
        S.pickN += 1;
        setProps(IDS.pick, {kind: li.getAttribute('data-kind'), name: li.getAttribute('data-name'), n: S.pickN});
        hits().forEach(function (h) { h.classList.toggle('active', h === li); });
    }

    // fields that take typed text ("/" is a character there); a radio button, a checkbox or a
    // button keeps focus after a click, and "/" still goes to the search box from them
    var TEXT_INPUTS = {text: 1, search: 1, number: 1, email: 1, password: 1, url: 1, tel: 1, date: 1, time: 1};

    function takesText(t) {
        var tag = t && t.tagName ? t.tagName.toLowerCase() : '';
        if (tag === 'input') { return !!TEXT_INPUTS[(t.getAttribute('type') || 'text').toLowerCase()]; }
        return tag === 'textarea' || tag === 'select' || !!(t && t.isContentEditable);
    }

    document.addEventListener('keydown', function (ev) {
        var t = ev.target, typing = takesText(t);
        if (ev.key === '/' && !typing && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
            var box = document.getElementById(IDS.search);
            if (box) { ev.preventDefault(); box.focus(); box.select && box.select(); }
            return;
        }
        if (!t || t.id !== IDS.search) { return; }
        var list = hits();
        if (!list.length) { return; }
        var k = list.findIndex(function (h) { return h.classList.contains('active'); });
        if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
            ev.preventDefault();
            k = ev.key === 'ArrowDown' ? Math.min(list.length - 1, k + 1) : Math.max(0, k - 1);
            list.forEach(function (h, i) { h.classList.toggle('active', i === k); });
            list[k].scrollIntoView({block: 'nearest'});
        } else if (ev.key === 'Enter') {
            ev.preventDefault();
            choose(list[Math.max(k, 0)]);
            t.blur();          // the pick is made: the list closes (/ opens search again)
        } else if (ev.key === 'Escape') {
            t.blur();
        }
    }, true);

    document.addEventListener('mousedown', function (ev) {
        var li = ev.target && ev.target.closest ? ev.target.closest('li.search-hit') : null;
        if (li) {                  // before the box loses focus (the list hides then); then close the list,
            ev.preventDefault();   // as Enter does
            choose(li);
            var box = document.getElementById(IDS.search);
            if (box) { box.blur(); }
        }
    }, true);
    document.addEventListener('click', function (ev) {
        if (ev.target && ev.target.id === IDS.minimap) { mapTo(ev); }
        var tog = ev.target && ev.target.closest ? ev.target.closest('#' + IDS.mapToggle) : null;
        if (tog) {                 // hide / show the overview (the graph under it becomes clickable)
            var holder = document.getElementById(IDS.holder), hidden = holder.classList.toggle('no-minimap');
            tog.setAttribute('aria-label', hidden ? 'Show overview' : 'Hide overview');
            tog.setAttribute('aria-pressed', hidden ? 'false' : 'true');
            tog.textContent = hidden ? '\u25a3' : '\u00d7';
            tog.title = hidden ? 'show the overview' : 'hide the overview';
            if (!hidden) { queueMap(true); }
        }
        var open = document.querySelectorAll('details.menu[open]');      // the View / Save menus
        for (var i = 0; i < open.length; i++) {
            if (!open[i].contains(ev.target)) { open[i].removeAttribute('open'); }
        }
    });
    var dragging = false;
    document.addEventListener('mousedown', function (ev) { dragging = ev.target && ev.target.id === IDS.minimap; });
    document.addEventListener('mouseup', function () { dragging = false; });
    document.addEventListener('mousemove', function (ev) { if (dragging) { mapTo(ev); } });
    var hooking = window.setInterval(function () {
        if (hook()) { window.clearInterval(hooking); window.setInterval(hook, 500); }   // a new cy after a remount
    }, 25);

    // ------------------------------------------------------------------ Dash clientside callbacks
    // ------------------------------------------------------------------ the panels follow the graph
    // A new net's side panels (details, findings, timeline, the range lists, breakpoints...) are
    // made once its graph is on screen: their callbacks listen to PANELS_NET, which takes the
    // net's version (NET_VERSION) after the frame that draws that net's graph, or a while after
    // NET_VERSION changed if no graph comes (a load that failed).  The graph is what a user waits
    // for; the panels are filled a moment later instead of holding it up.
    function releasePanels(version) {
        if (S.panelsTimer) { window.clearTimeout(S.panelsTimer); S.panelsTimer = null; }
        if (version > S.panelsGiven) {
            S.panelsGiven = version;
            setProps(IDS.panels, version);
        }
    }

    function panelsAfterGraph(meta) {       // called by sync once the graph shows ``meta``
        var version = meta && meta.version;
        if (!(version > S.panelsGiven)) { return; }
        window.requestAnimationFrame(function () { window.setTimeout(function () { releasePanels(version); }, 0); });
    }

    function later(fn, tries) {
        window.requestAnimationFrame(function () {
            if (!fn() && tries > 0) { window.setTimeout(function () { later(fn, tries - 1); }, 60); }
        });
    }

    // Whether the graph still has deferred work queued (the zoom's level of detail waits 140 ms
    // for the zoom to stop; labels, the overview map and a re-frame wait for the next frame):
    // scripted checks wait on it rather than on a guess at how long that takes.
    window.inspectorGraphPending = function () {
        return !!(S.lodTimer || S.lodQueued || S.labelsQueued || S.mapQueued || S.reframeQueued || S.placeQueued);
    };
    // The graph binds itself as soon as cytoscape is on the page, not at the first sync (which
    // waits for the page's first callbacks): a page sent with its net's elements (a fresh tab's
    // first view, inspector/callbacks/first_view.py) gets its first view before its first paint.
    function watchFirst(frames) {
        var cy = hook();
        if (!cy) {
            if (frames > 0) { window.requestAnimationFrame(function () { watchFirst(frames - 1); }); }
            return;
        }
        if (!S.viewed && cy.elements().length > 0) {   // else the 'add' handler makes the first view
            S.viewed = true;
            firstView(cy);
            stampDrawn();
        }
    }
    window.requestAnimationFrame(function () { watchFirst(1200); });

    window.dash_clientside = window.dash_clientside || {};
    window.dash_clientside.inspectorGraph = {
            sync: function (meta, selection, focus) {
                S.selection = selection;
                S.focus = focus;
                var net = meta && meta.net;
                later(function () {
                    var cy = hook();
                    if (!cy) { return false; }
                    if (meta && meta.n && cy.elements().length === 0) { return false; }   // not drawn yet
                    if (net && net !== S.net) {
                        if (S.net !== null || !S.viewed) { firstView(cy); }   // else: the page's first view is on
                        S.net = net;
                        S.viewed = true;
                        var named = holding(cy, S.selection);   // an address naming a layer: show it
                        if (named.nonempty()) { centreOn(cy, named, false); }
                        stampDrawn();
                    }
                    markSelection(cy, S.selection);
                    if (S.focus && S.focus.n !== S.focusN) {
                        if (!centreOn(cy, matches(cy, S.focus), true)) { return false; }
                        S.focusN = S.focus.n;
                    }
                    queueMap(true);
                    panelsAfterGraph(meta);
                    return true;
                }, 20);
                return {net: net || null, selection: selection || null};
            },
            panels: function (version) {      // NET_VERSION changed: the graph should follow
                if (S.panelsTimer) { window.clearTimeout(S.panelsTimer); }
                S.panelsTimer = window.setTimeout(function () { releasePanels(version); }, 1500);
                return window.dash_clientside.no_update;
            },
            fit: function () {
                var trig = (window.dash_clientside.callback_context.triggered || [])[0];
                var which = trig && trig.prop_id ? trig.prop_id.split('.')[0] : '';
                var cy = hook();
                if (!cy) { return window.dash_clientside.no_update; }
                if (which === 'btn-fit-selection') {
                    centreOn(cy, holding(cy, S.selection), true);
                } else {           // the whole net in the area left of the overview
                    var view = fitView(cy);
                    if (!view) { return {fit: which}; }
                    cy.stop(true, false);
                    cy.animate(view, {duration: 220});
                }
                return {fit: which};
            }
    };
}());
