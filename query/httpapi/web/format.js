// How numbers, times and entities look on the page: in the chart, its legend, the table and the
// status, so that they all agree (the same zone, the same digits, an entity's one colour).

import { view } from './state.js';

// An entity's colour, by its place in the view's list: the chips, the chart's lines and the table
// use it alike. The first three are what the browser test looks for in its screenshot.
const PALETTE = ['#2563eb', '#e8590c', '#0e9f6e', '#c026d3', '#dc2626', '#0891b2', '#ca8a04', '#4f46e5',
  '#db2777', '#65a30d', '#7c3aed', '#0d9488', '#ea580c', '#475569', '#9333ea', '#15803d', '#be123c', '#1d4ed8', '#a16207', '#0369a1'];

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

export function fmtNum(v) {
  if (v == null || Number.isNaN(v)) return '—';
  const a = Math.abs(v);
  if (a !== 0 && a < 0.01) return v.toPrecision(3);
  return v.toLocaleString(undefined, { maximumFractionDigits: a >= 1000 ? 1 : 3 });
}

// dtf formats in 24-hour time, in the zone the page shows (the browser's, or UTC).
export function dtf(opts) {
  return new Intl.DateTimeFormat(undefined, Object.assign({ hourCycle: 'h23' }, opts, view.utc ? { timeZone: 'UTC' } : {}));
}

export function fmtTime(ms) {
  return dtf({ year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }).format(new Date(ms)) + (view.utc ? ' UTC' : '');
}

export function fmtClock(ms) {
  return dtf({ hour: '2-digit', minute: '2-digit', second: '2-digit' }).format(new Date(ms));
}
