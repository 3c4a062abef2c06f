// spanviz's static explorable: draws every recorded view of the page and redraws a view when one of its controls
// moves, from the states the builder recorded (spanviz/site/build.py; JSON in the page, nothing fetched). The
// α sliders go through span_alpha.js (the widget's α lookup), the masks through masks.js.
//
// Drawn plots are kept. A figure view is a holder (div.sv-view, position: relative) of the plots it has drawn,
// one per setting of the controls it depends on (the key: those controls' indices), at most `capacity` of them
// (the least recently shown is redrawn or dropped first). One is shown, in the flow, so the holder has its
// height; the others are class sv-hidden (visibility: hidden, position: absolute over the shown one: plotly cannot
// size display: none elements) and, once drawn, sv-kept (content-visibility: hidden: the browser keeps their
// layout and skips their style, so showing one costs a few ms, not a restyle of its whole SVG). A control moved
// to a setting drawn before swaps which plot is shown: no plotly call. A setting not drawn yet is drawn hidden
// into the least recently shown plot, then shown (plotly redraws a plot faster than it makes one: it keeps its
// axes); new plots are made when the page is idle, up to `capacity` (or for an input when the view has no plot
// to spare). Views with WebGL traces (scatter3d, mesh3d…) keep two plots (to and fro between two values finds
// both drawn; browsers cap the live WebGL contexts of a page at about 16). HTML views (captions) are set each
// time: they are cheap.
//
// Idle drawing: after the page's first drawing, and whenever the controls have rested REST_MS, the settings one
// step to either side of each control are drawn (hidden) for each view that depends on it, except in a WebGL view:
// it would drop the setting shown before (two plots); it only draws its second plot ahead, once, at the next step
// of its first control (a new WebGL context is slow to make: a second in software GL). One drawing per idle
// slot (requestIdleCallback, else setTimeout), sections on screen first; an input stops it and the next rest
// starts it over. So a drag onto the next value usually finds its plot drawn.
//
// For the benchmark and tests: window.__sv.first (ms from navigation to the first figure drawn),
// window.__sv.timings (per input: control, ms from the input event to the redraw painted, drawn_before: whether
// every figure it shows was drawn already, drawn: the views it had to draw), window.__sv.idle (the idle drawing
// has nothing left to do), window.__sv.sections[id].divs[view] (the plot shown now) and .views[view] (its plots).
(function () {
  // the states as JSON texts, each parsed when first drawn (a page holds thousands; most are never drawn)
  const texts = JSON.parse(document.getElementById("sv-pool").textContent);
  const parsed = new Map();
  const pool = (i) => { if (!parsed.has(i)) parsed.set(i, JSON.parse(texts[i])); return parsed.get(i); };
  const sv = (window.__sv = { first: null, ready: false, idle: false, timings: [], errors: [], sections: {} });
  const config = { responsive: true, displaylogo: false };
  const KEEP = 12; // plots kept per view, at least (a view also keeps room for every neighbour of its setting)
  const KEEP_WEBGL = 2; // plots kept per view with WebGL traces (each holds a WebGL context)
  const REST_MS = 300; // no input for this long: the controls have rested, idle drawing starts
  const WEBGL = /3d|gl|surface|cone|volume|streamtube|parcoords|splom|mapbox/; // trace types drawn with WebGL
  let clock = 0; // ticks at each use of a plot: the least recently used has the smallest `used`

  function painted() { return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0))); }

  // plotly.js builds (spanviz/widgets/figure/plotly_js.py): the page's script tag loaded the build of its first figure
  // (body data-plotly, window.Plotly); a view whose traces need another (view.plotly, a file name: the 3-D toy's
  // gl3d build) loads it when first drawn, once per page, as a classic script whose window.Plotly is taken and the
  // page's own put back. Each view draws, redraws and purges its plots with its own build (v.P).
  const PAGE_PLOTLY = document.body.dataset.plotly;
  const builds = {};
  function plotlyFor(view) {
    if (!view.plotly || view.plotly === PAGE_PLOTLY) return Promise.resolve(window.Plotly);
    if (!builds[view.plotly]) {
      builds[view.plotly] = new Promise((resolve, reject) => {
        const before = window.Plotly;
        const script = document.createElement("script");
        script.src = view.plotly;
        script.onload = () => {
          const P = window.Plotly;
          window.Plotly = before;
          if (P && P !== before) resolve(P); else reject(new Error(`${view.plotly} defined no Plotly`));
        };
        script.onerror = () => reject(new Error(`${view.plotly} did not load`));
        document.head.appendChild(script);
      });
    }
    return builds[view.plotly];
  }

  function setup(section) {
    const spec = JSON.parse(section.querySelector("script.sv-spec").textContent);
    const id = section.dataset.x;
    const idx = {}, byName = {};
    spec.controls.forEach((c) => { idx[c.name] = c.index; byName[c.name] = c; });
    const controls = document.createElement("div");
    controls.className = "sv-controls";
    if (spec.controls.length) section.appendChild(controls);
    function depends(view, name) {
      return view.on.includes(name) || (view.alpha && view.alpha.controls.includes(name)) ||
        (view.masks && ["n_local", "window", "context"].includes(name));
    }
    const divs = {}, views = {};
    const all = spec.views.map((view) => {
      const el = document.createElement("div");
      el.dataset.view = view.name;
      section.appendChild(el);
      if (view.kind !== "figure") { el.className = "sv-html"; divs[view.name] = el; return { view, el }; }
      el.className = "sv-view";
      const deps = spec.controls.filter((c) => depends(view, c.name)).map((c) => c.name);
      const any = view.states[view.on.map((n) => idx[n]).join("|")] || Object.values(view.states)[0];
      const gl = any !== undefined && pool(any[0]).some((t) => WEBGL.test(t.type || ""));
      // plots: {key, div, ready (promise of its drawing), busy (being drawn), used}; want: the key asked for last
      const v = { view, holder: el, deps, gl, capacity: gl ? KEEP_WEBGL : Math.max(KEEP, 2 * deps.length + 4),
                  plots: [], shown: null, want: null };
      views[view.name] = { gl, capacity: v.capacity, plots: () => v.plots.map((p) => p.div) };
      return v;
    });
    const keyOf = (v, at) => v.deps.map((n) => at[n]).join("|");

    // the data and layout of a view at the settings `at` (control name → index), null when not recorded
    function figure(view, at) {
      const key = view.on.map((n) => at[n]).join("|");
      const st = view.states[key];
      if (st === undefined) return null;
      const value = (name) => byName[name].values[at[name]];
      let data = pool(st[0]), layout = pool(st[1]);
      if (view.alpha) {
        const drawn = spanAlphaState(data, layout, view.alpha.cells[key], view.alpha.controls.map(value));
        if (drawn) ({ data, layout } = drawn);
      }
      if (view.masks) {
        const m = view.masks;
        const labels = m.labels[`${at.n_local}|${at.window}`];
        ({ data, layout } = svMasksState(data, layout, m, value("n_local"), value("window"), value("context"), labels));
      }
      // each plot gets its own layout (plotly writes ranges into it): a zoom in one plot stays in that plot
      return { data, layout: { ...structuredClone(layout), autosize: true } };
    }

    // The plot that will hold a new key: the least recently used one neither shown nor being drawn, or a new one
    // while the view is under capacity and the page is idle (`idle`), or when there is none to spare.
    function plotFor(v, key, idle) {
      const free = v.plots.filter((p) => p !== v.shown && !p.busy);
      if (!free.length || (idle && v.plots.length < v.capacity)) {
        const div = document.createElement("div");
        div.className = "sv-fig sv-hidden";
        div.dataset.view = v.view.name;
        v.holder.appendChild(div);
        const p = { key, div, ready: Promise.resolve(), busy: false, used: 0 };
        v.plots.push(p);
        return p;
      }
      const old = free.reduce((a, b) => (a.used <= b.used ? a : b));
      old.key = key;
      old.div.classList.remove("sv-kept"); // plotly measures what it draws: the plot needs its layout
      return old;
    }
    function drawInto(v, p, at) {
      const fig = figure(v.view, at);
      let done;
      if (fig === null) {
        if (p.div._fullLayout) v.P.purge(p.div);
        p.div.textContent = "(this setting was not recorded)";
        done = Promise.resolve();
      } else {
        if (!p.div._fullLayout) p.div.textContent = "";
        done = plotlyFor(v.view).then((P) => { v.P = P; return P.react(p.div, fig.data, fig.layout, config); });
      }
      p.busy = true;
      p.ready = Promise.resolve(done).finally(() => {
        p.busy = false;
        if (p !== v.shown) p.div.classList.add("sv-kept");
      });
      return p;
    }
    function show(v, p) {
      p.used = ++clock;
      if (v.shown === p) return;
      p.div.classList.remove("sv-hidden", "sv-kept");
      if (v.shown) v.shown.div.classList.add("sv-hidden", "sv-kept");
      v.shown = p;
      divs[v.view.name] = p.div;
      while (v.plots.length > v.capacity) { // over capacity (every plot was busy when one was needed): drop the LRU
        const free = v.plots.filter((q) => q !== v.shown && !q.busy);
        if (!free.length) break;
        const old = free.reduce((a, b) => (a.used <= b.used ? a : b));
        if (old.div._fullLayout) v.P.purge(old.div);
        old.div.remove();
        v.plots.splice(v.plots.indexOf(old), 1);
      }
    }

    // Show a view at the controls' settings now. Returns {before: whether its plot was drawn already, promise}.
    function render(v) {
      if (!v.holder) {
        const st = v.view.states[v.view.on.map((n) => idx[n]).join("|")];
        v.el.innerHTML = st === undefined ? "(this setting was not recorded)" : pool(st);
        return { before: true, promise: Promise.resolve() };
      }
      const key = keyOf(v, idx);
      v.want = key;
      let p = v.plots.find((q) => q.key === key);
      const before = p !== undefined && !p.busy;
      if (p === undefined) p = drawInto(v, plotFor(v, key, false), { ...idx });
      p.used = ++clock;
      const promise = p.ready.then(() => { if (v.want === key && p.key === key) show(v, p); });
      return { before, promise };
    }

    // Idle drawing's work for this section: one function per neighbouring setting of a view; each draws it and
    // returns true, or returns false when it was drawn already.
    function ahead(v, at) {
      return () => {
        const key = keyOf(v, at);
        if (v.plots.some((q) => q.key === key)) return false;
        const p = drawInto(v, plotFor(v, key, true), at);
        p.used = ++clock;
        return true;
      };
    }
    function neighbours() {
      const tasks = [];
      for (const v of all.filter((w) => w.gl && w.plots.length < w.capacity && w.deps.length)) {
        const name = v.deps[0], k = idx[name] + 1 < byName[name].labels.length ? idx[name] + 1 : idx[name] - 1;
        if (k >= 0) tasks.push(ahead(v, { ...idx, [name]: k }));
      }
      for (const c of spec.controls) {
        for (const step of [1, -1]) {
          const k = idx[c.name] + step;
          if (k < 0 || k >= c.labels.length) continue;
          const at = { ...idx, [c.name]: k };
          for (const v of all) {
            if (v.holder && !v.gl && v.deps.includes(c.name)) tasks.push(ahead(v, at));
          }
        }
      }
      return tasks;
    }

    for (const c of spec.controls) {
      const label = document.createElement("label");
      label.className = "sv-control";
      label.dataset.control = c.name;
      label.append(c.label + " ");
      let input;
      const out = document.createElement("output");
      if (c.kind === "select") {
        input = document.createElement("select");
        c.labels.forEach((text, i) => { const o = new Option(text, String(i)); input.add(o); });
        input.value = String(c.index);
      } else {
        input = document.createElement("input");
        Object.assign(input, { type: "range", min: "0", max: String(c.labels.length - 1), step: "1" });
        input.value = String(c.index);
        out.textContent = c.labels[c.index];
      }
      input.name = c.name;
      input.addEventListener("input", (event) => {
        // from the event's creation: a drawing under way when it came (idle drawing included) counts too
        const t0 = event.timeStamp > 0 ? event.timeStamp : performance.now();
        inputArrived();
        idx[c.name] = Number(input.value);
        out.textContent = c.kind === "select" ? "" : c.labels[idx[c.name]];
        const mine = all.filter((v) => depends(v.view, c.name));
        const shown = mine.map(render);
        const drawn = mine.filter((v, i) => v.holder && !shown[i].before).map((v) => v.view.name);
        Promise.all(shown.map((s) => s.promise))
          .then(painted)
          .then(() => sv.timings.push({ control: `${id}:${c.name}`, ms: performance.now() - t0,
                                        drawn_before: drawn.length === 0, drawn }))
          .catch((e) => sv.errors.push(String(e)));
      });
      label.append(input, out);
      controls.appendChild(label);
    }
    sv.sections[id] = { spec, idx, divs, views };
    return { section, draws: all.map((v) => () => render(v).promise), neighbours };
  }

  // Idle drawing (see the top): started when the controls have rested, stopped by an input (epoch moves on).
  let sections = [], epoch = 0, restTimer = null;
  const idleSlot = (f) => (window.requestIdleCallback
    ? requestIdleCallback(f, { timeout: 1000 }) : setTimeout(f, 50));
  function inputArrived() {
    epoch++;
    sv.idle = false;
    clearTimeout(restTimer);
    restTimer = setTimeout(drawNeighbours, REST_MS);
  }
  function drawNeighbours() {
    const mine = ++epoch;
    const onScreen = (s) => { const r = s.section.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; };
    const order = [...sections.filter(onScreen), ...sections.filter((s) => !onScreen(s))];
    const tasks = order.flatMap((s) => s.neighbours());
    const next = () => {
      if (mine !== epoch) return;
      while (tasks.length) {
        try { if (tasks.shift()()) { idleSlot(next); return; } } catch (e) { sv.errors.push(String(e)); }
      }
      sv.idle = true;
    };
    idleSlot(next);
  }

  // One view at a time, the browser painting in between: the first figure shows as soon as it is drawn.
  async function drawAll() {
    sections = Array.from(document.querySelectorAll("section.sv-x")).map(setup);
    for (const { section, draws } of sections) {
      for (const draw of draws) {
        await draw();
        if (sv.first === null && section.querySelector(".js-plotly-plot")) {
          await painted();
          sv.first = performance.now();
        }
      }
    }
    await painted();
  }
  drawAll().catch((e) => sv.errors.push(String(e))).finally(() => { sv.ready = true; drawNeighbours(); });
})();
