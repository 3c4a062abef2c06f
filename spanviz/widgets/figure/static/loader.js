// spanviz's figure widget, stage one (the anywidget module): a loader small and plain enough to always load. It
// imports the figure module proper (figure.js, synced in `_module`) once per page and hands the view to it; when that
// module fails to load or to render, the box says so in one line instead of staying empty (the console has the
// details). figure.css covers the last case, a box this loader never reached.

const MODULES = "__spanviz_figure_modules__";

function fail(el, what, error) {
  console.error(`[spanviz] ${what}`, error);
  const line = document.createElement("div");
  line.className = "spanviz-figure-status";
  line.dataset.kind = "error";
  line.setAttribute("role", "alert");
  const reason = String((error && error.message) || error).split("\n")[0].slice(0, 200);
  line.textContent = `⚠ figure not drawn: ${what} (${reason}) — run the cell again or reload the page`;
  el.replaceChildren(line);
}

function figureModule(source) {
  const cache = (window[MODULES] = window[MODULES] || new Map());
  if (!cache.has(source)) {
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const loading = import(url).finally(() => URL.revokeObjectURL(url));
    loading.catch(() => cache.delete(source)); // the next view tries again
    cache.set(source, loading);
  }
  return cache.get(source);
}

async function render(view) {
  let module;
  try {
    module = await figureModule(view.model.get("_module"));
  } catch (error) {
    fail(view.el, "its module did not load", error);
    return undefined;
  }
  try {
    return await module.default.render(view);
  } catch (error) {
    fail(view.el, "its module failed", error);
    return undefined;
  }
}

export default { render };
