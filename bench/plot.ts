// SVG charts for the benchmark results: grouped bars (one group per path or case, one bar
// per series) and lines over a logarithmic x axis (the Service count). Whiskers show the
// spread of the repeated runs (min to max). Plain SVG 1.1, no scripts, readable in a
// browser or on GitHub.

export interface Whisker { lo: number; hi: number }

export interface BarSeries { name: string; values: Array<number | null>; spread?: Array<Whisker | null> }
export interface BarChart { title: string; yLabel: string; groups: string[]; series: BarSeries[] }

export interface LinePoint { x: number; y: number; spread?: Whisker }
export interface LineSeries { name: string; points: LinePoint[] }
export interface LineChart { title: string; xLabel: string; yLabel: string; series: LineSeries[]; logY?: boolean; /** x from 0, linear (time); default: log x (counts). */ linearX?: boolean }

const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#b07aa1', '#edc948', '#9c755f'];
const W = 760;
const H = 420;
const M = { top: 48, right: 190, bottom: 80, left: 72 };
const PW = W - M.left - M.right;
const PH = H - M.top - M.bottom;

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const num = (v: number) => (Number.isInteger(v) || Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : String(Number(v.toPrecision(2))));

/** Round tick values covering [0, max]. */
function linearTicks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let v = 0; v <= max + step * 0.999; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** Powers of ten covering [min, max] (both > 0: a log axis has no place for 0). */
function logTicks(min: number, max: number): number[] {
  if (!(min > 0 && max >= min && Number.isFinite(max))) throw new Error(`a log axis needs values > 0, got ${min}..${max} (use a linear axis)`);
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) ticks.push(10 ** e);
  return ticks;
}

function frame(title: string, yLabel: string, body: string[], legend: string[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2 - M.right / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text transform="translate(18 ${M.top + PH / 2}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`,
    ...body,
    ...legend.map((name, i) => `<rect x="${W - M.right + 16}" y="${M.top + i * 20}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/><text x="${W - M.right + 34}" y="${M.top + i * 20 + 10}">${esc(name)}</text>`),
    '</svg>',
    '',
  ].join('\n');
}

function yAxis(ticks: number[], y: (v: number) => number): string[] {
  return ticks.flatMap((t) => [
    `<line x1="${M.left}" x2="${M.left + PW}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#ddd"/>`,
    `<text x="${M.left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${num(t)}</text>`,
  ]);
}

function whisker(x: number, lo: number, hi: number): string {
  return `<path d="M${x.toFixed(1)} ${lo.toFixed(1)}V${hi.toFixed(1)}M${(x - 4).toFixed(1)} ${lo.toFixed(1)}h8M${(x - 4).toFixed(1)} ${hi.toFixed(1)}h8" stroke="#333" fill="none"/>`;
}

export function barChart(c: BarChart): string {
  const all = c.series.flatMap((s) => s.values.map((v, i) => Math.max(v ?? 0, s.spread?.[i]?.hi ?? 0)));
  const ticks = linearTicks(Math.max(...all, 0));
  const top = ticks[ticks.length - 1]!;
  const y = (v: number) => M.top + PH - (v / top) * PH;
  const groupW = PW / c.groups.length;
  const barW = (groupW * 0.8) / c.series.length;
  const body = yAxis(ticks, y);
  c.groups.forEach((g, gi) => {
    const gx = M.left + gi * groupW + groupW * 0.1;
    c.series.forEach((s, si) => {
      const v = s.values[gi];
      if (v === null || v === undefined) return;
      const x = gx + si * barW;
      body.push(`<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${(M.top + PH - y(v)).toFixed(1)}" fill="${COLORS[si % COLORS.length]}"><title>${esc(`${g}, ${s.name}: ${num(v)}`)}</title></rect>`);
      const w = s.spread?.[gi];
      if (w) body.push(whisker(x + (barW - 2) / 2, y(w.lo), y(w.hi)));
    });
    body.push(`<text x="${(gx + groupW * 0.4).toFixed(1)}" y="${M.top + PH + 16}" text-anchor="middle">${esc(g)}</text>`);
  });
  body.push(`<line x1="${M.left}" x2="${M.left + PW}" y1="${M.top + PH}" y2="${M.top + PH}" stroke="#333"/>`);
  return frame(c.title, c.yLabel, body, c.series.map((s) => s.name));
}

export function lineChart(c: LineChart): string {
  const pts = c.series.flatMap((s) => s.points);
  const xs = pts.map((p) => p.x);
  const ys = pts.flatMap((p) => [p.y, p.spread?.hi ?? p.y, p.spread?.lo ?? p.y]).filter((v) => v > 0);
  const lx = (v: number) => Math.log10(v);
  const xTicks = c.linearX ? linearTicks(Math.max(...xs)) : logTicks(Math.min(...xs), Math.max(...xs));
  const x = c.linearX
    ? (v: number) => M.left + (v / xTicks[xTicks.length - 1]!) * PW
    : (v: number) => M.left + ((lx(v) - lx(xTicks[0]!)) / (lx(xTicks[xTicks.length - 1]!) - lx(xTicks[0]!) || 1)) * PW;
  let yTicks: number[];
  let y: (v: number) => number;
  if (c.logY) {
    yTicks = logTicks(Math.min(...ys), Math.max(...ys));
    const [a, b] = [lx(yTicks[0]!), lx(yTicks[yTicks.length - 1]!)];
    y = (v) => M.top + PH - ((lx(v) - a) / (b - a || 1)) * PH;
  } else {
    yTicks = linearTicks(Math.max(...ys));
    const top = yTicks[yTicks.length - 1]!;
    y = (v) => M.top + PH - (v / top) * PH;
  }
  const body = yAxis(yTicks, y);
  for (const t of xTicks) body.push(`<text x="${x(t).toFixed(1)}" y="${M.top + PH + 16}" text-anchor="middle">${t >= 1000 ? `${t / 1000}k` : t}</text>`);
  body.push(`<text x="${M.left + PW / 2}" y="${M.top + PH + 40}" text-anchor="middle">${esc(c.xLabel)}</text>`);
  body.push(`<line x1="${M.left}" x2="${M.left + PW}" y1="${M.top + PH}" y2="${M.top + PH}" stroke="#333"/>`);
  c.series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length];
    const path = s.points.map((p, i) => `${i ? 'L' : 'M'}${x(p.x).toFixed(1)} ${y(p.y).toFixed(1)}`).join('');
    body.push(`<path d="${path}" stroke="${color}" stroke-width="2" fill="none"/>`);
    for (const p of s.points) {
      body.push(`<circle cx="${x(p.x).toFixed(1)}" cy="${y(p.y).toFixed(1)}" r="3.5" fill="${color}"><title>${esc(`${s.name}, ${p.x}: ${num(p.y)}`)}</title></circle>`);
      if (p.spread) body.push(whisker(x(p.x), y(Math.max(p.spread.lo, c.logY ? Number.MIN_VALUE : 0)), y(p.spread.hi)));
    }
  });
  return frame(c.title, c.yLabel, body, c.series.map((s) => s.name));
}
