// What the controls do when used: each change updates the view and the URL, then loads, re-renders
// the last answer, or reschedules the refresh, whichever that change needs.

import { $, DEFAULT_ENTITIES, GLOBAL_KEY, currentSet, isGlobal, keyName, state, view } from './state.js';
import { writeURL } from './url.js';
import { currentRange, fromInput, renderRangeButtons, toInput } from './range.js';
import { clearError, showError, updateStatus } from './status.js';
import {
  addTypedEntities, fillAggregates, fillSets, loadEntities, renderChips, renderEntityOptions,
} from './pickers.js';
import { load, schedule } from './load.js';
import { render } from './render.js';
import { forgetZoom, rebuildOnNextDraw, resizeChart, showWholeRange } from './chart.js';

export function bindControls() {
  $('topology').addEventListener('change', async (e) => {
    const before = keyName(currentSet());
    view.topology = e.target.value;
    fillSets();
    if (keyName(currentSet()) !== before) view.entities = [];
    await setChanged();
  });
  $('set').addEventListener('change', async (e) => {
    const before = keyName(currentSet());
    view.set = e.target.value;
    // Entities are no regions: keys chosen for a set keyed by something else are dropped.
    if (keyName(currentSet()) !== before) view.entities = [];
    fillAggregates();
    await setChanged();
  });
  $('aggregate').addEventListener('change', (e) => {
    view.aggregate = e.target.value;
    writeURL();
    if (state.lastBody) render(state.lastBody, state.lastRange);
  });
  $('quantile').addEventListener('change', (e) => {
    view.quantile = e.target.value;
    writeURL();
    if (state.lastBody) render(state.lastBody, state.lastRange);
  });
  $('entity-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      addTypedEntities();
    }
  });
  $('entity-input').addEventListener('input', (e) => {
    // Picking from the datalist fills the whole value at once: add it without waiting for Enter.
    if ((!e.inputType || e.inputType === 'insertReplacementText') && state.knownEntities.includes(e.target.value)) addTypedEntities();
  });
  $('entity-add').addEventListener('click', addTypedEntities);
  $('entity-filter').addEventListener('input', renderEntityOptions);
  $('ranges').addEventListener('click', (e) => {
    const b = e.target.closest('button');
    if (!b) return;
    if (b.dataset.range === 'custom') {
      // Start the custom range from what is on screen.
      const r = currentRange();
      $('from').value = toInput(Number.isFinite(r.fromMs) ? r.fromMs : Date.now() - 3600e3);
      $('to').value = toInput(Number.isFinite(r.toMs) ? r.toMs : Date.now());
      view.range = 'custom';
      renderRangeButtons();
      return;
    }
    view.range = b.dataset.range;
    view.from = view.to = '';
    forgetZoom();
    renderRangeButtons();
    writeURL();
    load();
  });
  $('apply-range').addEventListener('click', () => {
    const from = fromInput($('from').value);
    const to = fromInput($('to').value);
    if (!Number.isFinite(from)) return showError('Custom range:', 'choose when the range starts.');
    if (Number.isFinite(to) && to <= from) return showError('Custom range:', 'the end must be after the start.');
    view.from = String(from);
    view.to = Number.isFinite(to) ? String(to) : '';
    forgetZoom();
    writeURL();
    load();
  });
  $('live').addEventListener('change', (e) => {
    view.live = e.target.checked;
    writeURL();
    updateStatus();
    schedule();
  });
  $('interval').addEventListener('change', (e) => {
    view.interval = parseInt(e.target.value, 10);
    writeURL();
    schedule();
  });
  $('refresh').addEventListener('click', () => load());
  $('utc').addEventListener('change', (e) => {
    view.utc = e.target.checked;
    rebuildOnNextDraw();
    writeURL();
    if (view.range === 'custom') {
      const r = currentRange();
      if (Number.isFinite(r.fromMs)) $('from').value = toInput(r.fromMs);
      if (Number.isFinite(r.toMs)) $('to').value = toInput(r.toMs);
    }
    if (state.lastBody) render(state.lastBody, state.lastRange);
    updateStatus();
  });
  $('error-close').addEventListener('click', clearError);
  $('reset-zoom').addEventListener('click', showWholeRange);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && view.live) load();
  });
  window.addEventListener('resize', resizeChart);
}

// setChanged starts over for a newly chosen set: its entities (or its one global key), a new
// chart, and a load.
export async function setChanged() {
  forgetZoom();
  rebuildOnNextDraw();
  state.lastBody = null;
  if (isGlobal(currentSet())) {
    // One key and nothing to pick: the chart reads it as the one entity.
    view.entities = [GLOBAL_KEY];
    state.knownEntities = [GLOBAL_KEY];
    renderChips();
    writeURL();
    await load();
    return;
  }
  writeURL();
  await loadEntities();
  if (!view.entities.length) {
    view.entities = state.knownEntities.slice(0, DEFAULT_ENTITIES);
    renderChips();
    writeURL();
  }
  await load();
}
