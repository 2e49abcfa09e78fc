// abacus dashboard: charts the window aggregates served by the query HTTP API (api/v1/...).
//
// Plain JavaScript with no build step, because the page is embedded into the Go binary as is.
// Everything the user chooses lives in the page's query string, so a view can be bookmarked or
// shared, and tests can open the page on a given view.
//
// The chart plots exactly what the API returned; the plotted points are also written, as JSON, to
// <script id="plotted">, so tests and scripts can check the chart against the API.
(function () {
  'use strict';

  const API = 'api/v1/'; // relative, so the page also works when mounted under a path prefix
  const WINDOW_LIMIT = 5000; // newest windows per entity and request; 7 days of minute windows fit twice
  const MAX_ENTITIES = 20; // more lines than this do not make a readable chart
  const DEFAULT_ENTITIES = 5; // charted on first load when the URL names none
  const ENTITY_LIST_LIMIT = 500;
  const RANGES = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 24 * 3600e3 };
  const PALETTE = ['#2563eb', '#e8590c', '#0e9f6e', '#c026d3', '#dc2626', '#0891b2', '#ca8a04', '#4f46e5',
    '#db2777', '#65a30d', '#7c3aed', '#0d9488', '#ea580c', '#475569', '#9333ea', '#15803d', '#be123c', '#1d4ed8', '#a16207', '#0369a1'];
  // How the API's parameter names read in an error message.
  const PARAM_WORDS = {
    topology: 'the topology', set: 'the aggregate set', entity: 'the entity list', from: 'the start of the time range',
    to: 'the end of the time range', limit: 'the window limit', order: 'the order', live: 'the live option',
  };

  const $ = (id) => document.getElementById(id);

  // The view: what the user chose. Mirrored in the URL by writeURL.
  const view = {
    topology: '', set: '', aggregate: '', quantile: '', entities: [],
    range: '1h', from: '', to: '', // from/to: custom range, in any form the API accepts (ms, RFC 3339, -2h)
    live: true, interval: 10, utc: false,
  };

  let topologies = [];
  let knownEntities = [];
  let lastBody = null; // the last windows response, re-rendered without a request when only the aggregate changes
  let lastRange = null;
  let chart = null;
  let chartKey = ''; // what the chart was built for; another key rebuilds it
  let chartMeta = []; // per series: Map of window start -> {final, live, revision, end}
  let zoom = null; // x range the user zoomed to, kept across refreshes
  let fullRange = [0, 1]; // x range of the chosen time range, widened to the data
  let inflight = null;
  let loadSeq = 0;
  let timer = 0;
  let lastUpdated = null;

  // ---- URL <-> view ----

  function readURL() {
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

  function writeURL() {
    const q = new URLSearchParams();
    if (view.topology) q.set('topology', view.topology);
    if (view.set) q.set('set', view.set);
    if (view.aggregate) q.set('agg', view.aggregate);
    // Before the first answer the aggregate's kind is unknown: keep the quantile the URL asked for.
    if (view.quantile && (!lastBody || kindOf(lastBody) === 'quantiles')) q.set('q', view.quantile);
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

  function splitEntities(s) {
    return s.split(',').map((e) => e.trim()).filter(Boolean);
  }

  function uniq(a) {
    return [...new Set(a)];
  }

  // ---- API ----

  class APIError extends Error {
    constructor(status, message, parameter) {
      super(message);
      this.status = status;
      this.parameter = parameter || '';
    }
  }

  async function api(endpoint, params, signal) {
    const url = API + endpoint + (params ? '?' + new URLSearchParams(params).toString() : '');
    let resp;
    try {
      resp = await fetch(url, { signal, headers: { Accept: 'application/json' } });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError(0, e.message || String(e));
    }
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError(resp.status, resp.ok ? 'the answer was not JSON' : resp.statusText);
    }
    if (!resp.ok) throw new APIError(resp.status, (body && body.error) || resp.statusText, body && body.parameter);
    return body;
  }

  // describe turns an API failure into a sentence a user can act on.
  function describe(err) {
    if (!(err instanceof APIError)) return String(err && err.message ? err.message : err);
    if (err.status === 0) return 'The abacus server did not answer (' + err.message + '). Is it still running?';
    if (err.status === 400) {
      let msg = err.message;
      if (err.parameter) {
        msg = msg.replace(new RegExp('^parameter ' + err.parameter + ':\\s*'), '');
        return 'The server did not accept ' + (PARAM_WORDS[err.parameter] || err.parameter) + ': ' + msg + '.';
      }
      return 'The server did not accept the request: ' + msg + '.';
    }
    if (err.status === 503) return 'The aggregate store is not answering: ' + err.message + '.';
    return 'The server answered ' + err.status + ': ' + err.message + '.';
  }

  // ---- errors and status ----

  function showError(title, err) {
    $('error-title').textContent = title;
    $('error-detail').textContent = describe(err);
    $('error').hidden = false;
  }

  function clearError() {
    $('error').hidden = true;
  }

  function setState(s) {
    document.body.dataset.state = s;
    updateStatus();
  }

  function updateStatus() {
    const st = $('status');
    st.classList.toggle('live', view.live);
    let text;
    if (document.body.dataset.state === 'error') text = 'Error';
    else if (!lastUpdated) text = 'Loading…';
    else text = (view.live ? 'Live' : 'Paused') + ' · updated ' + fmtClock(lastUpdated.getTime());
    $('status-text').textContent = text;
  }

  window.addEventListener('error', (e) => {
    showError('The page hit a bug:', e.message);
    setState('error');
  });

  // ---- formatting ----

  function fmtNum(v) {
    if (v == null || Number.isNaN(v)) return '—';
    const a = Math.abs(v);
    if (a !== 0 && a < 0.01) return v.toPrecision(3);
    return v.toLocaleString(undefined, { maximumFractionDigits: a >= 1000 ? 1 : 3 });
  }

  function dtf(opts) {
    return new Intl.DateTimeFormat(undefined, Object.assign({ hourCycle: 'h23' }, opts, view.utc ? { timeZone: 'UTC' } : {}));
  }

  function fmtTime(ms) {
    return dtf({ year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }).format(new Date(ms)) + (view.utc ? ' UTC' : '');
  }

  function fmtClock(ms) {
    return dtf({ hour: '2-digit', minute: '2-digit', second: '2-digit' }).format(new Date(ms));
  }

  // toInput formats ms for a datetime-local input, in the zone the page shows.
  function toInput(ms) {
    const d = new Date(view.utc ? ms : ms - new Date(ms).getTimezoneOffset() * 60e3);
    return d.toISOString().slice(0, 19);
  }

  function fromInput(s) {
    if (!s) return NaN;
    return view.utc ? Date.parse(s + 'Z') : new Date(s).getTime();
  }

  // whenMs reads a time the way the API does (ms, RFC 3339, or a Go duration relative to now), to
  // place the chart's x range; it gives NaN for what it cannot read, and the API has the last word.
  function whenMs(s, now) {
    if (!s) return NaN;
    if (/^-?\d+$/.test(s)) return Number(s);
    const units = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };
    const m = /^([-+]?)((?:\d+(?:\.\d*)?(?:ns|us|µs|ms|s|m|h))+)$/.exec(s);
    if (m) {
      let total = 0;
      for (const part of m[2].matchAll(/(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)/g)) total += parseFloat(part[1]) * units[part[2]];
      return now + (m[1] === '-' ? -total : total);
    }
    return Date.parse(s);
  }

  function color(i) {
    return PALETTE[i % PALETTE.length];
  }

  // ---- controls ----

  function option(sel, value, label) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = label == null ? value : label;
    sel.appendChild(o);
  }

  function currentTopology() {
    return topologies.find((t) => t.name === view.topology);
  }

  function currentSet() {
    const t = currentTopology();
    return t && (t.sets || []).find((s) => s.name === view.set);
  }

  // A rollup set is keyed by its dimension (region, ...) instead of the entity; a global rollup
  // (rollup with no dimension) has one key, "all", read without anything to pick. Servers that
  // predate rollups send no dimension: their sets are entity sets.
  const GLOBAL_KEY = 'all';

  function keyName(s) {
    if (!s) return 'entity';
    if (!s.rollup) return s.dimension || 'entity';
    return s.dimension || '';
  }

  function isGlobal(s) {
    return !!(s && s.rollup && !s.dimension);
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

  function fillTopologies() {
    const sel = $('topology');
    sel.replaceChildren();
    for (const t of topologies) option(sel, t.name);
    if (!currentTopology()) view.topology = topologies.length ? topologies[0].name : '';
    sel.value = view.topology;
    sel.disabled = topologies.length < 2;
    fillSets();
  }

  function fillSets() {
    const sel = $('set');
    const t = currentTopology();
    const sets = (t && t.sets) || [];
    sel.replaceChildren();
    for (const s of sets) option(sel, s.name, setLabel(s));
    if (!currentSet()) view.set = sets.length ? sets[0].name : '';
    sel.value = view.set;
    fillAggregates();
  }

  function fillAggregates() {
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

  function fillQuantiles(keys) {
    const sel = $('quantile');
    const prev = sel.value;
    sel.replaceChildren();
    for (const k of keys) option(sel, k, 'p' + (parseFloat(k) * 100).toLocaleString(undefined, { maximumFractionDigits: 3 }));
    if (!keys.includes(view.quantile)) view.quantile = keys.includes('0.5') ? '0.5' : keys[0] || '';
    sel.value = view.quantile;
    if (prev !== view.quantile) writeURL();
  }

  function renderChips() {
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

  function renderEntityOptions() {
    const box = $('entity-options');
    const filter = $('entity-filter').value.trim().toLowerCase();
    box.replaceChildren();
    const shown = knownEntities.filter((e) => e.toLowerCase().includes(filter));
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
      p.textContent = knownEntities.length ? 'No entity matches the filter.' : 'No entity has windows in this set yet.';
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
    chartKey = ''; // colours and series follow the list
    renderChips();
    writeURL();
    load();
  }

  function addTypedEntities() {
    const input = $('entity-input');
    const add = splitEntities(input.value);
    input.value = '';
    if (add.length) setEntities(view.entities.concat(add));
  }

  async function loadEntities() {
    try {
      const body = await api('entities', { topology: view.topology, set: view.set, limit: ENTITY_LIST_LIMIT });
      knownEntities = body.entities || [];
      $('entity-note').textContent = body.truncated
        ? 'The first ' + knownEntities.length + ' entities are listed; type a name to add one that is not.'
        : '';
    } catch (e) {
      knownEntities = [];
      showError('Could not list the entities of this set.', e);
    }
    $('entity-count').textContent = '(' + knownEntities.length + (knownEntities.length >= ENTITY_LIST_LIMIT ? '+' : '') + ')';
    const dl = $('entity-list');
    dl.replaceChildren();
    for (const e of knownEntities) option(dl, e);
    renderEntityOptions();
  }

  function renderRangeButtons() {
    for (const b of $('ranges').querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.range === view.range));
    $('custom-range').hidden = view.range !== 'custom';
  }

  // currentRange gives the API's from/to and the chart's x range for the chosen time range.
  function currentRange() {
    const now = Date.now();
    if (view.range !== 'custom') {
      // Relative to the server's clock, so a browser clock that is off does not hide new windows.
      return { fromMs: now - RANGES[view.range], toMs: now, params: relParams(view.range) };
    }
    const params = {};
    if (view.from) params.from = view.from;
    if (view.to) params.to = view.to;
    return { fromMs: whenMs(view.from, now), toMs: view.to ? whenMs(view.to, now) : now, params };
  }

  function relParams(range) {
    // Go durations have no days: 7d is sent as -168h.
    const hours = RANGES[range] / 3600e3;
    return { from: Number.isInteger(hours) ? '-' + hours + 'h' : '-' + RANGES[range] / 60e3 + 'm' };
  }

  function bindControls() {
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
      if (lastBody) render(lastBody, lastRange);
    });
    $('quantile').addEventListener('change', (e) => {
      view.quantile = e.target.value;
      writeURL();
      if (lastBody) render(lastBody, lastRange);
    });
    $('entity-input').addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        addTypedEntities();
      }
    });
    $('entity-input').addEventListener('input', (e) => {
      // Picking from the datalist fills the whole value at once: add it without waiting for Enter.
      if ((!e.inputType || e.inputType === 'insertReplacementText') && knownEntities.includes(e.target.value)) addTypedEntities();
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
      zoom = null;
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
      zoom = null;
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
      chartKey = '';
      writeURL();
      if (view.range === 'custom') {
        const r = currentRange();
        if (Number.isFinite(r.fromMs)) $('from').value = toInput(r.fromMs);
        if (Number.isFinite(r.toMs)) $('to').value = toInput(r.toMs);
      }
      if (lastBody) render(lastBody, lastRange);
      updateStatus();
    });
    $('error-close').addEventListener('click', clearError);
    $('reset-zoom').addEventListener('click', () => {
      if (chart) chart.setScale('x', { min: fullRange[0], max: fullRange[1] });
    });
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && view.live) load();
    });
    window.addEventListener('resize', () => {
      if (chart) chart.setSize(chartSize());
    });
  }

  async function setChanged() {
    zoom = null;
    chartKey = '';
    lastBody = null;
    if (isGlobal(currentSet())) {
      // One key and nothing to pick: the chart reads it as the one entity.
      view.entities = [GLOBAL_KEY];
      knownEntities = [GLOBAL_KEY];
      renderChips();
      writeURL();
      await load();
      return;
    }
    writeURL();
    await loadEntities();
    if (!view.entities.length) {
      view.entities = knownEntities.slice(0, DEFAULT_ENTITIES);
      renderChips();
      writeURL();
    }
    await load();
  }

  // ---- loading ----

  function schedule() {
    clearTimeout(timer);
    if (view.live && !document.hidden) timer = setTimeout(() => load(), view.interval * 1000);
  }

  async function load() {
    clearTimeout(timer);
    if (inflight) inflight.abort();
    const seq = ++loadSeq;
    if (!view.set || !view.entities.length) {
      inflight = null;
      lastBody = null;
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
      if (!chart) showEmpty('Nothing to chart: the windows could not be loaded (see the message above).');
      renderTitle(currentKind());
      setState('error');
      schedule(); // keep trying while live: the server may come back
      return;
    }
    if (seq !== loadSeq) return;
    inflight = null;
    clearError();
    lastBody = body;
    lastRange = range;
    lastUpdated = new Date();
    render(body, range);
    setState('ready');
    schedule();
  }

  // ---- rendering ----

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

  // kindOf tells from the data what the aggregate holds: numbers, quantiles, or bytes.
  function kindOf(body) {
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

  function currentKind() {
    return lastBody ? kindOf(lastBody) : (view.quantile ? 'quantiles' : 'number');
  }

  // showEmpty replaces the chart with a message; the table is cleared unless the caller filled it.
  function showEmpty(text, keepTable) {
    $('empty').textContent = text;
    $('empty').hidden = false;
    $('chart').hidden = true;
    $('zoom-hint').hidden = true;
    $('chart').dataset.pointsDrawn = '0';
    if (chart) {
      chart.destroy();
      chart = null;
      chartKey = '';
    }
    if (!keepTable) renderTable([]);
    renderTitle('number');
    $('chart-foot').textContent = '';
  }

  function renderTitle(kind) {
    const s = currentSet();
    let title = view.aggregate || '—';
    if (kind === 'quantiles' && view.quantile) title += ' · ' + $('quantile').selectedOptions[0]?.textContent;
    $('chart-title').textContent = title;
    $('chart-subtitle').textContent = s
      ? view.set + ' · ' + s.window + (s.rollup ? ' · ' + (isGlobal(s) ? 'global rollup' : 'by ' + s.dimension) : '') + ' · a point per window, at its start'
      : '';
  }

  function render(body, range) {
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
    renderTable(perEntity, body);
    if (!total) {
      const what = view.range === 'custom' ? 'in this time range' : 'in the last ' + view.range;
      showEmpty('No windows with “' + view.aggregate + '” for ' + (view.entities.length === 1 ? 'this entity' : 'these entities') + ' ' + what + '. Widen the time range, or check the entity names.', true);
      renderTitle(kind);
      writePlotted(perEntity);
      writeURL();
      return;
    }

    // uPlot wants one shared, sorted x array, with null where an entity has no window.
    const xs = uniq(perEntity.flatMap((ps) => ps.map((p) => p.start))).sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const data = [xs];
    chartMeta = perEntity.map((ps) => {
      const ys = new Array(xs.length).fill(null);
      const meta = new Map();
      for (const p of ps) {
        ys[index.get(p.start)] = p.value;
        meta.set(p.start, p);
      }
      data.push(ys);
      return meta;
    });
    // Pad the x range by one window so the newest point is not drawn on the edge.
    const step = Math.max(...perEntity.flatMap((ps) => ps.map((p) => p.end - p.start)), 0);
    fullRange = [
      Math.min(Number.isFinite(range.fromMs) ? range.fromMs : xs[0], xs[0]),
      Math.max(Number.isFinite(range.toMs) ? range.toMs : xs[xs.length - 1], xs[xs.length - 1] + step),
    ];

    $('empty').hidden = true;
    $('chart').hidden = false;
    $('zoom-hint').hidden = false;
    const key = JSON.stringify([view.entities, view.utc]);
    if (!chart || chartKey !== key) {
      if (chart) chart.destroy();
      chart = new uPlot(chartOptions(), data, $('chart'));
      chartKey = key;
    } else {
      const keep = zoom; // setData rescales x to the full range, which clears zoom in the setScale hook
      chart.setData(data);
      if (keep) chart.setScale('x', { min: keep[0], max: keep[1] });
    }
    // The canvas says nothing to a screen reader: name what it shows (the table below has the numbers).
    $('chart').setAttribute('role', 'img');
    $('chart').setAttribute('aria-label', $('chart-title').textContent + ' per window for ' + view.entities.join(', ') +
      ', ' + total + ' points; the latest values are in the table below.');
    writePlotted(perEntity, chart);
    writeURL();
  }

  function chartSize() {
    const w = $('chart').clientWidth || $('chart').parentElement.clientWidth - 36;
    return { width: Math.max(w, 300), height: 360 };
  }

  function chartOptions() {
    const tz = view.utc ? (ts) => uPlot.tzDate(new Date(ts), 'Etc/UTC') : (ts) => new Date(ts);
    const axis = { stroke: '#667085', grid: { stroke: '#eef0f3', width: 1 }, ticks: { stroke: '#e2e5ea', width: 1 }, font: '12px system-ui, sans-serif' };
    return Object.assign(chartSize(), {
      ms: 1, // x values are the API's window starts, in milliseconds
      tzDate: tz,
      cursor: { points: { size: 8 } }, // uPlot's default drag zooms along x
      legend: { live: true },
      scales: {
        // uPlot ranges x both when it fits the data (then min and max are the first and last x) and
        // when the user zooms: only the first shows the whole chosen time range.
        x: { time: true, range: (u, min, max) => (isDataExtent(u, min, max) ? fullRange : [min, max]) },
        y: { range: (u, min, max) => yRange(min, max) },
      },
      axes: [
        Object.assign({}, axis, { values: xTickLabels, space: 70 }),
        Object.assign({}, axis, { size: yAxisSize, values: (u, vals) => vals.map(fmtNum) }),
      ],
      series: [
        { label: 'Window start', value: (u, v) => (v == null ? '—' : fmtTime(v)) },
      ].concat(view.entities.map((e, i) => ({
        label: e,
        stroke: color(i),
        width: 2,
        spanGaps: false, // a missing window is a gap, not a line across it
        points: { show: true, size: 5, fill: color(i), stroke: color(i) },
        value: (u, v, si, idx) => legendValue(u, v, si, idx),
      }))),
      hooks: {
        draw: [drawWindowStates],
        setScale: [(u, key) => {
          if (key !== 'x') return;
          const { min, max } = u.scales.x;
          zoom = Math.abs(min - fullRange[0]) < 1 && Math.abs(max - fullRange[1]) < 1 ? null : [min, max];
          $('reset-zoom').hidden = !zoom;
        }],
      },
    });
  }

  // xTickLabels writes 24-hour times, in the zone the page shows, with the date under the first tick
  // of each day; day-sized ticks show only the date.
  function xTickLabels(u, splits, axisIdx, space, incr) {
    const day = 86400e3;
    const date = dtf({ month: 'short', day: 'numeric' });
    if (incr >= day) return splits.map((v) => date.format(new Date(v)));
    const time = dtf(incr < 60e3 ? { hour: '2-digit', minute: '2-digit', second: '2-digit' } : { hour: '2-digit', minute: '2-digit' });
    let prevDay = '';
    return splits.map((v) => {
      const d = new Date(v);
      const dd = date.format(d);
      const label = dd !== prevDay ? time.format(d) + '\n' + dd : time.format(d);
      prevDay = dd;
      return label;
    });
  }

  function isDataExtent(u, min, max) {
    const xs = u.data[0];
    return !xs || !xs.length || (min === xs[0] && max === xs[xs.length - 1]);
  }

  function yRange(min, max) {
    if (min == null || max == null) return [0, 1];
    // Counts and most aggregates read best from zero; keep zero in view unless the data is far from it.
    let lo = min >= 0 && min <= max * 0.5 ? 0 : min;
    let hi = max;
    if (lo === hi) {
      lo = lo === 0 ? 0 : lo - Math.abs(lo) * 0.1;
      hi = hi === 0 ? 1 : hi + Math.abs(hi) * 0.1;
    }
    const pad = (hi - lo) * 0.08;
    return [lo === 0 ? 0 : lo - pad, hi + pad];
  }

  function yAxisSize(u, values) {
    if (!values) return 50;
    u.ctx.font = '12px system-ui, sans-serif';
    const w = Math.max(...values.map((v) => u.ctx.measureText(v).width)) / uPlot.pxRatio;
    return Math.ceil(w) + 24;
  }

  function legendValue(u, v, si, idx) {
    if (v == null) return '—';
    const m = chartMeta[si - 1] && chartMeta[si - 1].get(u.data[0][idx]);
    const state = m ? (m.live ? ' (live)' : m.final ? '' : ' (open)') : '';
    return fmtNum(v) + state;
  }

  // drawWindowStates draws, over uPlot's points, the points of windows that are not final: hollow
  // for open windows, hollow with a dashed ring for live ones. It counts the points drawn in view.
  function drawWindowStates(u) {
    const ctx = u.ctx;
    const pr = uPlot.pxRatio;
    const xs = u.data[0];
    const { min, max } = u.scales.x;
    let drawn = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
    ctx.clip();
    for (let si = 1; si < u.series.length; si++) {
      if (!u.series[si].show) continue;
      const ys = u.data[si];
      const meta = chartMeta[si - 1];
      const c = color(si - 1);
      for (let i = 0; i < xs.length; i++) {
        if (ys[i] == null || xs[i] < min || xs[i] > max) continue;
        drawn++;
        const m = meta && meta.get(xs[i]);
        if (!m || (m.final && !m.live)) continue;
        const cx = u.valToPos(xs[i], 'x', true);
        const cy = u.valToPos(ys[i], 'y', true);
        ctx.beginPath();
        ctx.arc(cx, cy, 4.5 * pr, 0, 2 * Math.PI);
        ctx.fillStyle = '#fff';
        ctx.fill();
        ctx.lineWidth = 2 * pr;
        ctx.strokeStyle = c;
        ctx.stroke();
        if (m.live) {
          ctx.beginPath();
          ctx.arc(cx, cy, 8.5 * pr, 0, 2 * Math.PI);
          ctx.setLineDash([2 * pr, 2 * pr]);
          ctx.lineWidth = 1.5 * pr;
          ctx.stroke();
          ctx.setLineDash([]);
        }
      }
    }
    ctx.restore();
    $('chart').dataset.pointsDrawn = String(drawn);
  }

  // writePlotted records what the chart holds, read back from uPlot's own data, so a test compares
  // the API with what is drawn rather than with what this script meant to draw.
  function writePlotted(perEntity, u) {
    let out = null;
    if (perEntity) {
      out = {
        topology: view.topology, set: view.set, aggregate: view.aggregate,
        quantile: currentKind() === 'quantiles' ? view.quantile : null,
        entities: view.entities.slice(),
        series: {},
      };
      view.entities.forEach((e, i) => {
        const pts = [];
        if (u) {
          const xs = u.data[0];
          const ys = u.data[i + 1];
          for (let j = 0; j < xs.length; j++) {
            if (ys[j] == null) continue;
            const m = chartMeta[i].get(xs[j]);
            pts.push({ start: xs[j], value: ys[j], final: !!(m && m.final), live: !!(m && m.live) });
          }
        }
        out.series[e] = pts;
      });
    }
    // "<" is escaped so that no entity name can end the script element.
    $('plotted').textContent = JSON.stringify(out).replace(/</g, '\\u003c');
  }

  function renderTable(perEntity) {
    const tb = $('latest').tBodies[0];
    tb.replaceChildren();
    if (!perEntity.length) {
      const tr = tb.insertRow();
      const td = tr.insertCell();
      td.colSpan = 8;
      td.className = 'none';
      td.textContent = 'Nothing charted yet.';
      return;
    }
    perEntity.forEach((ps, i) => {
      const tr = tb.insertRow();
      const last = ps[ps.length - 1];
      const vals = ps.map((p) => p.value);
      const cell = (text, cls) => {
        const td = tr.insertCell();
        if (cls) td.className = cls;
        if (text instanceof Node) td.appendChild(text);
        else td.textContent = text;
        return td;
      };
      const name = document.createElement('span');
      const sw = document.createElement('span');
      sw.className = 'sw';
      sw.style.background = color(i);
      name.append(sw, document.createTextNode(view.entities[i]));
      cell(name, 'entity');
      if (!last) {
        const td = cell('no windows in range', '');
        td.colSpan = 7;
        td.style.color = 'var(--muted)';
        return;
      }
      cell(fmtTime(last.start));
      cell(fmtNum(last.value), 'num');
      const badge = document.createElement('span');
      const st = last.live ? 'live' : last.final ? 'final' : 'open';
      badge.className = 'badge ' + st;
      badge.textContent = st;
      cell(badge);
      cell(String(last.revision), 'num');
      cell(fmtNum(Math.min(...vals)), 'num');
      cell(fmtNum(Math.max(...vals)), 'num');
      cell(String(ps.length), 'num');
    });
  }

  // ---- start ----

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
      topologies = (await api('topologies')).topologies || [];
    } catch (e) {
      showError('Could not load the topologies.', e);
      setState('error');
      return;
    }
    if (!topologies.length) {
      showEmpty('This server serves no topology yet.');
      setState('ready');
      return;
    }
    fillTopologies();
    await setChanged();
  }

  boot();
})();
