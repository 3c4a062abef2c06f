// spanviz's figure widget, stage two (loader.js imports it from the model's `_module` once per page): one plotly.js
// figure drawn from the model's *state*.
//
// The messages between kernel and page (state, plotly.js, spanviz-seen, spanviz-settled) are described once, in
// spanviz/widgets/figure/__init__.py; what follows says how this module plays its part.
//
// The Python side (spanviz/widgets/figure_widget.py) keeps the whole figure in two synced traits, `_data` (a list of
// trace objects; numpy arrays arrive as binary buffers {dtype, shape, buffer}) and `_layout`. A view draws
// whatever the model holds when plotly.js is ready and redraws with Plotly.react on every change of `_revision`
// (sent with the data), so an update that arrives before the view exists is never lost: the view draws the
// latest state. `data-revision` on the plot element names the revision drawn last. Another module of the page
// (block_scaler.js) sets a state of its own with `_local` (a counter, never synced): a redraw, no new revision.
//
// plotly.js (1.5–4.8 MB: the smallest build that draws the figure's traces, plotly_js.py) is not part of this module:
// it comes once per kernel and build in the state of another widget, PlotlySource (plotly_source.js), created when
// spanviz.widgets is imported in the kernel (else just before the first figure that needs that build), and is
// evaluated once per page and build (`_plotly_version`, e.g. "4.1.1+cartesian"), by plotly_source.js as soon as it
// arrives (the kernel still importing and computing), else here. Nothing is asked of the kernel for a first
// drawing — a kernel running the notebook's next cells answers only once it is idle, half a minute later. Only
// when no PlotlySource hands the source over within ASK_KERNEL_AFTER_MS does the view ask its kernel with a custom
// message. The anywidget module (loader.js) stays tiny, so anywidget's model-initialisation deadline (2 s, after
// which it drops every message to the model) is met even on a busy machine. See PlotlyFigure's docstring for why
// that matters. Only anywidget's stable model API is used (get, on, off, send): no other widget model is looked up.
//
// What a student sees besides the figure (figure.css styles it):
// - one line inside the box while plotly.js loads, and an error line when plotly.js or a redraw fails (the
//   console has the details); loader.js does the same when this module fails to load or to render;
// - a busy state from the moment a control of the same panel is moved until the kernel's redraw is drawn (or the
//   kernel says the input is handled: a "spanviz-settled" message), so a redraw queued behind training never looks
//   like a dead control: `aria-busy="true"` on the view at once, and the plot dimmed with "updating…" once the
//   redraw has taken BUSY_SHOWN_AFTER_MS. A quick redraw never dims: no flicker, and no frame spent painting a
//   dimmed plot and its animation (in JupyterLab such a frame took 20–35 ms of the page's one main thread, and
//   the kernel's answer waited behind it).
//
// Back-pressure: every view tells its kernel which revision the page has taken in (a "spanviz-seen" message, when
// the revision arrives, drawn or not: a hidden figure is not drawn). A kernel that streams training updates sends
// the next one only then (PlotlyFigure.behind), so several training notebooks never send the page more than it
// takes in: a backlog would delay a slider's redraw behind it and, past the server's ping timeout (90 s without an
// answer), drop the kernel's connection ("Connection lost, reconnecting") with the messages in flight.

// ------------------------------------------------------------------------------- plotly.js, once per page
const CACHE = "__spanviz_plotly__";
const PLOTLY_REQUEST = "spanviz-plotly-js";
const SETTLED = "spanviz-settled";
const SEEN = "spanviz-seen";

function loadScript(source) {
  // A classic script (plotly.min.js is a UMD bundle). plotly.js assigns window.Plotly: keep the page's own.
  return new Promise((resolve, reject) => {
    const before = window.Plotly;
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const script = document.createElement("script");
    script.src = url;
    const done = () => {
      const Plotly = window.Plotly;
      window.Plotly = before;
      URL.revokeObjectURL(url);
      script.remove();
      return Plotly;
    };
    script.onload = () => {
      const Plotly = done();
      if (Plotly && Plotly !== before && typeof Plotly.react === "function") resolve(Plotly);
      else reject(new Error("plotly.js ran but defined no Plotly.react"));
    };
    script.onerror = () => {
      done();
      reject(new Error("plotly.js failed to load"));
    };
    document.head.appendChild(script);
  });
}

