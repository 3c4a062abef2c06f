// spanviz's figure widget (anywidget module): one plotly.js figure drawn from the model's *state*.
//
// The Python side (spanviz/figure_widget.py) keeps the whole figure in two synced traits, `_data` (a list of
// trace objects; numpy arrays arrive as binary buffers {dtype, shape, buffer}) and `_layout`. A view draws
// whatever the model holds when plotly.js is ready and redraws with Plotly.react on every change of `_revision`
// (sent with the data), so an update that arrives before the view exists is never lost: the view draws the
// latest state. `data-revision` on the plot element names the revision drawn last.
//
// plotly.js (4.8 MB) is not part of this module: a shared model (`_plotly`, one per kernel) holds its source,
// and the first view on the page evaluates it once. This module stays a few kilobytes, so anywidget's
// model-initialisation deadline (2 s, after which it drops every message to the model) is met even on a
// busy machine. See PlotlyFigure's docstring for why that matters.

const CACHE = "__spanviz_plotly__";

function loadScript(source) {
  // A classic script (plotly.min.js is a UMD bundle). plotly.js assigns window.Plotly: keep the page's own.
  return new Promise((resolve, reject) => {
    const before = window.Plotly;
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const script = document.createElement("script");
    script.src = url;
    script.onload = () => {
      const Plotly = window.Plotly;
      window.Plotly = before;
      URL.revokeObjectURL(url);
      script.remove();
      resolve(Plotly);
    };
    script.onerror = () => reject(new Error("[spanviz] plotly.js failed to load"));
    document.head.appendChild(script);
  });
}

async function plotly(model) {
  const id = String(model.get("_plotly")).replace(/^IPY_MODEL_/, "");
  const holder = await model.widget_manager.get_model(id);
  const version = holder.get("version");
  const cache = (window[CACHE] = window[CACHE] || {});
  if (!cache[version]) cache[version] = loadScript(holder.get("source"));
  return cache[version];
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

function decoder() {
  // {dtype, shape, buffer: DataView} → a typed array (1-D) or an array of typed-array rows (2-D). An array whose
  // bytes did not change since the last state keeps its decoded object: Plotly.react then recomputes only the
  // traces whose data changed (one α moves a few heatmaps of ten), which is what keeps a redraw cheap.
  let cache = new Map();
  return (state) => {
    const next = new Map();
    const decode = (value, path) => {
      if (Array.isArray(value)) return value.map((v, i) => decode(v, `${path}/${i}`));
      if (value === null || typeof value !== "object") return value;
      if (value.buffer instanceof DataView && ARRAYS[value.dtype]) {
        const b = value.buffer;
        const key = `${path}:${value.dtype}:${value.shape}`;
        const hit = cache.get(key);
        if (hit && sameBytes(hit.bytes, b)) {
          next.set(key, hit);
          return hit.decoded;
        }
        const bytes = new Uint8Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
        const flat = new ARRAYS[value.dtype](bytes.buffer);
        const cols = value.shape[value.shape.length - 1];
        const decoded = value.shape.length < 2 ? flat
          : Array.from({ length: flat.length / cols }, (_, i) => flat.subarray(i * cols, (i + 1) * cols));
        next.set(key, { bytes, decoded });
        return decoded;
      }
      const out = {};
      for (const [k, v] of Object.entries(value)) out[k] = decode(v, `${path}/${k}`);
      return out;
    };
    const decoded = decode(state, "");
    cache = next;
    return decoded;
  };
}

async function render({ model, el }) {
  const Plotly = await plotly(model);
  const div = document.createElement("div");
  div.style.width = "100%";
  el.appendChild(div);
  const decode = decoder();
  let queued = false;
  let chain = Promise.resolve();
  const draw = () => {
    if (queued) return; // one redraw is waiting already: it will read the newest state
    queued = true;
    chain = chain.then(async () => {
      queued = false;
      const revision = model.get("_revision");
      const { data, layout } = decode({ data: model.get("_data"), layout: model.get("_layout") });
      await Plotly.react(div, data, layout, model.get("_config"));
      div.dataset.revision = String(revision);
    }).catch((e) => console.error("[spanviz] figure redraw failed", e));
  };
  model.on("change:_revision", draw);
  draw();
  const resized = new ResizeObserver(() => {
    if (div.offsetWidth > 0) Plotly.Plots.resize(div);
  });
  resized.observe(el);
  return () => {
    resized.disconnect();
    Plotly.purge(div);
  };
}

export default { render };
