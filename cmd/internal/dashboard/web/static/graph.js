// The machines' graphs as views: each zooms and pans by its viewBox,
// starts fitted to its area when it does not fit there at 100%, shows an
// overview of the whole drawing when it is larger than its area, and is
// one tab stop whose arrow keys move between its states. A machine's view
// and the state that holds its tab stop outlive the page's swaps of the
// machines' HTML (app.js calls setup after each).
//
// The drawing's contract: svg.graph's viewBox bounds the drawing; each
// state is an a.state whose first rect is its box; edges are paths under
// g.edge and g.entry.
"use strict";
window.kfsmGraphs = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const maxScale = 4;
  const step = 1.25; // of a button's or key's zoom
  const minRoom = 320; // px: the least height a large graph gets
  const overview = { w: 160, h: 56 }; // px: the most the overview takes

  const views = new Map(); // machine → {s, x, y, fitted}
  const stops = new Map(); // machine → the state that has the tab stop
  let graphs = [];

  // setup makes views of the graphs under root, after the page drew them.
  function setup(root) {
    watchWidth.observe(root);
    graphs = [...root.querySelectorAll("section.machine")].map(make).filter(Boolean);
    for (const g of graphs) layout(g);
  }

  function make(section) {
    const svg = section.querySelector("svg.graph");
    const wrap = section.querySelector(".graph-wrap");
    if (!svg || !wrap) return null;
    const b = svg.viewBox.baseVal;
    const g = {
      key: section.dataset.machine, section, wrap, svg,
      tools: section.querySelector(".graph-tools"),
      base: { x: b.x, y: b.y, w: Math.max(b.width, 1), h: Math.max(b.height, 1) },
      W: 1, H: 1, large: false, view: null, mini: null,
    };
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    const keys = section.querySelector(".keys");
    if (keys) svg.setAttribute("aria-describedby", keys.id);
    g.states = [...svg.querySelectorAll("a.state")].map((a) => box(g, a));
    roving(g);
    g.mini = miniature(g);
    listen(g);
    return g;
  }

  // box is where a state's box is, in the drawing's units.
  function box(g, a) {
    const r = (a.querySelector("rect") || a).getBBox();
    const m = toDrawing(g, a.querySelector("rect") || a);
    const p = new DOMPoint(r.x, r.y).matrixTransform(m);
    const q = new DOMPoint(r.x + r.width, r.y + r.height).matrixTransform(m);
    return { a, name: a.dataset.state, x: p.x, y: p.y, w: q.x - p.x, h: q.y - p.y, cx: (p.x + q.x) / 2, cy: (p.y + q.y) / 2 };
  }

  // toDrawing maps an element's units to the drawing's.
  function toDrawing(g, el) {
    const root = g.svg.getScreenCTM();
    const own = el.getScreenCTM();
    return root && own ? root.inverse().multiply(own) : new DOMMatrix();
  }

  // layout sizes a graph's area: as tall as the drawing when it fits at
  // 100%, and otherwise at most the window's height less the page's
  // header and the machine's heading, so that the whole area is in sight
  // when the heading is at the top.
  function layout(g) {
    const header = document.querySelector("body > header");
    const heading = g.section.firstElementChild;
    const room = () => {
      const top = heading.getBoundingClientRect().top - parseFloat(getComputedStyle(heading).marginTop);
      const above = g.wrap.getBoundingClientRect().top - top;
      return Math.max(minRoom, innerHeight - (header ? header.offsetHeight : 0) - above - 24);
    };
    g.W = Math.max(g.wrap.clientWidth, 1);
    g.large = g.base.w > g.W || g.base.h > room();
    g.wrap.classList.toggle("large", g.large);
    if (g.mini) g.mini.svg.style.display = g.large ? "" : "none";
    // A large graph's area is as tall as the drawing is when it fits the
    // width, within the room; and tall enough to zoom in, unless the
    // drawing is not.
    const fitted = g.base.h * Math.min(1, g.W / g.base.w);
    g.H = g.large ? Math.min(room(), Math.max(Math.min(minRoom, g.base.h), fitted)) : g.base.h;
    g.wrap.style.height = `${Math.round(g.H)}px`;
    // The drawing's own box, unrounded, so that the viewBox has its
    // proportions exactly.
    const r = g.svg.getBoundingClientRect();
    g.W = Math.max(r.width, 1);
    g.H = Math.max(r.height, 1);
    const saved = views.get(g.key);
    if (!saved || saved.fitted) fit(g);
    else show(g, { ...saved });
  }

  // fitScale is the scale at which the whole drawing fits its area, at
  // most 100%.
  function fitScale(g) {
    return Math.min(1, g.W / g.base.w, g.H / g.base.h);
  }

  function fit(g) {
    const s = fitScale(g);
    // A small graph sits at its area's top left, as the page flows; a
    // large one in the middle.
    const x = g.large ? g.base.x + g.base.w / 2 - g.W / s / 2 : g.base.x;
    const y = g.large ? g.base.y + g.base.h / 2 - g.H / s / 2 : g.base.y;
    show(g, { s, x, y, fitted: true });
  }

  // show sets the view, kept where the drawing can be seen: a drawing
  // larger than the view covers it, a smaller one stays inside it.
  function show(g, v) {
    v.s = Math.min(maxScale, Math.max(minScale(g), v.s));
    const w = g.W / v.s;
    const h = g.H / v.s;
    // keep clamps the view's start between the drawing's start and where
    // the view's end meets the drawing's end, whichever comes first.
    const keep = (pos, size, start, length) => {
      const other = start + length - size;
      return Math.min(Math.max(start, other), Math.max(Math.min(start, other), pos));
    };
    v.x = keep(v.x, w, g.base.x, g.base.w);
    v.y = keep(v.y, h, g.base.y, g.base.h);
    g.view = v;
    views.set(g.key, v);
    g.svg.setAttribute("viewBox", `${v.x} ${v.y} ${w} ${h}`);
    if (g.mini) {
      const r = g.mini.view;
      r.setAttribute("x", v.x);
      r.setAttribute("y", v.y);
      r.setAttribute("width", w);
      r.setAttribute("height", h);
    }
  }

  function minScale(g) {
    return Math.min(fitScale(g), 1) * 0.75;
  }

  // zoom scales the view by factor around the point (px, py) of the
  // area, in CSS pixels, which stays where it is.
  function zoom(g, factor, px = g.W / 2, py = g.H / 2) {
    const v = g.view;
    const s = Math.min(maxScale, Math.max(minScale(g), v.s * factor));
    const ux = v.x + px / v.s;
    const uy = v.y + py / v.s;
    show(g, { s, x: ux - px / s, y: uy - py / s, fitted: false });
  }

  // pan moves the drawing by (dx, dy) CSS pixels.
  function pan(g, dx, dy) {
    const v = g.view;
    show(g, { s: v.s, x: v.x - dx / v.s, y: v.y - dy / v.s, fitted: false });
  }

  // centre brings the drawing's point (x, y) to the middle of the view.
  function centre(g, x, y) {
    const v = g.view;
    show(g, { s: v.s, x: x - g.W / v.s / 2, y: y - g.H / v.s / 2, fitted: false });
  }

  // reveal brings a state's box into the view if it is not all there.
  function reveal(g, st) {
    const v = g.view;
    const w = g.W / v.s;
    const h = g.H / v.s;
    if (st.x >= v.x && st.y >= v.y && st.x + st.w <= v.x + w && st.y + st.h <= v.y + h) return;
    centre(g, st.cx, st.cy);
  }

  // roving makes the graph one tab stop: the state that had it before,
  // or the chosen one, or the first.
  function roving(g) {
    if (!g.states.length) return;
    const chosen = g.states.find((st) => st.a.getAttribute("aria-current") === "true");
    const st = g.states.find((x) => x.name === stops.get(g.key)) || chosen || g.states[0];
    hold(g, st);
  }

  function hold(g, st) {
    for (const x of g.states) x.a.setAttribute("tabindex", x === st ? "0" : "-1");
    stops.set(g.key, st.name);
  }

  const directions = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };

  // neighbour is the nearest state in an arrow's direction from the
  // centre of from's box: among those within 45° of it if there are
  // any, and a step aside counts twice a step ahead.
  function neighbour(g, from, key) {
    const [dx, dy] = directions[key];
    let best = null;
    let bestScore = Infinity;
    for (const cone of [true, false]) {
      for (const st of g.states) {
        const vx = st.cx - from.cx;
        const vy = st.cy - from.cy;
        const ahead = vx * dx + vy * dy;
        const aside = Math.abs(vx * dy - vy * dx);
        if (st === from || ahead <= 0 || (cone && aside > ahead)) continue;
        const score = ahead + 2 * aside;
        if (score < bestScore) {
          best = st;
          bestScore = score;
        }
      }
      if (best) return best;
    }
    return null;
  }

  function onKey(g, e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const from = g.states.find((st) => st.a === e.target.closest("a.state"));
    if (!from) return;
    // Zooms keep the focused state where it is.
    const px = (from.cx - g.view.x) * g.view.s;
    const py = (from.cy - g.view.y) * g.view.s;
    let to = null;
    if (directions[e.key] && e.shiftKey) {
      const [dx, dy] = directions[e.key];
      pan(g, -dx * g.W / 5, -dy * g.H / 5);
    } else if (directions[e.key]) {
      to = neighbour(g, from, e.key);
    } else if (e.key === "Home") {
      to = g.states[0];
    } else if (e.key === "End") {
      to = g.states[g.states.length - 1];
    } else if (e.key === "+" || e.key === "=") {
      zoom(g, step, px, py);
    } else if (e.key === "-" || e.key === "_") {
      zoom(g, 1 / step, px, py);
    } else if (e.key === "0") {
      fit(g);
    } else if (e.key === "1") {
      zoom(g, 1 / g.view.s, px, py);
    } else {
      return;
    }
    e.preventDefault();
    if (to) to.a.focus({ preventScroll: true });
  }

  // miniature is the overview of a graph: its boxes and edges, and a
  // rectangle where the view is. A click or a drag in it moves the view
  // there. Assistive technology skips it: the keys and the buttons do
  // what it does.
  function miniature(g) {
    if (!g.tools) return null;
    const b = g.base;
    const k = Math.min(overview.w / b.w, overview.h / b.h);
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "overview");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("viewBox", `${b.x} ${b.y} ${b.w} ${b.h}`);
    svg.setAttribute("width", Math.max(24, Math.round(b.w * k)));
    svg.setAttribute("height", Math.max(12, Math.round(b.h * k)));
    const add = (tag, attrs) => {
      const el = document.createElementNS(NS, tag);
      for (const [name, v] of Object.entries(attrs)) el.setAttribute(name, v);
      svg.append(el);
      return el;
    };
    for (const path of g.svg.querySelectorAll(".edge path, .entry path")) {
      const m = toDrawing(g, path);
      add("path", { class: "overview-edge", d: path.getAttribute("d"), transform: `matrix(${m.a} ${m.b} ${m.c} ${m.d} ${m.e} ${m.f})` });
    }
    for (const st of g.states) add("rect", { class: "overview-state", x: st.x, y: st.y, width: st.w, height: st.h });
    const view = add("rect", { class: "overview-view" });
    g.tools.append(svg);
    let dragging = null;
    const move = (e) => {
      const m = svg.getScreenCTM();
      if (!m) return;
      const p = new DOMPoint(e.clientX, e.clientY).matrixTransform(m.inverse());
      centre(g, p.x, p.y);
    };
    svg.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      dragging = e.pointerId;
      svg.setPointerCapture(e.pointerId);
      move(e);
      e.preventDefault();
    });
    svg.addEventListener("pointermove", (e) => {
      if (e.pointerId === dragging) move(e);
    });
    const stop = (e) => {
      if (e.pointerId === dragging) dragging = null;
    };
    svg.addEventListener("pointerup", stop);
    svg.addEventListener("pointercancel", stop);
    return { svg, view };
  }

  // listen takes the graph's keys, wheel and pointers. A drag pans, two
  // fingers pinch; a drag that starts on a state does not open it. The
  // wheel zooms a large graph, and a small one only with Ctrl (as a
  // trackpad's pinch sends it), so that it still scrolls the page.
  function listen(g) {
    const svg = g.svg;
    // Chromium makes an svg element that listens for focus events a tab
    // stop of its own: its area listens instead.
    g.wrap.addEventListener("keydown", (e) => onKey(g, e));
    g.wrap.addEventListener("focusin", (e) => {
      const st = g.states.find((x) => x.a === e.target.closest("a.state"));
      if (!st) return;
      hold(g, st);
      // A click focuses a state too, but the view moves for keys only.
      if (st.a.matches(":focus-visible")) reveal(g, st);
    });
    svg.addEventListener("wheel", (e) => {
      if (!g.large && !e.ctrlKey) return;
      e.preventDefault();
      const r = svg.getBoundingClientRect();
      const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
      zoom(g, Math.exp(-dy * (e.ctrlKey ? 0.01 : 0.002)), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    const down = new Map();
    let dragged = false;
    let pinch = 0;
    svg.addEventListener("pointerdown", (e) => {
      if (e.pointerType === "mouse" && e.button !== 0) return;
      down.set(e.pointerId, { x: e.clientX, y: e.clientY, x0: e.clientX, y0: e.clientY });
      dragged = false;
      pinch = 0;
    });
    svg.addEventListener("pointermove", (e) => {
      const p = down.get(e.pointerId);
      if (!p) return;
      if (!dragged && Math.hypot(e.clientX - p.x0, e.clientY - p.y0) > 4) {
        dragged = true;
        svg.setPointerCapture(e.pointerId);
        svg.classList.add("panning");
      }
      if (!dragged) return;
      if (down.size === 2) {
        const [a, b] = [...down.values()];
        p.x = e.clientX;
        p.y = e.clientY;
        const d = Math.hypot(a.x - b.x, a.y - b.y);
        const r = svg.getBoundingClientRect();
        if (pinch) zoom(g, d / pinch, (a.x + b.x) / 2 - r.left, (a.y + b.y) / 2 - r.top);
        pinch = d;
        return;
      }
      pan(g, e.clientX - p.x, e.clientY - p.y);
      p.x = e.clientX;
      p.y = e.clientY;
    });
    const up = (e) => {
      down.delete(e.pointerId);
      pinch = 0;
      if (!down.size) svg.classList.remove("panning");
    };
    svg.addEventListener("pointerup", up);
    svg.addEventListener("pointercancel", up);
    // A state is a link, which the browser would drag out of the page.
    svg.addEventListener("dragstart", (e) => e.preventDefault());
    svg.addEventListener("click", (e) => {
      if (!dragged) return;
      dragged = false;
      e.preventDefault();
      e.stopPropagation();
    }, true);
  }

  // The buttons, whichever graph drew them.
  document.addEventListener("click", (e) => {
    const button = e.target.closest && e.target.closest(".graph-tools button[data-view]");
    if (!button) return;
    const g = graphs.find((x) => x.section.contains(button));
    if (!g) return;
    const act = { in: () => zoom(g, step), out: () => zoom(g, 1 / step), fit: () => fit(g), actual: () => zoom(g, 1 / g.view.s) }[button.dataset.view];
    if (act) act();
  });

  // The graphs follow the window's size, and the machines' width, which
  // changes as the details open and close.
  let resizing = 0;
  const relayout = () => {
    cancelAnimationFrame(resizing);
    resizing = requestAnimationFrame(() => graphs.forEach(layout));
  };
  addEventListener("resize", relayout);
  let width = 0;
  const watchWidth = new ResizeObserver((entries) => {
    const w = Math.round(entries[entries.length - 1].contentRect.width);
    if (w !== width) {
      width = w;
      relayout();
    }
  });

  // focused says what has the focus among the graphs, to give it back
  // after a swap: a state, a button, or the machine's section.
  function focused() {
    const el = document.activeElement;
    const section = el && el.closest && el.closest("section.machine");
    if (!section) return null;
    const a = el.closest("a.state");
    return { machine: section.dataset.machine, state: a ? a.dataset.state : "", view: el.dataset.view || "" };
  }

  // refocus gives the focus back to what focused said, or to the nearest
  // thing that is still there: the graph's tab stop, or the machines.
  function refocus(was, fallback) {
    if (!was) return;
    const g = graphs.find((x) => x.key === was.machine);
    let el = null;
    if (g && was.view) el = g.tools && g.tools.querySelector(`button[data-view="${was.view}"]`);
    if (g && !el) el = (g.states.find((st) => st.name === was.state) || g.states.find((st) => st.a.tabIndex === 0) || {}).a;
    (el || fallback).focus({ preventScroll: true });
  }

  return { setup, focused, refocus };
})();
