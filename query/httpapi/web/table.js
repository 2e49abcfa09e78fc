// The table of latest values under the chart: per entity its newest window (value, state,
// revision), the min and max over the range, and how many windows are charted. It holds the
// numbers the chart's canvas cannot give a screen reader.

import { $, view } from './state.js';
import { color, fmtNum, fmtTime } from './format.js';

// renderTable takes each entity's points, oldest first, in the order of the view's entities.
export function renderTable(perEntity) {
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
