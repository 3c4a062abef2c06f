// The blocks figure at new α, in the page: every α-dependent value is looked up in the table the kernel (or the
// static site's builder) made with spanviz.plots.span_blocks.span_block_alpha_table, the same functions that draw
// the figure in Python (span_block_color_range, span_block_opacity, span_block_title, span_block_bar_height,
// span_block_bar_reach). No arithmetic of the rule here: the α rule exists once, in Python.
//
// A classic script (no import/export): the widget's module (block_scaler.js, anywidget) is this text followed by
// its own, and the static site loads it with <script src> (file:// pages cannot import modules).
//
// spanAlphaState(data, layout, cells, alphas) → {data, layout} new objects, or null when an α is not one of the
// table's values (the caller leaves the drawing to the kernel). cells: names, orders, coloraxes, titles (the
// annotation index of each block's title, -1 none) and table.
function spanAlphaIndex(values, alpha) {
  for (let k = 0; k < values.length; k++) if (Math.abs(values[k] - alpha) < 1e-9) return k;
  return -1;
}

function spanAlphaState(data, layout, cells, alphas) {
  const { orders, table } = cells;
  if (!table) return null;
  const ks = [0, 1, 2, 3].map((o) => spanAlphaIndex(table.values[o], Number(alphas[o])));
  if (orders.some((o) => ks[o] < 0)) return null;
  const n = orders.length;
  const out = data.slice();
  const lay = { ...layout };
  orders.forEach((o, i) => {
    const opacity = table.opacity[o][ks[o]];
    if (out[i].opacity !== opacity) out[i] = { ...out[i], opacity };
  });
  for (const o of new Set(orders)) {
    const axis = cells.coloraxes[o];
    lay[axis] = { ...lay[axis], ...table.color[o][ks[o]] };
  }
  lay.shapes = (lay.shapes || []).slice();
  orders.forEach((o, i) => { lay.shapes[n + i] = { ...lay.shapes[n + i], y1: table.bar[i][ks[o]] }; });
  const top = Math.max(...orders.map((o, i) => table.reach[i][ks[o]]));
  lay.yaxis2 = { ...lay.yaxis2, range: [0, top > 0 ? top : table.empty] };
  lay.annotations = (lay.annotations || []).slice();
  cells.titles.forEach((at, i) => {
    if (at >= 0) lay.annotations[at] = { ...lay.annotations[at], text: table.title[i][ks[orders[i]]] };
  });
  return { data: out, layout: lay };
}
