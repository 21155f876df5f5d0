// The dashboard page: fetches every panel's data each refresh, independently, so a
// failing endpoint only marks its own panel unavailable.

import { getJson, onUnauthorized, setToken, token } from './api.js';
import { renderDrilldown } from './drilldown.js';
import { el, fmtNs, fmtPct, fmtTime, setPanelState } from './format.js';
import { renderHeatmap } from './heatmap.js';
import { renderTasks, renderVerdict } from './tasks.js';
import { openProblem, renderProblems } from './problems.js';
import { renderRnics } from './rnics.js';
import { renderServiceSla } from './sla.js';

const REFRESH_MS = 5000;

const $ = (id) => document.getElementById(id);
/** The page's link parameters: `#pair=t0->t1&problem=42` (links can be shared). */
const linked = new URLSearchParams(location.hash.slice(1));

const view = { metric: 'rtt', selected: pairFromHash(), rangeMs: 3600_000, task: linked.get('task') };
let last = null;

/** `pair=t0->t1` opens that pair's drill-down. */
function pairFromHash() {
  const parts = (linked.get('pair') || '').split('->');
  return parts.length === 2 ? parts : null;
}

function settled(result) {
  return result.status === 'fulfilled' ? [result.value, null] : [null, result.reason];
}

function summary(cluster, problems) {
  const c = cluster?.[0];
  const active = (problems || []).filter((p) => p.state === 'active');
  const prios = ['P0', 'P1', 'P2'].map((p) => [p, active.filter((x) => x.priority === p).length]);
  const item = (label, value, cls = '') => el('span', { class: `stat ${cls}` }, el('span', { class: 'label' }, label), el('span', { class: 'value' }, value));
  return [
    item('cluster p99 RTT', c ? fmtNs(c.network_rtt_ns.p99) : '—'),
    item('loss', c ? fmtPct(c.timeout_rate) : '—', c && c.timeouts > 0 ? 'warn' : ''),
    item('probes / period', c ? String(c.probes) : '—'),
    item('active problems', problems ? String(active.length) : '—', active.length ? 'bad' : 'good'),
    ...prios.filter(([, n]) => n).map(([p, n]) => item(p, String(n), `prio-${p}`)),
  ];
}

function drawHeatmap() {
  const panel = $('heatmap-panel');
  const [rows, err] = last.pairs;
  setPanelState(panel, err, last.topology[1] ? 'topology unavailable: ToRs taken from the SLA rows' : '');
  if (err) {
    $('heatmap').replaceChildren();
    $('legend').replaceChildren();
    return;
  }
  renderHeatmap($('heatmap'), $('legend'), {
    topology: last.topology[0], rows, metric: view.metric, selected: view.selected && view.selected.join('->'),
  }, (src, dst) => {
    view.selected = [src, dst];
    history.replaceState(null, '', `#pair=${encodeURIComponent(`${src}->${dst}`)}`);
    drawHeatmap();
    drillDown();
  });
}

async function drillDown() {
  const panel = $('drilldown-panel');
  if (!view.selected) {
    panel.hidden = true;
    return;
  }
  const [src, dst] = view.selected;
  panel.hidden = false;
  $('drilldown-title').textContent = `${src} → ${dst}`;
  panel.dataset.pair = `${src}->${dst}`;
  await renderDrilldown($('drilldown'), { src, dst, rangeMs: view.rangeMs, names: rnicNames() }, getJson);
}

/** RNIC address -> `host/ifname`, from the last registry read. */
function rnicNames() {
  return new Map((last?.rnics[0] || []).map((r) => [r.ip, `${r.host}/${r.ifname}`]));
}

