// The view in the page's query string and back. Everything the user chooses lives there, so a
// view can be bookmarked or shared, and tests can open the page on a given view.

import { MAX_ENTITIES, currentSet, isGlobal, kindOf, state, uniq, view } from './state.js';
import { RANGES } from './range.js';

export function readURL() {
  const q = new URLSearchParams(location.search);
  view.topology = q.get('topology') || '';
  view.set = q.get('set') || '';
  view.aggregate = q.get('agg') || '';
  view.quantile = q.get('q') || '';
  view.entities = uniq(q.getAll('entity').flatMap(splitEntities)).slice(0, MAX_ENTITIES);
  const r = q.get('range');
  if (r && (RANGES[r] || r === 'custom')) view.range = r;
  if (q.has('from') || q.has('to')) {
    view.range = 'custom';
    view.from = q.get('from') || '';
    view.to = q.get('to') || '';
  }
  if (q.has('live')) view.live = q.get('live') !== '0' && q.get('live') !== 'false';
  const every = parseInt(q.get('every'), 10);
  if ([5, 10, 30, 60].includes(every)) view.interval = every;
  view.utc = q.get('tz') === 'utc';
}

export function writeURL() {
  const q = new URLSearchParams();
  if (view.topology) q.set('topology', view.topology);
  if (view.set) q.set('set', view.set);
  if (view.aggregate) q.set('agg', view.aggregate);
  // Before the first answer the aggregate's kind is unknown: keep the quantile the URL asked for.
  if (view.quantile && (!state.lastBody || kindOf(state.lastBody) === 'quantiles')) q.set('q', view.quantile);
  if (!isGlobal(currentSet())) for (const e of view.entities) q.append('entity', e);
  if (view.range === 'custom') {
    if (view.from) q.set('from', view.from);
    if (view.to) q.set('to', view.to);
  } else {
    q.set('range', view.range);
  }
  if (!view.live) q.set('live', '0');
  if (view.interval !== 10) q.set('every', String(view.interval));
  if (view.utc) q.set('tz', 'utc');
  history.replaceState(null, '', '?' + q.toString());
}

// splitEntities reads a list as the URL and the entity input both take it: "a,b" or "a, b".
export function splitEntities(s) {
  return s.split(',').map((e) => e.trim()).filter(Boolean);
}
