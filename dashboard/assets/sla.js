// Service-network SLAs (R-Pingmesh §5): the latest period's figures of every task's
// network and of all service probes, with lost probes split into RNIC and switch drops.

import { el, fmtNs, fmtPct } from './format.js';

/** Draws the table from `task` and `service` scope rows of `/api/v1/sla/latest`. */
export function renderServiceSla(container, { tasks, service }) {
  const rows = [...(service || []), ...(tasks || []).sort((a, b) => a.key.localeCompare(b.key))];
  if (!rows.length) {
    container.replaceChildren(el('div', { class: 'empty' }, 'no task or service probes in the latest period'));
    return;
  }
  const head = ['scope', 'name', 'probes', 'loss', 'RNIC drops', 'switch drops', 'p50', 'p90', 'p99', 'p99.9'];
  const q = (r) => r.network_rtt_ns;
  container.replaceChildren(el('table', { class: 'problems service-sla' },
    el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((r) => el('tr', { 'data-scope': r.scope, 'data-key': r.key },
      el('td', {}, r.scope),
      el('td', { class: 'component' }, r.scope === 'service' ? 'all service flows' : r.key),
      el('td', { class: 'num' }, String(r.probes)),
      el('td', { class: 'num' }, fmtPct(r.timeout_rate)),
      el('td', { class: 'num' }, fmtPct(r.rnic_drop_rate ?? 0)),
      el('td', { class: 'num' }, fmtPct(r.switch_drop_rate ?? r.timeout_rate)),
      ...['p50', 'p90', 'p99', 'p999'].map((k) => el('td', { class: 'num' }, fmtNs(q(r)[k]))),
    )))));
}
