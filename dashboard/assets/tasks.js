// Training tasks: one row per task (phase, endpoints, probed pairs); the selected task
// opens its verdict — is the network to blame, did it hang or slow down, in
// communication or computation, which rank held it back — with its iteration windows
// drawn as a strip (one cell per window, coloured by class) and the probe matrix's
// attributions.

import { el, fmtTime } from './format.js';

/** Window classes, healthiest first, with their labels. */
const CLASSES = {
  healthy: 'healthy',
  communication_slow: 'communication slow',
  non_communication_slow: 'non-communication slow',
  communication_hang: 'communication hang',
  non_communication_hang: 'non-communication hang',
};

const label = (c) => CLASSES[c] || c || '—';

/** Draws the task list; `onSelect(id)` runs when a row is clicked. */
export function renderTasks(container, tasks, selected, onSelect) {
  if (!tasks.length) {
    container.replaceChildren(el('p', { class: 'empty' }, 'No task defined yet.'));
    return;
  }
  const rows = tasks.map((t) => {
    const tr = el('tr', {
      class: `task-row${String(t.id) === String(selected) ? ' selected' : ''}`,
      'data-task-id': t.id, tabindex: 0,
    },
    el('td', {}, t.name), el('td', {}, String(t.id)), el('td', {}, t.phase),
    el('td', {}, String(t.endpoints.length)), el('td', {}, String(t.active_pairs)));
    const pick = () => onSelect(t.id);
    tr.addEventListener('click', pick);
    tr.addEventListener('keydown', (e) => { if (e.key === 'Enter') pick(); });
    return tr;
  });
  container.replaceChildren(el('table', { class: 'tasks' },
    el('thead', {}, el('tr', {}, ...['Task', 'Id', 'Phase', 'Endpoints', 'Probed pairs'].map((h) => el('th', {}, h)))),
    el('tbody', {}, ...rows)));
}

/** Draws task verdict `v` (the `GET /api/v1/tasks/{id}/verdict` body). */
export function renderVerdict(container, v) {
  const h = v.health;
  const rank = (i) => (h && i != null ? h.ranks[i] || `rank ${i}` : '—');
  const parts = [
    el('p', { class: 'verdict', 'data-verdict': v.verdict },
      el('strong', {}, v.verdict.replace(/_/g, ' ')), ' — ', v.reason),
  ];
  if (!h) {
    parts.push(el('p', { class: 'health none' }, `Hang/slow not judged: ${v.health_note || 'no data'}`));
    container.replaceChildren(...parts);
    return;
  }
  parts.push(el('p', { class: 'health', 'data-worst': h.worst || '', 'data-straggler': h.straggler || '' },
    el('strong', {}, label(h.worst)),
    h.straggler ? ` · straggler ${h.straggler}` : '',
    h.baseline_period_ms ? ` · healthy period ${Math.round(h.baseline_period_ms)} ms` : '',
    h.note ? ` · ${h.note}` : ''));
  parts.push(el('div', { class: 'windows', 'data-windows': h.windows.length },
    ...h.windows.map((w) => el('span', {
      class: `window ${w.class}`,
      'data-class': w.class,
      title: `${fmtTime(w.from_ms)}–${fmtTime(w.to_ms)} ${label(w.class)}${w.straggler != null ? ` · ${rank(w.straggler)}` : ''}\n${w.evidence}`,
    }))));
  const bad = h.windows.filter((w) => w.class !== 'healthy').slice(-5).reverse();
  if (bad.length) {
    parts.push(el('table', { class: 'bad-windows' },
      el('thead', {}, el('tr', {}, ...['From', 'Class', 'Straggler', 'Evidence'].map((x) => el('th', {}, x)))),
      el('tbody', {}, ...bad.map((w) => el('tr', { 'data-class': w.class },
        el('td', {}, fmtTime(w.from_ms)), el('td', {}, label(w.class)),
        el('td', {}, rank(w.straggler)), el('td', {}, w.evidence))))));
  }
  if (h.attributions.length) {
    parts.push(el('ul', { class: 'attributions' }, ...h.attributions.map((a) => el('li', { 'data-blame': a.blame },
      `${a.blame}: ${a.pair ? `${rank(a.pair[0])} → ${rank(a.pair[1])}` : rank(a.rank)} — ${a.evidence}`))));
  }
  container.replaceChildren(...parts);
}
