// spanviz's static explorable: draws every recorded view of the page and redraws a view when one of its controls
// moves, from the states the builder recorded (spanviz/site/build.py; JSON in the page, nothing fetched). The
// α sliders go through span_alpha.js (the widget's α lookup), the masks through masks.js. Timings for the
// benchmark: window.__sv.first (ms from navigation to the first figure drawn), window.__sv.timings (per input:
// control and ms from the input event to the redraw painted).
(function () {
  // the states as JSON texts, each parsed when first drawn (a page holds thousands; most are never drawn)
  const texts = JSON.parse(document.getElementById("sv-pool").textContent);
  const parsed = new Map();
  const pool = (i) => { if (!parsed.has(i)) parsed.set(i, JSON.parse(texts[i])); return parsed.get(i); };
  const sv = (window.__sv = { first: null, ready: false, timings: [], errors: [], sections: {} });
  const config = { responsive: true, displaylogo: false };

  function painted() { return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0))); }

  function setup(section) {
    const spec = JSON.parse(section.querySelector("script.sv-spec").textContent);
    const id = section.dataset.x;
    const idx = {}, byName = {};
    spec.controls.forEach((c) => { idx[c.name] = c.index; byName[c.name] = c; });
    const controls = document.createElement("div");
    controls.className = "sv-controls";
    if (spec.controls.length) section.appendChild(controls);
    const divs = {};
    for (const view of spec.views) {
      const div = document.createElement("div");
      div.className = view.kind === "figure" ? "sv-fig" : "sv-html";
      div.dataset.view = view.name;
      section.appendChild(div);
      divs[view.name] = div;
    }
    function value(name) { return byName[name].values[idx[name]]; }
    function depends(view, name) {
      return view.on.includes(name) || (view.alpha && view.alpha.controls.includes(name)) ||
        (view.masks && ["n_local", "window", "context"].includes(name));
    }
    function render(view) {
      const key = view.on.map((n) => idx[n]).join("|");
      const st = view.states[key];
      const div = divs[view.name];
      if (st === undefined) { div.textContent = "(this setting was not recorded)"; return Promise.resolve(); }
      if (view.kind === "html") { div.innerHTML = pool(st); return Promise.resolve(); }
      let data = pool(st[0]), layout = pool(st[1]);
      if (view.alpha) {
        const drawn = spanAlphaState(data, layout, view.alpha.cells[key], view.alpha.controls.map(value));
        if (drawn) ({ data, layout } = drawn);
      }
      if (view.masks) {
        const m = view.masks;
        const labels = m.labels[`${idx.n_local}|${idx.window}`];
        ({ data, layout } = svMasksState(data, layout, m, value("n_local"), value("window"), value("context"), labels));
      }
      return Plotly.react(div, data, { ...layout, autosize: true }, config);
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
      input.addEventListener("input", () => {
        const t0 = performance.now();
        idx[c.name] = Number(input.value);
        out.textContent = c.kind === "select" ? "" : c.labels[idx[c.name]];
        Promise.all(spec.views.filter((v) => depends(v, c.name)).map(render))
          .then(painted)
          .then(() => sv.timings.push({ control: `${id}:${c.name}`, ms: performance.now() - t0 }))
          .catch((e) => sv.errors.push(String(e)));
      });
      label.append(input, out);
      controls.appendChild(label);
    }
    sv.sections[id] = { spec, idx, divs };
    return spec.views.map((view) => () => render(view));
  }

  // One view at a time, the browser painting in between: the first figure shows as soon as it is drawn.
  async function drawAll() {
    const renders = Array.from(document.querySelectorAll("section.sv-x")).map((section) => ({ section, render: setup(section) }));
    for (const { section, render } of renders) {
      for (const draw of render) {
        await draw();
        if (sv.first === null && section.querySelector(".js-plotly-plot")) { await painted(); sv.first = performance.now(); }
      }
    }
    await painted();
  }
  drawAll().catch((e) => sv.errors.push(String(e))).finally(() => { sv.ready = true; });
})();
