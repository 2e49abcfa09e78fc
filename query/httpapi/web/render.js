// Turns a windows answer into what the chart card and the table show: each entity's points, the
// title, and the empty card's reasons when there is nothing to draw.

import { $, WINDOW_LIMIT, currentSet, isGlobal, kindOf, view } from './state.js';
import { writeURL } from './url.js';
import { fillQuantiles } from './pickers.js';
import { draw, hideChart, writePlotted } from './chart.js';
import { renderTable } from './table.js';

// valueOf gives the charted number of a window's aggregate, or null when it has none.
function valueOf(w, kind) {
  const v = w.values ? w.values[view.aggregate] : undefined;
  if (kind === 'quantiles') {
    if (!v || typeof v !== 'object') return null;
    const q = v[view.quantile];
    return typeof q === 'number' ? q : null;
  }
  return typeof v === 'number' ? v : null;
}

// showEmpty replaces the chart with a message; the table is cleared unless the caller filled it.
export function showEmpty(text, keepTable) {
  $('empty').textContent = text;
  $('empty').hidden = false;
  hideChart();
  if (!keepTable) renderTable([]);
  renderTitle('number');
  $('chart-foot').textContent = '';
}

export function renderTitle(kind) {
  const s = currentSet();
  let title = view.aggregate || '—';
  if (kind === 'quantiles' && view.quantile) title += ' · ' + $('quantile').selectedOptions[0]?.textContent;
  $('chart-title').textContent = title;
  $('chart-subtitle').textContent = s
    ? view.set + ' · ' + s.window + (s.rollup ? ' · ' + (isGlobal(s) ? 'global rollup' : 'by ' + s.dimension) : '') + ' · a point per window, at its start'
    : '';
}

export function render(body, range) {
  const kind = kindOf(body);
  $('quantile-field').hidden = kind !== 'quantiles';
  if (kind === 'quantiles') {
    const keys = new Set();
    for (const ws of Object.values(body.entities || {})) for (const w of ws) {
      const v = w.values && w.values[view.aggregate];
      if (v && typeof v === 'object') Object.keys(v).forEach((k) => keys.add(k));
    }
    fillQuantiles([...keys].sort((a, b) => parseFloat(a) - parseFloat(b)));
  }
  renderTitle(kind);
  if (kind === 'bytes') {
    showEmpty('“' + view.aggregate + '” holds bytes (a user-defined aggregation), which cannot be charted. Choose another aggregate.');
    writePlotted(null);
    writeURL();
    return;
  }

  // Per entity, the windows that have a value, oldest first.
  const perEntity = view.entities.map((e) => {
    const ws = (body.entities && body.entities[e]) || [];
    return ws.map((w) => ({ start: w.start, end: w.end, value: valueOf(w, kind), final: w.final, live: w.live, revision: w.revision }))
      .filter((p) => p.value != null)
      .sort((a, b) => a.start - b.start);
  });
  const truncated = view.entities.filter((e) => ((body.entities && body.entities[e]) || []).length >= WINDOW_LIMIT);
  $('chart-foot').textContent = truncated.length
    ? 'Only the newest ' + WINDOW_LIMIT.toLocaleString() + ' windows of ' + truncated.join(', ') + ' are shown: choose a shorter time range to see all.'
    : '';

  const total = perEntity.reduce((n, ps) => n + ps.length, 0);
  renderTable(perEntity);
  if (!total) {
    const what = view.range === 'custom' ? 'in this time range' : 'in the last ' + view.range;
    showEmpty('No windows with “' + view.aggregate + '” for ' + (view.entities.length === 1 ? 'this entity' : 'these entities') + ' ' + what + '. Widen the time range, or check the entity names.', true);
    renderTitle(kind);
    writePlotted(perEntity);
    writeURL();
    return;
  }

  $('empty').hidden = true;
  draw(perEntity, range, total);
  writeURL();
}
