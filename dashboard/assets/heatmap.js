// The Pingmesh-style ToR × ToR matrix: one cell per (source ToR, destination ToR)
// of the latest SLA period, coloured by p99 network RTT or by loss (timeout rate) on a
// colour-blind-safe scale (cividis: dark blue is good, yellow is bad).

import { byName, el, fmtNs, fmtPct, fmtTime } from './format.js';

/** RTT colour: the fabric's median p99 is green, 4× the median and above is red. */
const RTT_RED_FACTOR = 4;
/** Loss colour: 0.01 % is almost green, 10 % and above is red (log scale). */
const LOSS_GREEN = 1e-4;
const LOSS_RED = 1e-1;
/** In the RTT view a pair with any loss is at least this bad: never drawn healthy. */
export const LOSSY_FLOOR = 0.5;
/** Cividis at 0, ¼, ½, ¾, 1 (perceptually uniform, readable with colour-vision deficiency). */
const PALETTE = [[0, 34, 78], [65, 77, 107], [124, 123, 120], [188, 175, 111], [254, 232, 56]];

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  return v.length ? v[Math.floor(v.length / 2)] : null;
}

/** 0 (no loss) .. 1 (≥ LOSS_RED) on a log scale; any loss is at least 0.08. */
function lossBadness(row) {
  if (!row.timeouts) return 0;
  const t = Math.log10(row.timeout_rate / LOSS_GREEN) / Math.log10(LOSS_RED / LOSS_GREEN);
  return Math.min(1, Math.max(0.08, t));
}

/** 0 (good) .. 1 (bad) for a cell; in the RTT view loss raises it to LOSSY_FLOOR or more. */
export function badness(row, metric, rttMedian) {
  if (metric === 'loss') return lossBadness(row);
  const p99 = row.network_rtt_ns.p99;
  // Every probe lost: no RTT at all is the worst RTT.
  if (p99 === null) return row.probes > 0 ? 1 : null;
  const rtt = rttMedian
    ? Math.min(1, Math.max(0, Math.log(p99 / rttMedian) / Math.log(RTT_RED_FACTOR)))
    : 0;
  return row.timeouts > 0 ? Math.max(rtt, LOSSY_FLOOR, lossBadness(row)) : rtt;
}

/** The palette colour at `t` in [0, 1] as `rgb(r, g, b)` (linear between stops). */
export function colour(t) {
  if (t === null) return '';
  const x = Math.min(1, Math.max(0, t)) * (PALETTE.length - 1);
  const i = Math.min(PALETTE.length - 2, Math.floor(x));
  const f = x - i;
  const c = PALETTE[i].map((v, k) => Math.round(v + (PALETTE[i + 1][k] - v) * f));
  return `rgb(${c.join(', ')})`;
}

/** ToR names: the topology's, plus any an SLA row names (the topology may be unavailable). */
function torNames(topology, rows) {
  const names = new Set((topology?.tors || []).map((t) => t.name));
  for (const r of rows) {
    const [src, dst] = r.key.split('->');
    if (src !== undefined && dst !== undefined) names.add(src).add(dst);
  }
  return [...names].sort(byName);
}

function legend(metric, rttMedian) {
  const stops = [0, 0.25, 0.5, 0.75, 1].map(colour).join(', ');
  const [lo, hi] = metric === 'loss'
    ? ['0 %', `≥ ${fmtPct(LOSS_RED)}`]
    : [rttMedian ? `${fmtNs(rttMedian)} (median)` : 'median', `≥ ${RTT_RED_FACTOR}× median`];
  const bar = el('span', { class: 'bar' });
  bar.style.background = `linear-gradient(to right, ${stops})`;
  return [el('span', {}, lo), bar, el('span', {}, hi),
    el('span', { class: 'chip nodata' }, 'no data'),
    metric === 'rtt' ? el('span', { class: 'chip lossy-key' }, 'loss seen') : null];
}

/**
 * Draws the matrix into `container` (and its scale into `legendBox`). `rows` are the
 * tor_pair SLA rows of one period; `selected` is the "src->dst" key of the open
 * drill-down; `onSelect(src, dst)` is called when a cell is clicked.
 */
export function renderHeatmap(container, legendBox, { topology, rows, metric, selected }, onSelect) {
  const byKey = new Map(rows.map((r) => [r.key, r]));
  const tors = torNames(topology, rows);
  const rttMedian = median(rows.map((r) => r.network_rtt_ns.p99).filter((v) => v !== null));
  const period = rows[0]?.period_start_ms;

  const head = el('tr', {}, el('th', { class: 'corner' }, 'src ╲ dst'),
    tors.map((t) => el('th', { class: 'dst', scope: 'col', 'data-tor': t }, t)));
  const body = tors.map((src) => el('tr', {},
    el('th', { class: 'src', scope: 'row', 'data-tor': src }, src),
    tors.map((dst) => {
      const key = `${src}->${dst}`;
      const row = byKey.get(key);
      if (!row) {
        return el('td', { class: 'cell nodata', 'data-src': src, 'data-dst': dst, title: `${src} → ${dst}: no data` }, '—');
      }
      const rtt = fmtNs(row.network_rtt_ns.p99);
      const loss = fmtPct(row.timeout_rate);
      const td = el('td', {
        class: ['cell', row.timeouts > 0 ? 'lossy' : '', key === selected ? 'selected' : ''].join(' ').trim(),
        'data-src': src,
        'data-dst': dst,
        'data-probes': row.probes,
        'data-timeouts': row.timeouts,
        'data-loss': row.timeout_rate,
        'data-rtt-p99-ns': row.network_rtt_ns.p99 ?? '',
        'data-rtt-p50-ns': row.network_rtt_ns.p50 ?? '',
        title: `${src} → ${dst}\np99 RTT ${rtt} · p50 ${fmtNs(row.network_rtt_ns.p50)}\n`
          + `loss ${loss} (${row.timeouts}/${row.probes} probes)\nperiod ${fmtTime(row.period_start_ms)}`,
        tabindex: 0,
      }, el('span', { class: 'value' }, metric === 'loss' ? loss : rtt),
      // Loss matters in either view: the RTT view names it under the value.
      metric === 'rtt' && row.timeouts > 0 ? el('span', { class: 'sub' }, `${loss} loss`) : null);
      const bad = badness(row, metric, rttMedian);
      td.style.background = colour(bad);
      td.dataset.badness = bad === null ? '' : bad.toFixed(3);
      // Dark text on the light (bad) end of the scale.
      if (bad !== null && bad > 0.6) td.classList.add('light');
      const open = () => onSelect(src, dst);
      td.addEventListener('click', open);
      td.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
      return td;
    })));

  const table = el('table', { class: 'heatmap', 'data-metric': metric, 'data-period-start-ms': period ?? '' },
    el('thead', {}, head), el('tbody', {}, body));
  container.replaceChildren(tors.length ? table : el('p', { class: 'empty' }, 'No ToR-pair data yet (waiting for the first finalized period).'));
  legendBox.replaceChildren(...legend(metric, rttMedian).filter(Boolean));
  return period;
}