function requestSource(model) {
  // The kernel answers {kind: PLOTLY_REQUEST} with the source as one binary buffer (UTF-8).
  return new Promise((resolve, reject) => {
    const answer = (msg, buffers) => {
      if (!msg || msg.kind !== PLOTLY_REQUEST) return;
      model.off("msg:custom", answer);
      if (!buffers || !buffers.length) reject(new Error(msg.error || "the kernel sent no plotly.js"));
      else resolve(new TextDecoder().decode(buffers[0]));
    };
    model.on("msg:custom", answer);
    model.send({ kind: PLOTLY_REQUEST });
  });
}

// The page's plotly.js sources by version: {promise, resolve, reject}, filled by PlotlySource's module
// (plotly_source.js, the same few lines) or by the kernel's answer, whichever comes first.
const SOURCES = "__spanviz_plotly_sources__";
const ASK_KERNEL_AFTER_MS = 3000;

function slot(version) {
  const slots = (window[SOURCES] = window[SOURCES] || {});
  if (!slots[version]) {
    const entry = {};
    entry.promise = new Promise((resolve, reject) => Object.assign(entry, { resolve, reject }));
    entry.promise.catch(() => {}); // a rejection is reported by the figure that awaits it
    slots[version] = entry;
  }
  return slots[version];
}

function source(model, version) {
  const from = slot(version);
  const ask = setTimeout(() => requestSource(model).then(from.resolve, from.reject), ASK_KERNEL_AFTER_MS);
  return from.promise.finally(() => clearTimeout(ask));
}

function plotly(model) {
  const version = model.get("_plotly_version");
  const cache = (window[CACHE] = window[CACHE] || {});
  if (!cache[version]) {
    const loading = source(model, version).then(loadScript);
    cache[version] = loading;
    loading.catch(() => {
      if (cache[version] !== loading) return;
      delete cache[version]; // the next view asks its kernel again
      delete window[SOURCES][version];
    });
  }
  return cache[version];
}

// --------------------------------------------------------------------------- the line inside the box
function statusLine(el) {
  const line = document.createElement("div");
  line.className = "spanviz-figure-status";
  el.appendChild(line);
  const show = (kind, text) => {
    line.dataset.kind = kind;
    line.textContent = text;
    line.hidden = !text;
    if (kind === "error") line.setAttribute("role", "alert");
    else line.removeAttribute("role");
  };
  return {
    note: (text) => show("note", text),
    error: (text) => show("error", `⚠ ${text}`),
    clear: () => show("", ""),
  };
}

function describe(e) {
  return String((e && e.message) || e).split("\n")[0].slice(0, 200);
}

// ------------------------------------------------------------------------------------------ busy state
// One listener per page notices the inputs a person makes on widget controls (a slider moved, an option
// picked, a button pressed) and tells every spanviz figure of the same panel (`.spanviz-panel`, else the same
// cell output) that a redraw is on its way, before the kernel has even read the input.
const INPUTS = "__spanviz_inputs__";
const BUSY = "spanviz-busy";
const SLIDER_KEYS = new Set(["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End"]);

