// Number and time formatting plus tiny DOM helpers shared by the panels.
// Rounding is integer-based (half up) so tests can reproduce the text exactly.

/** Nanoseconds as "12.3 µs" (below 1 ms) or "1.23 ms"; "—" when missing. */
export function fmtNs(ns) {
  if (ns === null || ns === undefined) return '—';
  if (ns < 999950) return `${(Math.round(ns / 100) / 10).toFixed(1)} µs`;
  return `${(Math.round(ns / 10000) / 100).toFixed(2)} ms`;
}

/** A rate in [0, 1] as "0.25 %"; "—" when missing. */
export function fmtPct(rate) {
  if (rate === null || rate === undefined) return '—';
  return `${(Math.round(rate * 10000) / 100).toFixed(2)} %`;
}

/** Unix ms as local time: "14:03:07", with the date when not today. */
export function fmtTime(ms) {
  if (!ms) return '—';
  const d = new Date(ms);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString()
    ? time
    : `${d.toLocaleDateString()} ${time}`;
}

/** A duration in ms as "42 s", "5 min", "3 h". */
export function fmtAge(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

/** Creates an element: `attrs` keys are attributes ("class", "data-x", ...). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined && v !== false) node.setAttribute(k, String(v));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined));
  return node;
}

/** Creates an SVG element with attributes. */
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

/** Shows a panel's state line: an error makes the panel "unavailable". */
export function setPanelState(panel, error, note = '') {
  const line = panel.querySelector('.panel-state');
  panel.classList.toggle('unavailable', Boolean(error));
  if (error) {
    const why = error.status === 401 ? 'enter an API token above' : error.message;
    line.textContent = `unavailable — ${error.path || ''} ${why}`.replace(/\s+/g, ' ');
  } else {
    line.textContent = note;
  }
}

/** Natural sort of names: "t2" before "t10". */
export const byName = new Intl.Collator(undefined, { numeric: true }).compare;
