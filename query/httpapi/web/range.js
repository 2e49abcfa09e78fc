// The time range: the presets, what the API is asked for, where the chart's x axis goes, and the
// custom range's datetime inputs.

import { $, view } from './state.js';

export const RANGES = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 24 * 3600e3 };

// currentRange gives the API's from/to and the chart's x range for the chosen time range.
export function currentRange() {
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

// whenMs reads a time the way the API does (ms, RFC 3339, or a Go duration relative to now), to
// place the chart's x range; it gives NaN for what it cannot read, and the API has the last word.
export function whenMs(s, now) {
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

// toInput formats ms for a datetime-local input, in the zone the page shows.
export function toInput(ms) {
  const d = new Date(view.utc ? ms : ms - new Date(ms).getTimezoneOffset() * 60e3);
  return d.toISOString().slice(0, 19);
}

export function fromInput(s) {
  if (!s) return NaN;
  return view.utc ? Date.parse(s + 'Z') : new Date(s).getTime();
}

export function renderRangeButtons() {
  for (const b of $('ranges').querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.range === view.range));
  $('custom-range').hidden = view.range !== 'custom';
}