function watchInputs() {
  if (window[INPUTS]) return;
  window[INPUTS] = true;
  const control = (target) => target instanceof Element && target.closest(".jupyter-widgets")
    && !target.closest(".spanviz-figure") ? target : null;
  // `at`: the input event's time stamp (performance.now()'s clock), handed on to each figure's busy state
  const mark = (target, at) => {
    const scope = target.closest(".spanviz-panel") || target.closest(".jp-OutputArea-output")
      || target.closest(".widget-box");
    if (!scope) return;
    for (const fig of scope.querySelectorAll(".spanviz-figure")) {
      fig.dispatchEvent(new CustomEvent(BUSY, { detail: at }));
    }
  };
  const readout = (slider) => slider.querySelector(".widget-readout")?.textContent;
  // A slider counts when its readout changed (a key press at the end of the range, or a click on the handle
  // that does not move it, sends nothing to the kernel, so nothing will come back).
  const ifMoved = (slider, target, at) => {
    const before = readout(slider);
    return () => {
      if (before === undefined || readout(slider) !== before) {
        mark(target, at);
        return true;
      }
      return false;
    };
  };
  document.addEventListener("keydown", (event) => {
    const target = control(event.target);
    const slider = target && SLIDER_KEYS.has(event.key) && target.closest(".noUi-handle") && target.closest(".widget-slider");
    if (slider) setTimeout(ifMoved(slider, target, event.timeStamp), 0);
  }, true);
  document.addEventListener("pointerdown", (event) => {
    const target = control(event.target);
    const slider = target && target.closest(".noUi-target") && target.closest(".widget-slider");
    if (!slider) return;
    const moved = ifMoved(slider, target, event.timeStamp);
    const check = () => {
      if (moved()) stop();
    };
    const stop = () => {
      document.removeEventListener("pointermove", check, true);
      document.removeEventListener("pointerup", last, true);
    };
    const last = () => setTimeout(() => {
      check();
      stop();
    }, 0);
    document.addEventListener("pointermove", check, true);
    document.addEventListener("pointerup", last, true);
  }, true);
  document.addEventListener("change", (event) => {
    const target = control(event.target);
    if (target && target.matches("select, input[type=checkbox], input[type=radio]")) mark(target, event.timeStamp);
  }, true);
  document.addEventListener("click", (event) => {
    const target = control(event.target);
    const button = target && target.closest("button");
    if (!button || button.disabled) return;
    if (button.classList.contains("widget-toggle-button") && button.classList.contains("mod-active")) return;
    mark(button, event.timeStamp);
  }, true);
}

const BUSY_SHOWN_AFTER_MS = 150; // a redraw quicker than this is not worth a dimmed plot (figure.css)
const BUSY_GIVE_UP_MS = 60000; // no answer at all: stop claiming a redraw is coming
const BUSY_SLOW_MS = 10000;
const BUSY_SHOWN = "spanviz-busy-shown";

function busyState(el) {
  const badge = document.createElement("div");
  badge.className = "spanviz-figure-busy";
  badge.textContent = "updating…";
  el.appendChild(badge);
  let timers = [];
  let since = -Infinity; // when the last input was made
  const set = (busy) => {
    timers.forEach(clearTimeout);
    timers = [];
    if (busy) {
      el.setAttribute("aria-busy", "true");
      badge.textContent = "updating…";
      timers = [setTimeout(() => el.classList.add(BUSY_SHOWN), BUSY_SHOWN_AFTER_MS),
                setTimeout(() => { badge.textContent = "still updating… (a busy machine)"; }, BUSY_SLOW_MS),
                setTimeout(() => set(false), BUSY_GIVE_UP_MS)];
    } else {
      el.removeAttribute("aria-busy");
      el.classList.remove(BUSY_SHOWN);
    }
  };
  el.addEventListener(BUSY, (event) => {
    const now = performance.now(); // an input's time stamp on another clock (none in the future) reads as now
    since = typeof event.detail === "number" && event.detail <= now ? event.detail : now;
    set(true);
  });
  // done(readAt): a redraw of the state read at `readAt` has been drawn. A state read before the last input cannot
  // hold the answer to it (a redraw still in flight when a person moves the control again), so it does not end the
  // busy state; a state read after it (the kernel's answer, or the page's own, e.g. block_scaler.js) and the
  // kernel's "settled" message (no readAt) do.
  return { done: (readAt = Infinity) => { if (readAt >= since) set(false); },
           dispose: () => timers.forEach(clearTimeout) };
}

const ARRAYS = {
  float64: Float64Array, float32: Float32Array, int32: Int32Array, int16: Int16Array, int8: Int8Array,
  uint32: Uint32Array, uint16: Uint16Array, uint8: Uint8Array,
};

function sameBytes(cached, view) {
  if (cached.byteLength !== view.byteLength) return false;
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  for (let i = 0; i < bytes.length; i++) if (cached[i] !== bytes[i]) return false;
  return true;
}

const primitive = (v) => v === null || typeof v !== "object";

