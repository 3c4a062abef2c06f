"""The figure front end in one room: what every panel draws into, in Python and in the page.

Files: :mod:`.widget` (:class:`~.widget.PlotlyFigure`, the state-synced figure widget, and
:class:`~.widget.PlotlySource`, which carries plotly.js once per kernel and build), :mod:`.plotly_js` (which
plotly.js build a figure needs: cartesian, gl3d or full; the partial ones in ``static/vendor``), :mod:`.view`
(:class:`~.view.FigureView`: the widget, or a static figure where custom widgets render unreliably; the panels'
small layout helpers),
:mod:`.block_scaler` (notebook 01's α sliders redrawn in the page), and ``static/``: ``loader.js`` (the anywidget
module, a few lines), ``figure.js`` (the figure), ``plotly_source.js``, ``block_scaler.js``, ``span_alpha.js`` (the α
table lookup, shared with the static site) and ``figure.css``.

The messages between a figure's kernel and its views — described here once (``figure.js`` and :mod:`.widget`
name the constants):

* **state, kernel → page**: the traits ``_data`` (the traces; numpy arrays as binary buffers ``{dtype, shape,
  buffer}``), ``_layout`` and ``_revision`` (a counter sent with the data). A view draws whatever state the model
  holds when plotly.js is ready and redraws on every new ``_revision``; ``data-revision`` on the plot element names
  the revision drawn last. ``_local`` (a page-side counter, never synced) asks for a redraw of a state another
  page module set (``block_scaler.js``).
* **plotly.js**: in the state of the kernel's :class:`~.widget.PlotlySource` widget of each build (the cartesian one
  created when ``spanviz.widgets`` is imported in a kernel, any other just before the first figure that needs it;
  never displayed), keyed by ``_plotly_version`` (:func:`.plotly_js.version_key`: the build a figure's traces need,
  set with them) and evaluated by the page as soon as it arrives; only when none arrives within 3 s does a view
  send ``{"kind": "spanviz-plotly-js"}`` (``PLOTLY_REQUEST``) and the kernel answers with the source as one binary
  buffer.
* **"spanviz-seen"** (``SEEN``, page → kernel, ``{"kind", "revision"}``): the page has taken in that revision (drawn
  or not: a hidden figure is not drawn). A panel streaming training updates sends the next one only then
  (:meth:`~.widget.PlotlyFigure.behind`): back-pressure, so a busy page is never sent a backlog.
* **"spanviz-settled"** (``SETTLED``, kernel → page): the input of a control has been handled; the view leaves its
  busy state even when the handler changed nothing (:meth:`~.widget.PlotlyFigure.settled`).
"""
