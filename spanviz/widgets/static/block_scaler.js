// spanviz's α rescaling in the page (anywidget module of spanviz/widgets/block_scaler.py).
//
// An α slider only rescales cached blocks, so the page does it itself: this module listens to the α sliders'
// models and writes the rescaled traces into the blocks figure's model (spanviz/widgets/figure_widget.py: the traits
// `_data` and `_layout` hold the whole figure, its views redraw on `change:_revision`), without waiting for the
// kernel. The rule is the kernel's (spanviz.plots.spans.span_block_shown and span_block_title): heatmap i shows
// α_order·z_i, or at α = 0 the unscaled z_i at opacity `_dim`; the coloured bars are rel_i·|α_order|; each block's
// subplot title ends in ×α. The kernel stores the same state afterwards without asking for another draw.
//
// `_cells` belong to one figure revision (`_revision`): while the kernel is drawing another preset, layer or head
// the revisions differ and the page leaves the figure alone (the kernel's own drawing has the new α already).

function floats(value) {
  // {dtype: "float32" | "float64", shape, buffer: DataView} → a typed array (copied: offsets need not be aligned)
  const b = value.buffer;
  const bytes = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  return value.dtype === "float64" ? new Float64Array(bytes) : new Float32Array(bytes);
}

function label(alpha) {
  return String(Number(alpha.toPrecision(6))); // Python's f"{alpha:g}" for the slider's values
}

async function bind(model, state) {
  const manager = model.widget_manager;
  const get = (ref) => manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
  for (const s of state.sliders) s.off("change:value", state.apply);
  state.figure = await get(model.get("_figure"));
  state.sliders = await Promise.all(model.get("_sliders").map(get));
  for (const s of state.sliders) s.on("change:value", state.apply);
}

function rescale(model, state) {
  const { figure, sliders } = state;
  const cells = model.get("_cells");
  if (!figure || !cells || !cells.z || model.get("_revision") !== figure.get("_revision")) return;
  if (!state.base || state.base.cells !== cells) {
    state.base = { cells, z: cells.z.map(floats), rel: Array.from(floats(cells.rel)) };
  }
  const alphas = sliders.map((s) => Number(s.get("value")));
  const dim = model.get("_dim");
  const data = figure.get("_data").slice();
  cells.z.forEach((spec, i) => {
    const a = alphas[cells.orders[i]];
    // float32 × float32(α), rounded once to float32: the kernel's numpy product bit for bit, so the figure's
    // decoder sees the unchanged blocks' bytes unchanged and plotly redraws only the blocks whose α moved
    const fa = Math.fround(a);
    const z = a === 0 || a === 1 ? state.base.z[i] : state.base.z[i].map((v) => v * fa);
    data[i] = { ...data[i], z: { dtype: "float32", shape: spec.shape, buffer: new DataView(z.buffer) },
                opacity: a === 0 ? dim : 1 };
  });
  data[cells.bar] = { ...data[cells.bar],
                      y: state.base.rel.map((r, i) => r * Math.abs(alphas[cells.orders[i]])) };
  const layout = { ...figure.get("_layout") };
  layout.annotations = (layout.annotations || []).slice();
  cells.titles.forEach((at, i) => {
    if (at < 0) return;
    const order = cells.orders[i];
    layout.annotations[at] = { ...layout.annotations[at],
                               text: `${cells.names[i]} (order ${order}) ×${label(alphas[order])}` };
  });
  figure.set({ _data: data, _layout: layout }); // local only: the kernel stores the same state itself
  figure.trigger("change:_revision", figure, figure.get("_revision")); // the figure's views redraw now
}

export default {
  async initialize({ model }) {
    const state = { figure: null, sliders: [], base: null };
    state.apply = () => rescale(model, state);
    await bind(model, state);
    model.on("change:_figure change:_sliders", () => bind(model, state));
    model.set("live", true);
    model.save_changes();
  },
};
