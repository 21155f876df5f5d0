// RNIC status grid: every registered RNIC, grouped by ToR and host, marked
// "problem" (an active problem names it or its host), "silent" (no probe reached
// it in the latest period) or "ok".

import { byName, el } from './format.js';

/** Problem kinds blamed on a whole host (every RNIC of it is affected). */
const HOST_KINDS = new Set(['host', 'agent']);

function statusOf(rnic, problems, probed) {
  const name = `${rnic.host}/${rnic.ifname}`;
  const hit = (problems || []).find((p) => p.state === 'active' && (
    (p.component_kind === 'rnic' && p.component === name)
    || (HOST_KINDS.has(p.component_kind) && p.component === rnic.host)));
  if (hit) return { status: 'problem', why: `${hit.kind} (${hit.component_kind} ${hit.component})` };
  if (!probed) return { status: 'unknown', why: 'SLA unavailable' };
  if (!probed.has(String(rnic.id))) return { status: 'silent', why: 'no probes in the latest period' };
  return { status: 'ok', why: 'probed, no problem' };
}

/**
 * Draws the grid. `problems` (active ones) and `rnicRows` (rnic-scope SLA rows of
 * the latest period) may be null when their endpoint failed: statuses then say less.
 */
export function renderRnics(container, { rnics, problems, rnicRows }) {
  const probed = rnicRows ? new Set(rnicRows.filter((r) => r.probes > 0).map((r) => r.key)) : null;
  const tors = new Map();
  for (const r of rnics) {
    const hosts = tors.get(r.tor) || new Map();
    tors.set(r.tor, hosts);
    hosts.set(r.host, [...(hosts.get(r.host) || []), r]);
  }
  const counts = { ok: 0, problem: 0, silent: 0, unknown: 0 };
  const groups = [...tors.keys()].sort(byName).map((tor) => el('div', { class: 'tor-group', 'data-tor': tor },
    el('h3', {}, tor || '(no ToR)'),
    el('div', { class: 'hosts' }, [...tors.get(tor).keys()].sort(byName).map((host) => el('div', { class: 'host', 'data-host': host },
      el('div', { class: 'host-name' }, host),
      el('div', { class: 'chips' }, tors.get(tor).get(host).sort((a, b) => byName(a.ifname, b.ifname)).map((r) => {
        const { status, why } = statusOf(r, problems, probed);
        counts[status] += 1;
        return el('span', {
          class: `chip ${status}`,
          'data-rnic': `${r.host}/${r.ifname}`,
          'data-rnic-id': r.id,
          'data-status': status,
          title: `${r.host}/${r.ifname} #${r.id} ${r.ip}\n${status}: ${why}`,
        }, r.ifname);
      })))))));
  container.replaceChildren(rnics.length ? el('div', { class: 'tors' }, groups) : el('p', { class: 'empty' }, 'No RNIC registered yet.'));
  return counts;
}
