// spanviz's α rescaling in the page (anywidget module of spanviz/widgets/block_scaler.py).
//
// An α slider changes no trace data of the blocks figure, only a few layout values, so the page does it itself:
// this module listens to the α sliders' models and writes the new values into the blocks figure's model
// (spanviz/widgets/figure_widget.py: the traits `_data` and `_layout` hold the whole figure, its views redraw on
// `change:_revision`), without waiting for the kernel. The values are the kernel's: this module's text is
// preceded by span_alpha.js (spanAlphaState), which looks every α-dependent value up in the table the kernel made
// with spanviz.plots.span_blocks.span_block_alpha_table (colour range and opacity per order, title, scaled bar and
// axis reach per block). With the trace data unchanged, plotly.js redraws only colours, shapes and text (no full
// replot).
// The kernel stores the same state afterwards without asking for another draw.
//
// `_cells` belong to one figure revision (`_revision`): while the kernel is drawing another preset, layer or head
// the revisions differ and the page leaves the figure alone (the kernel's own drawing has the new α already).
//
// Picks in the page: every state the kernel drew is kept here with its cells, under its pick's key ("preset|layer|
// head", the dropdowns' labels). When the dropdowns name a kept state, the page draws it at once with the sliders'
// α. The kernel draws the same pick moments later, the same state: figure.js sees nothing changed and leaves the
// plot as it is. Once the page is live the kernel also sends the states of the picks it has not drawn yet
// (`_prefetched`, BlockScaler.prefetch), kept here the same way: a first pick is drawn at once too. A pick kept
// nowhere (a large model or context, see spanviz.widgets.spans.PREFETCH_MAX_STATES) waits for the kernel.

async function bind(model, state) {
  for (const s of state.sliders) s.off("change:value", state.apply);
  for (const p of state.pickers) p.off("change:index", state.pick);
  if (state.figure) state.figure.off("change:_revision", state.drawn);
  state.figure = await state.get(model.get("_figure"));
  state.sliders = await Promise.all(model.get("_sliders").map(state.get));
  state.pickers = await Promise.all((model.get("_pickers") || []).map(state.get));
  for (const s of state.sliders) s.on("change:value", state.apply);
  for (const p of state.pickers) p.on("change:index", state.pick);
  state.figure.on("change:_revision", state.drawn);
  state.kernelCells();
}

// The figure's views (figure.js) redraw on `change:_local` too: a state the page set itself, without a new revision.
function show(figure, data, layout) {
  figure.set({ _data: data, _layout: layout, _local: (figure.get("_local") || 0) + 1 }); // local only
}

// The cells of the state in the figure's model now: the kernel's, when they belong to its last drawing (kept for
// later picks), else none (the kernel is drawing another pick and its cells are on their way).
function kernelCells(model, state) {
  const { figure } = state;
  const cells = model.get("_cells");
  if (!figure || !cells || !cells.orders || model.get("_revision") !== figure.get("_revision")) {
    state.cells = null;
    return;
  }
  state.cells = cells;
  if (cells.key) state.kept.set(cells.key, { data: figure.get("_data"), layout: figure.get("_layout"), cells });
}

// States of picks the kernel has not drawn yet, sent ahead (BlockScaler.prefetch): kept like the ones it drew. A state
// the kernel drew is never replaced by a prefetched one (they are the same, unless α moved since).
function prefetched(model, state) {
  for (const [key, kept] of Object.entries(model.get("_prefetched") || {})) {
    if (!state.kept.has(key)) state.kept.set(key, kept);
  }
}

function pickKey(pickers) {
  return pickers.map((p) => (p.get("_options_labels") || [])[p.get("index")]).join("|");
}

function pick(state) {
  const { figure, pickers } = state;
  const key = pickKey(pickers);
  const kept = state.kept.get(key);
  if (!figure || !kept || (state.cells && state.cells.key === key)) return;
  state.cells = kept.cells;
  show(figure, kept.data, kept.layout); // local only, as below
  rescale(state);
}

function rescale(state) {
  const { figure, sliders, cells } = state;
  if (!figure || !cells) return;
  const alphas = sliders.map((s) => Number(s.get("value")));
  const drawn = spanAlphaState(figure.get("_data"), figure.get("_layout"), cells, alphas); // span_alpha.js
  if (!drawn) return; // an α outside the table: the kernel draws (it always keeps the state itself)
  show(figure, drawn.data, drawn.layout); // local only: the kernel stores the same state itself
}

// The sliders', pickers' and figure's models come through anywidget's host API (`host.getModel`, anywidget >= 0.11:
// nothing JupyterLab-specific; the listeners it hands out end with this view); before 0.11, the widget manager.
export default {
  async render({ model, host }) {
    // the traits hold ipywidgets' references ("IPY_MODEL_<id>"); the host takes anywidget's ("anywidget:<id>")
    const id = (ref) => String(ref).replace(/^IPY_MODEL_/, "");
    const get = host && host.getModel ? (ref) => host.getModel(`anywidget:${id(ref)}`)
      : (ref) => model.widget_manager.get_model(id(ref));
    const state = { get, figure: null, sliders: [], pickers: [], cells: null, kept: new Map() };
    state.apply = () => rescale(state);
    state.pick = () => pick(state);
    state.kernelCells = () => kernelCells(model, state);
    // a new revision from the kernel: its cells follow (set_cells) — until then α waits for them
    state.drawn = () => { if (model.get("_revision") !== state.figure.get("_revision")) state.cells = null; };
    const rebind = () => bind(model, state);
    const keep = () => prefetched(model, state);
    await bind(model, state);
    model.on("change:_figure change:_sliders change:_pickers", rebind);
    model.on("change:_cells change:_revision", state.kernelCells);
    keep();
    model.on("change:_prefetched", keep);
    model.set("live", true);
    model.save_changes();
    return () => {
      for (const s of state.sliders) s.off("change:value", state.apply);
      for (const p of state.pickers) p.off("change:index", state.pick);
      if (state.figure) state.figure.off("change:_revision", state.drawn);
      model.off("change:_figure change:_sliders change:_pickers", rebind);
      model.off("change:_cells change:_revision", state.kernelCells);
      model.off("change:_prefetched", keep);
    };
  },
};
