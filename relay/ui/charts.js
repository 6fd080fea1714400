// Small inline SVG charts of the endpoint page: attempts per step (succeeded and failed
// stacked) and the latency histogram with its percentiles. Text only through svg().
import { svg, num, hhmm, niceStep } from "./kit.js";

const W = 560;
const H = 150;
const M = { l: 34, r: 6, t: 8, b: 18 };

function frame(label, top) {
  const step = niceStep(top / 3);
  const ymax = Math.max(step, Math.ceil(top / step) * step);
  const y = (v) => H - M.b - ((H - M.t - M.b) * v) / ymax;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "mini-chart" });
  for (let v = 0; v <= ymax; v += step) {
    root.append(svg("line", { class: "gridline", x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }));
    const t = svg("text", { class: "axis", x: M.l - 6, y: y(v) + 3.5, "text-anchor": "end" });
    t.textContent = num(v);
    root.append(t);
  }
  return { root, y };
}

function axisLabel(root, x, text) {
  const t = svg("text", { class: "axis", x, y: H - 4, "text-anchor": "middle" });
  t.textContent = text;
  root.append(t);
}

/** Attempts per step: successes (green) under failures (red), a tooltip per step. */
export function attemptsChart(series, stepSeconds) {
  const n = series.length;
  const top = Math.max(1, ...series.map((p) => p.attempts));
  const { root, y } = frame("Attempts per step: succeeded and failed", top);
  const slot = (W - M.l - M.r) / Math.max(n, 1);
  const bw = Math.max(1, slot - (n > 80 ? 1 : 2));
  const every = Math.ceil(n / 6);
  series.forEach((p, i) => {
    const x = M.l + slot * i;
    const g = svg("g", { class: "minute" }, `${hhmm(p.at)}  ${p.attempts} attempts · ${p.successes} succeeded · ${p.failures} failed`);
    g.append(svg("rect", { class: "hit", x, y: M.t, width: slot, height: H - M.t - M.b }));
    if (p.successes) g.append(svg("rect", { class: "bar-ok", x, width: bw, y: y(p.successes), height: y(0) - y(p.successes) }));
    if (p.failures) g.append(svg("rect", { class: "bar-dead", x, width: bw, y: y(p.successes + p.failures), height: y(p.successes) - y(p.successes + p.failures) }));
    root.append(g);
    if ((n - 1 - i) % every === 0) axisLabel(root, x + bw / 2, i === n - 1 ? "now" : hhmm(p.at));
  });
  root.setAttribute("data-step", String(stepSeconds));
  return root;
}

/** The latency histogram (answers per bucket) with p50, p90 and p99 marked. */
export function latencyChart(latency) {
  const buckets = latency.buckets;
  const top = Math.max(1, ...buckets.map((b) => b.count));
  const { root, y } = frame("Latency: answers per bucket, with p50, p90 and p99", top);
  const slot = (W - M.l - M.r) / buckets.length;
  let lower = 0;
  buckets.forEach((b, i) => {
    const x = M.l + slot * i;
    const name = b.le === null ? `> ${num(lower)} ms` : `${num(lower)}–${num(b.le)} ms`;
    const g = svg("g", { class: "minute" }, `${name}: ${num(b.count)} answers`);
    g.append(svg("rect", { class: "hit", x, y: M.t, width: slot, height: H - M.t - M.b }));
    if (b.count) g.append(svg("rect", { class: "bar-latency", x: x + 2, width: slot - 4, y: y(b.count), height: y(0) - y(b.count) }));
    root.append(g);
    axisLabel(root, x + slot / 2, b.le === null ? `>${lower}` : `${b.le}`);
    lower = b.le ?? lower;
  });
  // Each percentile at its place inside its bucket (linear within the bucket).
  const xOf = (ms) => {
    let lo = 0;
    for (let i = 0; i < buckets.length; i++) {
      const hi = buckets[i].le;
      if (hi === null || ms <= hi) return M.l + slot * (i + (hi === null ? 0.5 : (ms - lo) / (hi - lo)));
      lo = hi;
    }
    return W - M.r;
  };
  ["p50", "p90", "p99"].forEach((p, row) => {
    if (latency[p] === null || latency[p] === undefined) return;
    const x = xOf(latency[p]);
    root.append(svg("line", { class: `pct ${p}`, x1: x, x2: x, y1: M.t, y2: H - M.b }, `${p} ${num(latency[p])} ms`));
    const t = svg("text", { class: "axis pct-label", x: x + 3, y: M.t + 9 + 11 * row });
    t.textContent = p;
    root.append(t);
  });
  return root;
}