function decoder() {
  // The model's state → what Plotly.react takes: {dtype, shape, buffer: DataView} becomes a typed array (1-D) or an
  // array of typed-array rows (2-D). Whatever did not change since the last state keeps the object it was decoded
  // to last time: an array whose bytes are the same, a value equal to the last one at the same place, and any list
  // or object whose parts all kept theirs (checked bottom-up against the last *state*, not against the decoded
  // objects, which plotly.js writes its defaults into). Plotly.react compares data arrays — and layout objects it
  // filled in — by reference: a new object with the same content counts as new data, or as a changed axis type, and
  // makes plotly.js recompute and redraw the whole figure. With the old objects kept, only the traces whose data
  // changed are recomputed, and a change of layout values alone (the spans blocks when an α slider moves: colour
  // ranges, rectangles, titles) is redrawn without a full replot: ~15 ms instead of ~60 ms in JupyterLab.
  // `unchanged`: the whole state equals the last one (e.g. the kernel's redraw of what block_scaler.js drew already).
  let cache = new Map();
  return (state) => {
    const next = new Map();
    const decode = (value, path) => { // → [decoded, unchanged since the last state]
      const old = cache.get(path);
      let entry;
      let same = false;
      if (value === null || typeof value !== "object") {
        same = old !== undefined && old.leaf && Object.is(old.value, value);
        entry = same ? old : { leaf: true, value, decoded: value };
      } else if (Array.isArray(value) && value.every(primitive)) { // a list of numbers or strings: one entry
        same = old !== undefined && old.list !== undefined && old.list.length === value.length
          && value.every((v, i) => Object.is(v, old.list[i]));
        entry = same ? old : { list: value, decoded: value.slice() };
      } else if (value.buffer instanceof DataView && ARRAYS[value.dtype]) {
        const b = value.buffer;
        const kind = `${value.dtype}:${value.shape}`;
        same = old !== undefined && old.kind === kind && sameBytes(old.bytes, b);
        if (!same) {
          const bytes = new Uint8Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
          const flat = new ARRAYS[value.dtype](bytes.buffer);
          const cols = value.shape[value.shape.length - 1];
          const decoded = value.shape.length < 2 ? flat
            : Array.from({ length: flat.length / cols }, (_, i) => flat.subarray(i * cols, (i + 1) * cols));
          entry = { kind, bytes, decoded };
        }
      } else {
        const keys = Object.keys(value);
        const shape = `${Array.isArray(value)}:${(Array.isArray(value) ? keys : keys.slice().sort()).join("\u0000")}`;
        const decoded = Array.isArray(value) ? [] : {};
        same = old !== undefined && old.shape === shape;
        for (const k of keys) {
          const [part, kept] = decode(value[k], `${path}/${k}`);
          decoded[k] = part;
          same = same && kept;
        }
        if (!same) entry = { shape, decoded };
      }
      const kept = same ? old : entry;
      next.set(path, kept);
      return [kept.decoded, same];
    };
    const [decoded, unchanged] = decode(state, "");
    cache = next;
    return { decoded, unchanged };
  };
}

