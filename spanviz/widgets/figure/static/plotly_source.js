// spanviz's plotly.js for the page (PlotlySource in figure_widget.py): the anywidget module of one widget per kernel,
// never displayed, whose state holds plotly.js (one binary buffer, `_source`) and its version. The state arrives with
// the message that creates the model — before the first figure's, and with nothing asked of the kernel, which may
// be busy running the next cells for half a minute. `initialize` hands the source to the page's slot for that
// version, where figure.js takes it, and starts evaluating it at once (window.__spanviz_plotly__[version], figure.js's
// cache of evaluated plotly.js): the kernel goes on with the next cells, the page evaluates plotly.js meanwhile
// (about a second of the page's main thread on 2 cores), and the first figure that arrives is drawn without that wait.
//
// The slot protocol (figure.js has the same few lines): window.__spanviz_plotly_sources__[version] =
// {promise, resolve, reject}; whoever comes first creates it; promise resolves to the source text.

const SOURCES = "__spanviz_plotly_sources__";
const CACHE = "__spanviz_plotly__";

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

// figure.js's loadScript, the same lines: plotly.min.js is a UMD bundle, run as a classic script; the page's own
// window.Plotly is kept.
function loadScript(source) {
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

function evaluate(version, text) {
  const cache = (window[CACHE] = window[CACHE] || {});
  if (cache[version]) return; // a figure (figure.js) or an earlier PlotlySource got there first
  const loading = loadScript(text);
  cache[version] = loading;
  loading.catch(() => {
    if (cache[version] === loading) delete cache[version]; // figure.js tries again and reports the error
  });
}

function initialize({ model }) {
  const version = model.get("_version");
  const from = slot(version);
  const error = model.get("_error");
  const source = model.get("_source");
  if (error) from.reject(new Error(error));
  else if (!source || !source.byteLength) from.reject(new Error("the kernel sent no plotly.js"));
  else {
    const text = new TextDecoder().decode(source);
    from.resolve(text);
    evaluate(version, text);
  }
}

export default { initialize };
