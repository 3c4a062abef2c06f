// The per-head attention masks of notebook 02 in the page: the rule of spanviz.local_global.head_mask_mod
// (head h < n_local is local: 0 <= i - j < p; the others global: j <= i) and the block means of
// spanviz.plots.common.block_mean (T > max_cells: the mean of f×f blocks, f = ceil(T / max_cells)), laid out in the
// columns of the recorded figure of this T (spanviz.plots.local_global.head_masks_data: H masks side by side, empty
// columns between them). tests/browser/test_site_browser.py checks these z against Python's for several settings.
// A classic script (file:// pages cannot import modules).
function svMaskAllowed(h, nLocal, p, i, j) {
  return j <= i && (h >= nLocal || i - j < p);
}

// z (n rows × cols) of one row of the masks figure, null between heads. T: positions shown (the zoom row: its n).
function svMaskRow(H, nLocal, p, T, maxCells, cols) {
  const f = Math.max(1, Math.ceil(T / maxCells));
  const n = Math.ceil(T / f);
  const gap = H > 1 ? Math.round((cols - H * n) / (H - 1)) : 0;
  const z = [];
  for (let bi = 0; bi < n; bi++) z.push(new Array(cols).fill(null));
  for (let h = 0; h < H; h++) {
    const off = h * (n + gap);
    for (let bi = 0; bi < n; bi++) {
      const i1 = Math.min(T, (bi + 1) * f);
      for (let bj = 0; bj < n; bj++) {
        const j1 = Math.min(T, (bj + 1) * f);
        let sum = 0, count = 0;
        for (let i = bi * f; i < i1; i++) {
          for (let j = bj * f; j < j1; j++) { count++; if (svMaskAllowed(h, nLocal, p, i, j)) sum++; }
        }
        z[bi][off + bj] = sum / count;
      }
    }
  }
  return z;
}

// The recorded figure of context T with the masks of (nLocal, p) and the heads' titles `labels` (H strings).
function svMasksState(data, layout, spec, nLocal, p, T, labels) {
  const out = data.map((trace, r) => {
    const cols = trace.x.length;
    const shown = r === 0 ? T : Math.min(spec.zoom, T);
    const maxCells = r === 0 ? spec.max_cells : shown;
    return { ...trace, z: svMaskRow(spec.H, nLocal, p, shown, maxCells, cols) };
  });
  const annotations = (layout.annotations || []).slice();
  labels.forEach((text, h) => { annotations[h] = { ...annotations[h], text }; });
  return { data: out, layout: { ...layout, annotations } };
}