async function refresh() {
  const results = await Promise.allSettled([
    getJson('/api/v1/topology'),
    getJson('/api/v1/sla/latest?scope=tor_pair'),
    getJson('/api/v1/sla/latest?scope=cluster'),
    getJson('/api/v1/sla/latest?scope=rnic'),
    getJson('/api/v1/rnics'),
    getJson('/api/v1/problems?state=all&limit=100'),
    getJson('/api/v1/sla/latest?scope=task'),
    getJson('/api/v1/sla/latest?scope=service'),
  ]);
  const [topology, pairs, cluster, rnicRows, rnics, problems, tasks, service] = results.map(settled);
  last = { topology, pairs, cluster, rnicRows, rnics, problems };

  drawHeatmap();
  await drawTasks();

  setPanelState($('problems-panel'), problems[1]);
  if (problems[0]) renderProblems($('problems'), problems[0], rnicNames());
  else $('problems').replaceChildren();

  const rnicPanel = $('rnics-panel');
  const partial = [problems[1] && 'problems', rnicRows[1] && 'RNIC SLA'].filter(Boolean);
  setPanelState(rnicPanel, rnics[1], partial.length ? `${partial.join(' and ')} unavailable: statuses are partial` : '');
  if (rnics[0]) {
    const active = problems[0] && problems[0].filter((p) => p.state === 'active');
    renderRnics($('rnics'), { rnics: rnics[0], problems: active, rnicRows: rnicRows[0] });
  } else {
    $('rnics').replaceChildren();
  }

  setPanelState($('service-panel'), tasks[1] || service[1]);
  if (tasks[0] || service[0]) renderServiceSla($('service-sla'), { tasks: tasks[0], service: service[0] });
  else $('service-sla').replaceChildren();

  $('summary').replaceChildren(...summary(cluster[0], problems[0]));
  const failed = results.filter((r) => r.status === 'rejected').length;
  const stamp = $('refreshed');
  stamp.textContent = failed === results.length
    ? `server unreachable · retrying every ${REFRESH_MS / 1000} s`
    : `updated ${fmtTime(Date.now())} · every ${REFRESH_MS / 1000} s${failed ? ` · ${failed} endpoint(s) failing` : ''}`;
  stamp.classList.toggle('bad', failed > 0);
  document.body.dataset.refreshed = String(Date.now());
  if (view.selected) await drillDown();
}

/** The task list and, for the selected task (`#task=ID`), its verdict. */
async function drawTasks() {
  const panel = $('tasks-panel');
  let tasks;
  try {
    tasks = await getJson('/api/v1/tasks');
    setPanelState(panel, null);
  } catch (e) {
    setPanelState(panel, e);
    $('tasks').replaceChildren();
    $('task-verdict').replaceChildren();
    return;
  }
  renderTasks($('tasks'), tasks, view.task, (id) => {
    view.task = String(id);
    history.replaceState(null, '', `#task=${id}`);
    drawTasks();
  });
  if (!view.task || !tasks.some((t) => String(t.id) === view.task)) {
    $('task-verdict').replaceChildren();
    return;
  }
  try {
    renderVerdict($('task-verdict'), await getJson(`/api/v1/tasks/${view.task}/verdict`));
  } catch (e) {
    setPanelState(panel, e);
  }
}

function setupControls() {
  for (const b of document.querySelectorAll('.toggle button')) {
    b.addEventListener('click', () => {
      view.metric = b.dataset.metric;
      for (const o of document.querySelectorAll('.toggle button')) o.classList.toggle('on', o === b);
      if (last) drawHeatmap();
    });
  }
  $('drilldown-range').addEventListener('change', (e) => {
    view.rangeMs = Number(e.target.value);
    drillDown();
  });
  $('drilldown-close').addEventListener('click', () => {
    view.selected = null;
    history.replaceState(null, '', location.pathname);
    drillDown();
    if (last) drawHeatmap();
  });
  const form = $('auth');
  onUnauthorized(() => {
    form.hidden = false;
  });
  $('token').value = token();
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setToken($('token').value.trim());
    form.hidden = true;
    refresh();
  });
}

async function loop() {
  try {
    await refresh();
  } finally {
    setTimeout(loop, REFRESH_MS);
  }
}

// `problem=42` opens that problem's evidence.
if (linked.get('problem')) openProblem(linked.get('problem'));
setupControls();
loop();
