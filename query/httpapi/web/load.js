// Fetching the chosen windows, and the live refresh that fetches them again.

import { WINDOW_LIMIT, currentKind, state, view } from './state.js';
import { api } from './api.js';
import { currentRange } from './range.js';
import { clearError, setState, showError } from './status.js';
import { render, renderTitle, showEmpty } from './render.js';
import { hasChart, writePlotted } from './chart.js';

let inflight = null;
let loadSeq = 0; // an answer to any load but the newest is dropped
let timer = 0;

// schedule starts the next refresh; a hidden tab waits until it is shown again (the
// visibilitychange handler in controls.js loads then).
export function schedule() {
  clearTimeout(timer);
  if (view.live && !document.hidden) timer = setTimeout(() => load(), view.interval * 1000);
}

export async function load() {
  clearTimeout(timer);
  if (inflight) inflight.abort();
  const seq = ++loadSeq;
  if (!view.set || !view.entities.length) {
    inflight = null;
    state.lastBody = null;
    showEmpty(view.set ? 'Choose one or more entities to chart: type a name, or browse the entities of this set.' : 'This topology has no aggregate set.');
    writePlotted(null);
    setState('ready');
    return;
  }
  const ctl = new AbortController();
  inflight = ctl;
  const range = currentRange();
  const params = Object.assign({
    topology: view.topology, set: view.set, entity: view.entities.join(','), limit: String(WINDOW_LIMIT), order: 'newest',
  }, range.params);
  let body;
  try {
    body = await api('windows', params, ctl.signal);
  } catch (e) {
    if (e.name === 'AbortError' || seq !== loadSeq) return;
    showError('Could not load the windows.', e);
    // A chart already drawn stays (older data beats none, and the status says Error); with none,
    // say why the card is empty.
    if (!hasChart()) showEmpty('Nothing to chart: the windows could not be loaded (see the message above).');
    renderTitle(currentKind());
    setState('error');
    schedule(); // keep trying while live: the server may come back
    return;
  }
  if (seq !== loadSeq) return;
  inflight = null;
  clearError();
  state.lastBody = body;
  state.lastRange = range;
  state.lastUpdated = new Date();
  render(body, range);
  setState('ready');
  schedule();
}
