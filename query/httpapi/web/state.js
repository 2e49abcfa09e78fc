// What the page holds: the view the user chose, what the server last told it, the limits every
// module keeps to, and questions answered from these (which set is chosen, what it is keyed by,
// what kind of value the aggregate holds).
//
// Mutable state is kept on the exported objects view and state, not in exported variables: a
// module cannot assign to a binding it imports, but it can change an object's properties.

export const WINDOW_LIMIT = 5000; // newest windows per entity and request; 7 days of minute windows fit twice
export const MAX_ENTITIES = 20; // more lines than this do not make a readable chart
export const DEFAULT_ENTITIES = 5; // charted on first load when the URL names none
export const ENTITY_LIST_LIMIT = 500;

export const $ = (id) => document.getElementById(id);

// The view: what the user chose. Mirrored in the URL by writeURL (url.js).
export const view = {
  topology: '', set: '', aggregate: '', quantile: '', entities: [],
  range: '1h', from: '', to: '', // from/to: custom range, in any form the API accepts (ms, RFC 3339, -2h)
  live: true, interval: 10, utc: false,
};

export const state = {
  topologies: [],
  knownEntities: [],
  lastBody: null, // the last windows response, re-rendered without a request when only the aggregate changes
  lastRange: null,
  lastUpdated: null,
};

export function uniq(a) {
  return [...new Set(a)];
}

export function currentTopology() {
  return state.topologies.find((t) => t.name === view.topology);
}

export function currentSet() {
  const t = currentTopology();
  return t && (t.sets || []).find((s) => s.name === view.set);
}

// A rollup set is keyed by its dimension (region, ...) instead of the entity; a global rollup
// (rollup with no dimension) has one key, "all", read without anything to pick. Servers that
// predate rollups send no dimension: their sets are entity sets.
export const GLOBAL_KEY = 'all';

export function keyName(s) {
  if (!s) return 'entity';
  if (!s.rollup) return s.dimension || 'entity';
  return s.dimension || '';
}

export function isGlobal(s) {
  return !!(s && s.rollup && !s.dimension);
}

// kindOf tells from the data what the aggregate holds: numbers, quantiles, or bytes.
export function kindOf(body) {
  for (const ws of Object.values(body.entities || {})) {
    for (const w of ws) {
      const v = w.values && w.values[view.aggregate];
      if (v == null) continue;
      if (typeof v === 'number') return 'number';
      if (typeof v === 'object') return 'quantiles';
      return 'bytes';
    }
  }
  return 'number';
}

export function currentKind() {
  return state.lastBody ? kindOf(state.lastBody) : (view.quantile ? 'quantiles' : 'number');
}
