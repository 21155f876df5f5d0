// Active and recent problems: what broke, where, how sure, how much it matters. A row
// opens (click or Enter) into its evidence: counts, the rule's explanation, a link's
// faulty direction, a flow's suspects, slow RNIC pairs and example paths, with RNIC
// addresses named `host/ifname`.

import { el, fmtAge, fmtNs, fmtTime } from './format.js';

const PRIORITY_RANK = { P0: 0, P1: 1, P2: 2 };
/** Ids of the rows the operator opened (kept across refreshes). */
const open = new Set();

/** Opens problem `id`'s evidence (from a link) when its row is drawn. */
export function openProblem(id) {
  open.add(String(id));
}

function order(a, b) {
  const active = (p) => (p.state === 'active' ? 0 : 1);
  const rank = (p) => PRIORITY_RANK[p.priority] ?? 3;
  return active(a) - active(b) || rank(a) - rank(b) || b.last_seen_ms - a.last_seen_ms;
}

/** `text` with every registered RNIC address replaced by `host/ifname`. */
export function nameAddresses(text, names) {
  return text.replace(/\b(?:\d{1,3}\.){3}\d{1,3}\b|\b[0-9a-f]*:[0-9a-f:]+\b/gi, (ip) => names.get(ip) || ip);
}

const direction = (d) => (d ? `${d.from} → ${d.to}` : '');

/**
 * What the Component column says: the component, a link's faulty direction, a flow's top
 * suspect, or the components the probes cannot tell from it (listed after it).
 */
function componentCell(p) {
  const d = p.evidence.direction;
  const c = p.evidence.candidates || [];
  let tag = null;
  if (p.component_kind === 'flow' && c[0]) {
    tag = el('span', { class: 'tag suspect' }, `suspect ${c[0].component} ${Math.round(c[0].confidence * 100)} %`);
  } else if (c.length > 1) {
    tag = el('span', { class: 'tag suspect' }, `or ${c.slice(1).map((x) => x.component).join(', ')}`);
  }
  return el('td', { class: 'component' }, el('span', { class: 'ckind' }, p.component_kind), ' ', p.component,
    d ? el('span', { class: 'tag direction', 'data-direction': direction(d) }, direction(d)) : null, tag);
}

/** The opened evidence of `p`. */
/** Bytes per second as a human bit rate. */
function fmtRate(bytesPerS) {
  const bits = bytesPerS * 8;
  const [v, unit] = bits >= 1e9 ? [bits / 1e9, 'Gb/s'] : bits >= 1e6 ? [bits / 1e6, 'Mb/s'] : [bits / 1e3, 'kb/s'];
  return `${v.toFixed(1)} ${unit}`;
}

