// What the page says about itself: the error banner, the status in the top bar, and
// <body data-state> (loading, ready or error), which tests wait on.

import { $, state, view } from './state.js';
import { describe } from './api.js';
import { fmtClock } from './format.js';

export function showError(title, err) {
  $('error-title').textContent = title;
  $('error-detail').textContent = describe(err);
  $('error').hidden = false;
}

export function clearError() {
  $('error').hidden = true;
}

export function setState(s) {
  document.body.dataset.state = s;
  updateStatus();
}

export function updateStatus() {
  const st = $('status');
  st.classList.toggle('live', view.live);
  let text;
  if (document.body.dataset.state === 'error') text = 'Error';
  else if (!state.lastUpdated) text = 'Loading…';
  else text = (view.live ? 'Live' : 'Paused') + ' · updated ' + fmtClock(state.lastUpdated.getTime());
  $('status-text').textContent = text;
}

// A bug in the page would otherwise leave it saying "Loading…" for ever.
window.addEventListener('error', (e) => {
  showError('The page hit a bug:', e.message);
  setState('error');
});
