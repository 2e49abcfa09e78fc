// abacus dashboard: charts the window aggregates served by the query HTTP API (api/v1/...). This
// module starts the page; the others each do one job (README.md lists them).
//
// Plain JavaScript modules with no build step, because the page is embedded into the Go binary as
// is. The modules import each other's functions in a cycle or two (a picker loads, a load renders,
// a render refills the quantile picker); that is safe because no module calls another while it is
// being loaded but this one, which the browser runs last, when all the others are ready.
//
// The chart plots exactly what the API returned; the plotted points are also written, as JSON, to
// <script id="plotted">, so tests and scripts can check the chart against the API.

import { $, state, view } from './state.js';
import { readURL } from './url.js';
import { api } from './api.js';
import { renderRangeButtons, toInput, whenMs } from './range.js';
import { setState, showError } from './status.js';
import { fillTopologies, renderChips } from './pickers.js';
import { bindControls, setChanged } from './controls.js';
import { showEmpty } from './render.js';

async function boot() {
  readURL();
  $('live').checked = view.live;
  $('interval').value = String(view.interval);
  $('utc').checked = view.utc;
  if (view.range === 'custom') {
    const now = Date.now();
    const f = whenMs(view.from, now);
    const t = whenMs(view.to, now);
    if (Number.isFinite(f)) $('from').value = toInput(f);
    if (Number.isFinite(t)) $('to').value = toInput(t);
  }
  renderRangeButtons();
  renderChips();
  bindControls();
  try {
    state.topologies = (await api('topologies')).topologies || [];
  } catch (e) {
    showError('Could not load the topologies.', e);
    setState('error');
    return;
  }
  if (!state.topologies.length) {
    showEmpty('This server serves no topology yet.');
    setState('ready');
    return;
  }
  fillTopologies();
  await setChanged();
}

boot();
