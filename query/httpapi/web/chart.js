// The uPlot chart: its options, the drawing of open and live windows, zoom kept across refreshes,
// and <script id="plotted">, which records what the chart holds for tests and scripts.

import { $, currentKind, uniq, view } from './state.js';
import { color, dtf, fmtNum, fmtTime } from './format.js';

// uPlot is vendored as a classic script (uPlot.iife.min.js, unmodified from npm) that index.html
// loads before the modules: it defines a global, not an export.
const uPlot = window.uPlot;

let chart = null;
let chartKey = ''; // what the chart was built for; another key rebuilds it
let chartMeta = []; // per series: Map of window start -> {final, live, revision, end}
let zoom = null; // x range the user zoomed to, kept across refreshes
let fullRange = [0, 1]; // x range of the chosen time range, widened to the data

export function hasChart() {
  return chart !== null;
}

// rebuildOnNextDraw makes the next draw build a new chart rather than update this one: its series,
// colours and time zone are fixed when it is built.
export function rebuildOnNextDraw() {
  chartKey = '';
}

export function forgetZoom() {
  zoom = null;
}

export function showWholeRange() {
  if (chart) chart.setScale('x', { min: fullRange[0], max: fullRange[1] });
}

export function resizeChart() {
  if (chart) chart.setSize(chartSize());
}

// hideChart removes the chart, for a card that shows a message instead.
export function hideChart() {
  $('chart').hidden = true;
  $('zoom-hint').hidden = true;
  $('chart').dataset.pointsDrawn = '0';
  if (chart) {
    chart.destroy();
    chart = null;
    chartKey = '';
  }
}

// draw charts each entity's points (oldest first, as render.js makes them), total in all.
export function draw(perEntity, range, total) {
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
// the API with what is drawn rather than with what this script meant to draw. Without a chart u,
// each entity's series is empty; without perEntity (nothing chosen, or bytes), it is null.
export function writePlotted(perEntity, u) {
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