function evidenceView(p, names) {
  const e = p.evidence;
  const items = [
    el('div', { class: 'ev-counts' }, `${e.probes} probes, ${e.timeouts} lost or slow, ${e.votes} votes, ${e.ok_paths} good paths through it`),
    e.detail ? el('div', { class: 'ev-detail' }, nameAddresses(e.detail, names)) : null,
    e.direction ? el('div', { class: 'ev-direction' }, `faulty direction: ${direction(e.direction)} (the other direction is healthy)`) : null,
  ];
  if (e.candidates?.length) {
    items.push(el('h3', {}, 'Suspects'), el('ol', { class: 'ev-candidates' }, e.candidates.map((c) => el('li', {
      'data-component': c.component, 'data-component-kind': c.component_kind,
    }, `${c.component_kind} ${c.component}${c.direction ? ` (${direction(c.direction)})` : ''} — ${Math.round(c.confidence * 100)} %`))));
  }
  if (e.latency_pairs?.length) {
    items.push(el('h3', {}, 'Slow RNIC pairs'), el('ul', { class: 'ev-latency' }, e.latency_pairs.map((l) => el('li', {},
      `${nameAddresses(l.prober, names)} → ${nameAddresses(l.target, names)}: ${l.detector}, reference ${fmtNs(l.reference_ns)}, slow above ${fmtNs(l.slow_above_ns)}, since ${fmtTime(l.since_ms)}`))));
  }
  if (e.blamed?.length) {
    items.push(el('h3', {}, 'Traffic across it'), el('ol', { class: 'ev-blamed' }, e.blamed.map((b) => el('li', {
      'data-blamed': b.name,
    }, `${b.task_id != null ? 'task ' : ''}${b.name}: ${Math.round(b.share * 100)} % (${b.flows} flow${b.flows === 1 ? '' : 's'}${b.bytes_per_s != null ? `, ${fmtRate(b.bytes_per_s)}` : ''})`))));
  }
  if (e.labels?.length) {
    items.push(el('h3', {}, 'Task endpoints'), el('ul', { class: 'ev-labels' }, e.labels.map((l) => el('li', {},
      [l.task, l.namespace, l.pod].filter(Boolean).join(' / ')))));
  }
  if (e.example_paths?.length) {
    items.push(el('h3', {}, 'Example paths'), el('ul', { class: 'ev-paths' }, e.example_paths.map((x) => el('li', { class: 'ev-path' }, nameAddresses(x, names)))));
  }
  return el('div', { class: 'evidence-box' }, items);
}

/**
 * Draws the problem table; `problems` as `/api/v1/problems?state=all` lists them,
 * `names` maps RNIC addresses to `host/ifname`.
 */
export function renderProblems(container, problems, names = new Map(), now = Date.now()) {
  if (!problems.length) {
    container.replaceChildren(el('p', { class: 'empty good' }, 'No problem seen.'));
    return;
  }
  const columns = ['Priority', 'State', 'Kind', 'Component', 'Confidence', 'First seen', 'Last seen', 'Evidence'];
  const head = el('tr', {}, columns.map((h) => el('th', {}, h)));
  const body = [...problems].sort(order).flatMap((p) => {
    const id = String(p.id);
    const opened = open.has(id);
    const row = el('tr', {
      class: `problem ${p.state}${opened ? ' open' : ''}`,
      'data-id': p.id,
      'data-kind': p.kind,
      'data-component': p.component,
      'data-component-kind': p.component_kind,
      'data-state': p.state,
      'data-priority': p.priority || '',
      tabindex: 0,
      'aria-expanded': String(opened),
    },
    el('td', {}, p.priority ? el('span', { class: `prio ${p.priority}` }, p.priority) : '—'),
    el('td', {}, el('span', { class: `state ${p.state}` }, p.state === 'active' ? 'active' : `resolved ${fmtAge(now - (p.resolved_ms || p.last_seen_ms))} ago`)),
    el('td', {}, p.kind.replaceAll('_', ' ')),
    componentCell(p),
    el('td', { class: 'num' }, `${Math.round(p.confidence * 100)} %`),
    el('td', {}, fmtTime(p.first_seen_ms)),
    el('td', {}, fmtTime(p.last_seen_ms)),
    el('td', { class: 'evidence' }, nameAddresses(p.evidence.detail || `${p.evidence.timeouts}/${p.evidence.probes} probes lost`, names)));
    const detail = el('tr', { class: 'problem-evidence', 'data-id': p.id, hidden: !opened },
      el('td', { colspan: columns.length }, evidenceView(p, names)));
    const toggle = () => {
      const now_open = !open.has(id);
      if (now_open) open.add(id);
      else open.delete(id);
      row.classList.toggle('open', now_open);
      row.setAttribute('aria-expanded', String(now_open));
      detail.hidden = !now_open;
    };
    row.addEventListener('click', toggle);
    row.addEventListener('keydown', (e) => { if (e.key === 'Enter') toggle(); });
    return [row, detail];
  });
  container.replaceChildren(el('table', { class: 'problems' }, el('thead', {}, head), el('tbody', {}, body)));
}
