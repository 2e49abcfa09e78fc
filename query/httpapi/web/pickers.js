// The pickers: topology, aggregate set, aggregate and quantile, filled from what the server serves,
// and the entities (chips, the typed entry, the browser of the set's entities), labelled with what
// the set is keyed by.

import {
  $, ENTITY_LIST_LIMIT, MAX_ENTITIES, currentSet, currentTopology, isGlobal, keyName, state, uniq, view,
} from './state.js';
import { splitEntities, writeURL } from './url.js';
import { api } from './api.js';
import { color } from './format.js';
import { showError } from './status.js';
import { load } from './load.js';
import { rebuildOnNextDraw } from './chart.js';

function option(sel, value, label) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = label == null ? value : label;
  sel.appendChild(o);
}

// setLabel is how the set picker names a set: rollups say by what.
function setLabel(s) {
  if (isGlobal(s)) return s.name + ' (global)';
  if (s.rollup) return s.name + ' (by ' + s.dimension + ')';
  return s.name;
}

// labelKeys names the entity picker after the set's keys: "Entities", or the dimension.
function labelKeys() {
  const s = currentSet();
  const global = isGlobal(s);
  const dim = keyName(s);
  const entity = dim === 'entity';
  $('entity-field').hidden = global;
  $('set-global').hidden = !global;
  $('entity-label').textContent = entity ? 'Entities' : dim;
  $('entity-input').placeholder = entity ? 'Add an entity (Enter)' : 'Add a ' + dim + ' (Enter)';
  $('entity-browse').textContent = entity ? 'Browse entities' : 'Browse ' + dim + ' values';
  $('chips').setAttribute('aria-label', entity ? 'Charted entities' : 'Charted ' + dim + ' values');
  $('latest-key').textContent = entity ? 'Entity' : global ? 'Key' : dim;
}

export function fillTopologies() {
  const sel = $('topology');
  sel.replaceChildren();
  for (const t of state.topologies) option(sel, t.name);
  if (!currentTopology()) view.topology = state.topologies.length ? state.topologies[0].name : '';
  sel.value = view.topology;
  sel.disabled = state.topologies.length < 2;
  fillSets();
}

export function fillSets() {
  const sel = $('set');
  const t = currentTopology();
  const sets = (t && t.sets) || [];
  sel.replaceChildren();
  for (const s of sets) option(sel, s.name, setLabel(s));
  if (!currentSet()) view.set = sets.length ? sets[0].name : '';
  sel.value = view.set;
  fillAggregates();
}

export function fillAggregates() {
  const sel = $('aggregate');
  const s = currentSet();
  const aggs = (s && s.aggregates) || [];
  sel.replaceChildren();
  for (const a of aggs) option(sel, a);
  if (!aggs.includes(view.aggregate)) view.aggregate = aggs.length ? aggs[0] : '';
  sel.value = view.aggregate;
  $('set-window').textContent = s ? 'Windows: ' + s.window + (s.rollup ? ' · ' + (isGlobal(s) ? 'global rollup' : 'rollup by ' + s.dimension) : '') : '';
  labelKeys();
}

// fillQuantiles offers the quantiles the data holds, which the server's list of sets does not say.
export function fillQuantiles(keys) {
  const sel = $('quantile');
  const prev = sel.value;
  sel.replaceChildren();
  for (const k of keys) option(sel, k, 'p' + (parseFloat(k) * 100).toLocaleString(undefined, { maximumFractionDigits: 3 }));
  if (!keys.includes(view.quantile)) view.quantile = keys.includes('0.5') ? '0.5' : keys[0] || '';
  sel.value = view.quantile;
  if (prev !== view.quantile) writeURL();
}

export function renderChips() {
  const ul = $('chips');
  ul.replaceChildren();
  view.entities.forEach((e, i) => {
    const li = document.createElement('li');
    li.className = 'chip';
    li.title = e;
    const sw = document.createElement('span');
    sw.className = 'sw';
    sw.style.background = color(i);
    const label = document.createElement('span');
    label.className = 'label';
    label.textContent = e;
    const rm = document.createElement('button');
    rm.type = 'button';
    rm.textContent = '×';
    rm.setAttribute('aria-label', 'Remove ' + e);
    rm.addEventListener('click', () => setEntities(view.entities.filter((x) => x !== e)));
    li.append(sw, label, rm);
    ul.appendChild(li);
  });
  renderEntityOptions();
}

export function renderEntityOptions() {
  const box = $('entity-options');
  const filter = $('entity-filter').value.trim().toLowerCase();
  box.replaceChildren();
  const shown = state.knownEntities.filter((e) => e.toLowerCase().includes(filter));
  for (const e of shown) {
    const label = document.createElement('label');
    const cb = document.createElement('input');
    cb.type = 'checkbox';
    cb.checked = view.entities.includes(e);
    cb.addEventListener('change', () => {
      setEntities(cb.checked ? view.entities.concat(e) : view.entities.filter((x) => x !== e));
    });
    label.append(cb, document.createTextNode(e));
    box.appendChild(label);
  }
  if (!shown.length) {
    const p = document.createElement('div');
    p.className = 'none';
    p.textContent = state.knownEntities.length ? 'No entity matches the filter.' : 'No entity has windows in this set yet.';
    box.appendChild(p);
  }
}

function setEntities(list) {
  list = uniq(list);
  if (list.length > MAX_ENTITIES) {
    showError('Too many entities:', 'a chart shows at most ' + MAX_ENTITIES + ' entities; remove one to add another.');
    list = list.slice(0, MAX_ENTITIES);
  }
  view.entities = list;
  rebuildOnNextDraw(); // colours and series follow the list
  renderChips();
  writeURL();
  load();
}

export function addTypedEntities() {
  const input = $('entity-input');
  const add = splitEntities(input.value);
  input.value = '';
  if (add.length) setEntities(view.entities.concat(add));
}

export async function loadEntities() {
  try {
    const body = await api('entities', { topology: view.topology, set: view.set, limit: ENTITY_LIST_LIMIT });
    state.knownEntities = body.entities || [];
    $('entity-note').textContent = body.truncated
      ? 'The first ' + state.knownEntities.length + ' entities are listed; type a name to add one that is not.'
      : '';
  } catch (e) {
    state.knownEntities = [];
    showError('Could not list the entities of this set.', e);
  }
  $('entity-count').textContent = '(' + state.knownEntities.length + (state.knownEntities.length >= ENTITY_LIST_LIMIT ? '+' : '') + ')';
  const dl = $('entity-list');
  dl.replaceChildren();
  for (const e of state.knownEntities) option(dl, e);
  renderEntityOptions();
}
