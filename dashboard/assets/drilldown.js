// Drill-down of one ToR pair: its recent SLA periods as an inline SVG chart
// (p50/p99 network RTT, loss bars) and the latest traced paths between the ToRs.

import { el, fmtNs, fmtPct, fmtTime, svg } from './format.js';

const W = 720;
const H = 190;
const PAD = { left: 64, right: 72, top: 12, bottom: 26 };

/** The chart of `rows` (one ToR pair, any order). */
function chart(rows) {
  const pts = [...rows].sort((a, b) => a.period_start_ms - b.period_start_ms);
  // A period covers [start, start + period_ms): its bar spans it, its point sits mid-way.
  const t0 = pts[0].period_start_ms;
  const t1 = pts[pts.length - 1].period_start_ms + pts[pts.length - 1].period_ms;
  const mid = (r) => r.period_start_ms + r.period_ms / 2;
  const maxRtt = Math.max(1, ...pts.map((r) => r.network_rtt_ns.p99 ?? 0));
  const maxLoss = Math.max(0.01, ...pts.map((r) => r.timeout_rate));
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v, max) => H - PAD.bottom - (v / max) * (H - PAD.top - PAD.bottom);
  const line = (pick, cls) => svg('polyline', {
    class: cls,
    points: pts.filter((r) => pick(r) !== null).map((r) => `${x(mid(r)).toFixed(1)},${y(pick(r), maxRtt).toFixed(1)}`).join(' '),
  });
  const bars = pts.filter((r) => r.timeout_rate > 0).map((r) => svg('rect', {
    class: 'loss-bar',
    x: (x(r.period_start_ms) + 1).toFixed(1),
    y: y(r.timeout_rate, maxLoss).toFixed(1),
    width: Math.max(1, x(r.period_start_ms + r.period_ms) - x(r.period_start_ms) - 2).toFixed(1),
    height: (H - PAD.bottom - y(r.timeout_rate, maxLoss)).toFixed(1),
  }, svg('title', {}, `${fmtTime(r.period_start_ms)} loss ${fmtPct(r.timeout_rate)}`)));
  const dots = pts.filter((r) => r.network_rtt_ns.p99 !== null).map((r) => svg('circle', {
    class: 'p99-dot', cx: x(mid(r)).toFixed(1), cy: y(r.network_rtt_ns.p99, maxRtt).toFixed(1), r: 2.5,
  }, svg('title', {}, `${fmtTime(r.period_start_ms)} p99 ${fmtNs(r.network_rtt_ns.p99)} · p50 ${fmtNs(r.network_rtt_ns.p50)} · loss ${fmtPct(r.timeout_rate)}`)));
  const text = (tx, ty, s, anchor = 'start', cls = 'axis') => {
    const t = svg('text', { x: tx, y: ty, 'text-anchor': anchor, class: cls });
    t.textContent = s;
    return t;
  };
  return svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'series', role: 'img', 'data-periods': pts.length },
    svg('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(maxRtt, maxRtt), y2: y(maxRtt, maxRtt) }),
    svg('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(maxRtt / 2, maxRtt), y2: y(maxRtt / 2, maxRtt) }),
    svg('line', { class: 'axis-line', x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom }),
    ...bars,
    line((r) => r.network_rtt_ns.p50, 'p50'),
    line((r) => r.network_rtt_ns.p99, 'p99'),
    ...dots,
    text(PAD.left - 6, y(maxRtt, maxRtt) + 4, fmtNs(maxRtt), 'end'),
    text(PAD.left - 6, y(maxRtt / 2, maxRtt) + 4, fmtNs(maxRtt / 2), 'end'),
    text(PAD.left - 6, H - PAD.bottom + 4, '0', 'end'),
    text(W - PAD.right + 6, y(maxLoss, maxLoss) + 4, fmtPct(maxLoss), 'start', 'axis loss'),
    text(PAD.left, H - 6, fmtTime(t0)),
    text(W - PAD.right, H - 6, fmtTime(t1), 'end'));
}

function seriesView(rows) {
  if (!rows.length) return el('p', { class: 'empty' }, 'No stored period for this pair yet.');
  const keyItem = (cls, label) => el('span', { class: `series-key ${cls}` }, label);
  return el('div', {}, chart(rows),
    el('div', { class: 'series-keys' }, keyItem('p99', 'p99 RTT'), keyItem('p50', 'p50 RTT'), keyItem('loss', 'loss (right axis)')));
}

function pathsView(paths, names) {
  const end = (ip, port) => (names.has(ip) ? `${names.get(ip)} (${ip}:${port})` : `${ip}:${port}`);
  if (!paths.length) return el('p', { class: 'empty' }, 'No traced path between these ToRs yet.');
  return el('ul', { class: 'paths' }, paths.map((p) => el('li', {
    class: `path ${p.reached ? 'reached' : 'broken'}`,
    'data-direction': p.direction,
    'data-hops': p.hop_names.join(' '),
  },
  el('span', { class: 'tuple' }, `${end(p.src, p.src_port)} → ${end(p.dst, p.dst_port)}`, p.direction === 'ack' ? el('span', { class: 'tag' }, 'ack') : null),
  el('span', { class: 'hops' }, p.hop_names.flatMap((h, i) => [i ? el('span', { class: 'arrow' }, '→') : null, el('span', { class: h === '*' ? 'hop silent' : 'hop' }, h)])),
  el('span', { class: `tag ${p.reached ? 'ok' : 'bad'}` }, p.reached ? 'reached' : 'broke off'),
  el('span', { class: 'when' }, fmtTime(p.traced_at_ms)))));
}

/** Most periods a drill-down reads (a week of 20 s periods would be 30,240). */
const MAX_PERIODS = 10000;

/**
 * Fills `container` with the periods of the ToR pair `src` -> `dst` started in the last
 * `rangeMs`, and its latest traced paths (RNIC addresses named by `names`); each half
 * says on its own when its endpoint fails. `getJson` is the API client.
 */
export async function renderDrilldown(container, { src, dst, rangeMs, names }, getJson) {
  const key = `${src}->${dst}`;
  const q = (o) => new URLSearchParams(o).toString();
  const fromMs = Date.now() - rangeMs;
  container.dataset.fromMs = String(fromMs);
  const [series, paths] = await Promise.allSettled([
    getJson(`/api/v1/sla?${q({ scope: 'tor_pair', key, from_ms: fromMs, limit: MAX_PERIODS })}`),
    getJson(`/api/v1/paths?${q({ src_tor: src, dst_tor: dst, limit: 8 })}`),
  ]);
  const part = (title, result, view, cls) => el('div', { class: `drill-part ${cls}` }, el('h3', {}, title),
    result.status === 'fulfilled'
      ? view(result.value)
      : el('p', { class: 'part-unavailable' }, `unavailable — ${result.reason.path} ${result.reason.message}`));
  container.replaceChildren(
    part('Recent periods', series, seriesView, 'drill-series'),
    part('Traced paths', paths, (v) => pathsView(v.paths, names), 'drill-paths'));
}