// ------------------------------------------------------------------------------------------------ view
async function render({ model, el }) {
  watchInputs();
  const status = statusLine(el);
  const busy = busyState(el);
  const div = document.createElement("div");
  div.style.width = "100%";
  el.appendChild(div);
  let chain = Promise.resolve();
  const onMessage = (msg) => {
    if (msg && msg.kind === SETTLED) chain = chain.then(() => busy.done()); // after the redraws sent before it
  };
  model.on("msg:custom", onMessage);
  const received = () => model.send({ kind: SEEN, revision: model.get("_revision") });
  model.on("change:_revision", received);
  received();
  let Plotly;
  status.note("loading plotly.js…");
  try {
    Plotly = await plotly(model);
  } catch (e) {
    console.error("[spanviz] plotly.js did not load", e);
    status.error(`figure not drawn: plotly.js did not load (${describe(e)}) — run the cell again or reload the page`);
    busy.dispose();
    return () => {
      model.off("msg:custom", onMessage);
      model.off("change:_revision", received);
    };
  }
  status.clear();
  const decode = decoder();
  let drawnOk = false; // the last decoded state is the one on screen (its Plotly.react succeeded)
  let drawnWidth = -1; // the width the figure was last laid out at (its height is the layout's own)
  let queued = false;
  let stale = false;
  // A figure that is not rendered (a notebook in a background tab, a collapsed output) is not redrawn: with several
  // notebooks training, their live figures would otherwise keep the page's one main thread busy, and the figure
  // in front would wait behind them. It draws the newest state as soon as it is rendered again.
  const hidden = () => (div.checkVisibility ? !div.checkVisibility() : div.getClientRects().length === 0);
  const draw = () => {
    if (hidden()) {
      stale = true;
      return;
    }
    stale = false;
    if (queued) return; // one redraw is waiting already: it will read the newest state
    queued = true;
    chain = chain.then(async () => {
      queued = false;
      const readAt = performance.now();
      try {
        const revision = model.get("_revision");
        const { decoded, unchanged } = decode(
          { data: model.get("_data"), layout: model.get("_layout"), config: model.get("_config") });
        const { data, layout, config } = decoded;
        // A responsive figure fills its element's height, and this element has none of its own: without a height in
        // the layout the figure would collapse to nothing at its first update. plotly's default height, then.
        if (layout.height === undefined) layout.height = 450;
        // Every tick label is drawn, none hidden for reaching past the figure's edge (plotly.js's default for linear
        // axes: to find such labels it measures every label's box at every full redraw, ~7 ms of a spans pick's
        // 70–80 ms Plotly.react in one in-page A/B in JupyterLab on 2 cores). spanviz's figures leave margins for
        // their labels.
        for (const key of Object.keys(layout)) {
          const axis = layout[key];
          if (/^[xy]axis\d*$/.test(key) && axis && axis.ticklabeloverflow === undefined) axis.ticklabeloverflow = "allow";
        }
        // The very state on screen already, at the same width (a page-side redraw the kernel repeats): even a
        // Plotly.react that finds nothing to change runs plotly.js's defaults over the whole figure (~10 ms for the
        // spans blocks). A figure shown again at another width is laid out again.
        // The plotly.js build this state's traces need (`_plotly_version`, set with them): a figure that changes
        // from 2-D traces to 3-D ones (or back) is drawn afresh by the other build, which the page evaluates once.
        const build = await plotly(model);
        if (build !== Plotly) {
          if (div._fullLayout) Plotly.purge(div);
          Plotly = build;
          drawnOk = false;
        }
        if (!(unchanged && drawnOk && div.offsetWidth === drawnWidth)) {
          drawnOk = false;
          await Plotly.react(div, data, layout, config);
          drawnOk = true;
        }
        drawnWidth = div.offsetWidth;
        div.dataset.revision = String(revision);
        status.clear();
      } catch (e) {
        console.error("[spanviz] figure redraw failed", e);
        status.error(`figure not redrawn: ${describe(e)}`);
      }
      busy.done(readAt);
    });
  };
  model.on("change:_revision", draw);
  model.on("change:_local", draw); // a state another module of the page set (block_scaler.js), no new revision
  draw();
  const shown = () => {
    if (stale && !hidden()) draw();
  };
  // Only a new width needs plotly.js to lay the figure out again: a redraw that changes the figure's own height (the
  // spans blocks of a preset with fewer orders) resizes this element too, and Plots.resize would replot the whole
  // figure 100 ms later, up to three times in a row (~50 ms each, measured in JupyterLab), in the way of the next input.
  const resized = new ResizeObserver(() => {
    if (stale) shown(); // shown again: display: none ended
    else if (div.offsetWidth > 0 && div.dataset.revision !== undefined && div.offsetWidth !== drawnWidth) {
      drawnWidth = div.offsetWidth;
      Plotly.Plots.resize(div);
    }
  });
  resized.observe(el);
  const seen = new IntersectionObserver(shown); // shown again in other ways (content-visibility, scrolling)
  seen.observe(el);
  return () => {
    resized.disconnect();
    seen.disconnect();
    busy.dispose();
    model.off("msg:custom", onMessage);
    model.off("change:_revision", received);
    model.off("change:_revision", draw);
    model.off("change:_local", draw);
    Plotly.purge(div);
  };
}

export default { render };
