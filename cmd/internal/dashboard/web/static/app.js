// The dashboard's page: it keeps the counts live from the server's event
// stream, and shows in the panel the state or object that the address's
// fragment names (#state/<machine>/<state>, #object/<machine>/<namespace>/<name>).
"use strict";
(() => {
  const main = document.getElementById("machines");
  const panel = document.getElementById("panel");
  const status = document.getElementById("live");
  const graphs = window.kfsmGraphs;
  let latest = null;
  let panelURL = "";
  let panelMachine = "";
  let panelRev = -1;

  const plural = (n, one, many) => (n === 1 ? one : many);
  const stateOf = (m, name) => m.states[name] || { objects: 0, stalled: 0 };

  // text is what an element marked data-live="[kind, machine, name]" shows.
  function text(kind, m, name) {
    switch (kind) {
      case "objects": return String(stateOf(m, name).objects);
      // "3 objects", or "3, 1 stalled" when some are stalled.
      case "noun": return stateOf(m, name).stalled ? "" : " " + plural(stateOf(m, name).objects, "object", "objects");
      case "stalled": {
        const n = stateOf(m, name).stalled;
        return n ? `, ${n} stalled` : "";
      }
      case "edge": return `${m.edges[name] || 0}×`;
      case "total": return String(m.objects);
      case "totalnoun": return plural(m.objects, "object", "objects");
      case "pending": return m.pending ? `, ${m.pending} not placed in a state yet` : "";
      case "earlier": return m.earlier ? `, ${m.earlier} of an earlier graph version, not yet migrated` : "";
      case "unknown": return m.unknown ? `, ${m.unknown} in a state the graph lacks` : "";
      case "synced": return m.synced ? "" : " (still listing)";
      case "gaps": return m.gaps ? ` The arrows miss transitions: ${m.gaps} ${plural(m.gaps, "time an object", "times objects")} moved more often between two reads than ${plural(m.gaps, "its history keeps", "their histories keep")}.` : "";
    }
    return "";
  }

  function apply(snap) {
    latest = snap;
    const drawn = main.querySelector(".machines");
    if (drawn && snap.version > Number(drawn.dataset.version)) {
      reloadMachines();
      return;
    }
    const machines = new Map(snap.machines.map((m) => [m.key, m]));
    const changed = new Set();
    for (const el of main.querySelectorAll("[data-live]")) {
      const [kind, key, name] = JSON.parse(el.dataset.live);
      const m = machines.get(key);
      if (!m) continue;
      const t = text(kind, m, name);
      if (el.textContent !== t) {
        el.textContent = t;
        changed.add(el.closest("text"));
      }
      if (kind === "edge") el.classList.toggle("zero", !m.edges[name]);
      if (kind === "objects") el.closest("a.state").classList.toggle("occupied", stateOf(m, name).objects > 0);
    }
    for (const t of changed) if (t && t.classList.contains("count")) fitInBox(t);
    const rev = panelMachine === "*"
      ? snap.machines.reduce((sum, m) => sum + m.rev, 0)
      : (machines.get(panelMachine) || { rev: panelRev }).rev;
    if (rev !== panelRev) {
      panelRev = rev;
      refreshPanel();
    }
  }

  // fitInBox narrows a state's count line to its box when its numbers
  // outgrew the room that the drawing left for them.
  function fitInBox(t) {
    const box = t.closest("a.state").querySelector("rect");
    const room = box.width.baseVal.value - 8;
    t.removeAttribute("textLength");
    if (t.getComputedTextLength() > room) {
      t.setAttribute("lengthAdjust", "spacingAndGlyphs");
      t.setAttribute("textLength", String(room));
    }
  }

  let reloading = false;
  async function reloadMachines() {
    if (reloading) return;
    reloading = true;
    try {
      const r = await fetch("/fragment/machines");
      if (r.ok) {
        const html = await r.text();
        const was = graphs.focused();
        main.innerHTML = html;
        graphs.setup(main);
        graphs.refocus(was, main);
      }
    } catch (e) {
      // The event stream reports the server as gone; the next snapshot retries.
    } finally {
      reloading = false;
    }
    select();
    if (latest) apply(latest);
  }

  // route reads the address's fragment.
  function route() {
    let parts = [];
    try {
      parts = location.hash.slice(1).split("/").map(decodeURIComponent);
    } catch (e) {
      parts = [];
    }
    panelURL = "";
    if (parts[0] === "state" && parts.length === 3) {
      panelURL = "/fragment/state?" + new URLSearchParams({ machine: parts[1], state: parts[2] });
    } else if (parts[0] === "object" && parts.length === 4) {
      panelURL = "/fragment/object?" + new URLSearchParams({ machine: parts[1], namespace: parts[2], name: parts[3] });
    } else if (parts[0] === "search" && parts.length === 2) {
      panelURL = "/fragment/search?" + new URLSearchParams({ q: parts[1] });
      if (search.value.trim() !== parts[1].trim()) search.value = parts[1];
    }
    // A search follows every machine, any other panel its own.
    panelMachine = panelURL ? (parts[0] === "search" ? "*" : parts[1]) : "";
    document.body.classList.toggle("panel-open", panelURL !== "");
    panelRev = -1;
    select();
    if (!panelURL) {
      panel.textContent = "";
      return;
    }
    loadPanel(true);
  }

  // select marks the state whose objects the panel lists.
  function select() {
    const parts = location.hash.slice(1).split("/").map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
    for (const a of main.querySelectorAll("a.state")) {
      const on = parts[0] === "state" && a.dataset.machine === parts[1] && a.dataset.state === parts[2];
      a.classList.toggle("selected", on);
      if (on) a.setAttribute("aria-current", "true");
      else a.removeAttribute("aria-current");
    }
  }

  // loadPanel fills the panel. When the user chose what it shows, the
  // focus moves to its heading; when it follows the cluster, the link that
  // had the focus keeps it.
  let loading = false;
  let again = false;
  let focusNext = false;
  let lastLoad = 0;
  async function loadPanel(chosen) {
    focusNext = focusNext || chosen;
    if (loading) {
      again = true;
      return;
    }
    chosen = focusNext;
    focusNext = false;
    loading = true;
    lastLoad = Date.now();
    const url = panelURL;
    try {
      const r = await fetch(url);
      const html = await r.text();
      if (url !== panelURL) return;
      const focused = panel.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
      if (r.ok) {
        panel.innerHTML = html;
      } else {
        panel.textContent = html;
      }
      const heading = panel.querySelector("h2");
      if (chosen && heading) {
        heading.tabIndex = -1;
        heading.focus({ preventScroll: true });
      } else if (focused) {
        const link = [...panel.querySelectorAll("a[href]")].find((a) => a.getAttribute("href") === focused);
        if (link) link.focus({ preventScroll: true });
      }
    } catch (e) {
      if (url === panelURL) panel.textContent = "The dashboard cannot be reached.";
    } finally {
      loading = false;
      if (again) {
        again = false;
        if (focusNext) loadPanel(false);
        else refreshPanel();
      }
    }
  }

  // refreshPanel loads the panel again after a change, once a second at most.
  let timer = 0;
  function refreshPanel() {
    if (!panelURL || timer) return;
    timer = setTimeout(() => {
      timer = 0;
      loadPanel();
    }, Math.max(0, 1000 - (Date.now() - lastLoad)));
  }

  // An object's events are not watched: its panel looks again now and then.
  setInterval(() => {
    if (panelURL.startsWith("/fragment/object")) refreshPanel();
  }, 5000);

  // The search box shows its results in the panel as one types, without
  // filling the browser's history with every letter.
  const search = document.getElementById("search");
  let typing = 0;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      const q = search.value.trim();
      const hash = q ? "#search/" + encodeURIComponent(q) : "";
      if (location.hash === hash) return;
      history.replaceState(null, "", hash || location.pathname);
      route();
    }, 120);
  });
  search.form.addEventListener("submit", (e) => e.preventDefault());

  // A skip link moves the focus without changing the address, whose
  // fragment says what the panel shows.
  for (const a of document.querySelectorAll("a.skip")) {
    a.addEventListener("click", (e) => {
      const target = document.getElementById(a.getAttribute("href").slice(1));
      if (!target) return;
      e.preventDefault();
      target.focus({ preventScroll: true });
      target.scrollIntoView({ block: "start" });
    });
  }

  // Closing the details gives the graphs the whole width again.
  function closePanel() {
    search.value = "";
    history.replaceState(null, "", location.pathname);
    route();
    main.focus({ preventScroll: true });
  }
  document.querySelector(".close-panel").addEventListener("click", closePanel);
  panel.parentElement.addEventListener("keydown", (e) => {
    if (e.key === "Escape") closePanel();
  });

  window.addEventListener("hashchange", route);
  graphs.setup(main);
  apply(JSON.parse(main.dataset.snapshot));
  route();

  const stream = new EventSource("/events");
  stream.addEventListener("snapshot", (e) => {
    status.textContent = "live";
    status.className = "up";
    apply(JSON.parse(e.data));
  });
  stream.addEventListener("error", () => {
    status.textContent = "reconnecting";
    status.className = "down";
  });
})();
