// Active and recent problems: what broke, where, how sure, how much it matters.

import { el, fmtAge, fmtTime } from './format.js';

const PRIORITY_RANK = { P0: 0, P1: 1, P2: 2 };

function order(a, b) {
  const active = (p) => (p.state === 'active' ? 0 : 1);
  const rank = (p) => PRIORITY_RANK[p.priority] ?? 3;
  return active(a) - active(b) || rank(a) - rank(b) || b.last_seen_ms - a.last_seen_ms;
}

/** Draws the problem table; `problems` as `/api/v1/problems?state=all` lists them. */
export function renderProblems(container, problems, now = Date.now()) {
  if (!problems.length) {
    container.replaceChildren(el('p', { class: 'empty good' }, 'No problem seen.'));
    return;
  }
  const head = el('tr', {}, ['Priority', 'State', 'Kind', 'Component', 'Confidence', 'First seen', 'Last seen', 'Evidence']
    .map((h) => el('th', {}, h)));
  const rows = [...problems].sort(order).map((p) => el('tr', {
    class: `problem ${p.state}`,
    'data-id': p.id,
    'data-kind': p.kind,
    'data-component': p.component,
    'data-component-kind': p.component_kind,
    'data-state': p.state,
    'data-priority': p.priority || '',
  },
  el('td', {}, p.priority ? el('span', { class: `prio ${p.priority}` }, p.priority) : '—'),
  el('td', {}, el('span', { class: `state ${p.state}` }, p.state === 'active' ? 'active' : `resolved ${fmtAge(now - (p.resolved_ms || p.last_seen_ms))} ago`)),
  el('td', {}, p.kind.replaceAll('_', ' ')),
  el('td', { class: 'component' }, el('span', { class: 'ckind' }, p.component_kind), ' ', p.component),
  el('td', { class: 'num' }, `${Math.round(p.confidence * 100)} %`),
  el('td', {}, fmtTime(p.first_seen_ms)),
  el('td', {}, fmtTime(p.last_seen_ms)),
  el('td', { class: 'evidence', title: (p.evidence.example_paths || []).join('\n') },
    p.evidence.detail || `${p.evidence.timeouts}/${p.evidence.probes} probes lost`)));
  container.replaceChildren(el('table', { class: 'problems' }, el('thead', {}, head), el('tbody', {}, rows)));
}
