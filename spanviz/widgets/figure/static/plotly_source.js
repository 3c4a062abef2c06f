// spanviz's plotly.js for the page (PlotlySource in figure_widget.py): the anywidget module of one widget per kernel,
// never displayed, whose state holds plotly.js (one binary buffer, `_source`) and its version. The state arrives with
// the message that creates the model — before the first figure's, and with nothing asked of the kernel, which may
// be busy running the next cells for half a minute. `initialize` hands the source to the page's slot for that
// version, where figure.js takes it (and evaluates it once per page and version).
//
// The slot protocol (figure.js has the same few lines): window.__spanviz_plotly_sources__[version] =
// {promise, resolve, reject}; whoever comes first creates it; promise resolves to the source text.

const SOURCES = "__spanviz_plotly_sources__";

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

function initialize({ model }) {
  const from = slot(model.get("_version"));
  const error = model.get("_error");
  const source = model.get("_source");
  if (error) from.reject(new Error(error));
  else if (!source || !source.byteLength) from.reject(new Error("the kernel sent no plotly.js"));
  else from.resolve(new TextDecoder().decode(source));
}

export default { initialize };
