// relay dashboard kit: DOM builders, formatting and the chart. No data ever passes
// through innerHTML: el() and svg() turn every child string into a text node.
const SVG = "http://www.w3.org/2000/svg";

/** Build an element: attrs are set one by one, children become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}
function append(node, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children) {
    if (typeof c === "string") {
      const t = document.createElementNS(SVG, "title");
      t.textContent = c;
      node.append(t);
    } else if (c) node.append(c);
  }
  return node;
}

// Polls redraw only what changed, so rows under the pointer are not replaced every
// few seconds (relative times are refreshed through the coarse clock in each key).
const drawn = {};
function changed(what, ...parts) {
  const key = JSON.stringify(parts);
  if (drawn[what] === key) return false;
  drawn[what] = key;
  return true;
}
const coarse = (ms) => Math.floor(Date.now() / ms);

let skew = 0; // server time minus browser time, ms
const setSkew = (ms) => {
  skew = ms;
};
const now = () => Date.now() + skew;
const nf = new Intl.NumberFormat();
const num = (n) => (n === null || n === undefined ? "—" : nf.format(n));

function ago(ms) {
  if (!ms) return "—";
  const d = now() - ms;
  const a = Math.abs(d);
  let s;
  if (a < 1500) return d >= 0 ? "just now" : "now";
  if (a < 60e3) s = `${Math.round(a / 1e3)}s`;
  else if (a < 3600e3) s = `${Math.round(a / 60e3)}m`;
  else if (a < 86400e3) s = `${(a / 3600e3).toFixed(1)}h`;
  else s = `${(a / 86400e3).toFixed(1)}d`;
  return d >= 0 ? `${s} ago` : `in ${s}`;
}
const iso = (ms) => (ms ? new Date(ms).toISOString().replace(".000Z", "Z") : "");
function clock(ms) {
  const d = new Date(ms);
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  if (new Date(now()).toDateString() === d.toDateString()) return time;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}
function hhmm(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
}
function duration(s) {
  if (!s) return "0s";
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  return `${(s / 3600).toFixed(1)}h`;
}
const badge = (text, kind) => el("span", { class: `badge ${kind || text}` }, text);

function renderChart(series) {
  const box = document.getElementById("chart");
  if (!changed("chart", series, box.clientWidth, box.clientHeight)) return;
  const W = Math.max(box.clientWidth - 14, 200);
  const H = Math.max(box.clientHeight - 10, 110);
  const m = { l: 34, r: 6, t: 8, b: 18 };
  const n = series.minute_ms.length;
  const top = Math.max(1, ...series.created, ...series.succeeded.map((v, i) => v + series.dead[i]));
  const step = niceStep(top / 3);
  const ymax = Math.ceil(top / step) * step;
  const x = (i) => m.l + ((W - m.l - m.r) * i) / n;
  const y = (v) => H - m.b - ((H - m.t - m.b) * v) / ymax;
  const bw = Math.max(2, (W - m.l - m.r) / n - 3);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Deliveries per minute by outcome" });
  for (let v = 0; v <= ymax; v += step) {
    root.append(svg("line", { class: "gridline", x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }));
    const label = svg("text", { class: "axis", x: m.l - 6, y: y(v) + 3.5, "text-anchor": "end" });
    label.textContent = num(v);
    root.append(label);
  }
  const points = [];
  let any = false;
  for (let i = 0; i < n; i++) {
    const ok = series.succeeded[i];
    const dead = series.dead[i];
    const created = series.created[i];
    any = any || ok + dead + created > 0;
    const bx = x(i) + 1.5;
    const g = svg(
      "g",
      { class: "minute" },
      `${hhmm(series.minute_ms[i])}  ${ok} succeeded · ${dead} dead · ${created} events published`,
    );
    g.append(svg("rect", { class: "hit", x: x(i), y: m.t, width: (W - m.l - m.r) / n, height: H - m.t - m.b }));
    if (ok) g.append(svg("rect", { class: "bar-ok", x: bx, width: bw, y: y(ok), height: y(0) - y(ok) }));
    if (dead) g.append(svg("rect", { class: "bar-dead", x: bx, width: bw, y: y(ok + dead), height: y(ok) - y(ok + dead) }));
    root.append(g);
    points.push(`${x(i) + 1.5 + bw / 2},${y(created)}`);
    if (i % 5 === (n - 1) % 5) {
      const t = svg("text", { class: "axis", x: x(i) + 1.5 + bw / 2, y: H - 4, "text-anchor": "middle" });
      t.textContent = i === n - 1 ? "now" : hhmm(series.minute_ms[i]);
      root.append(t);
    }
  }
  root.append(svg("polyline", { class: "line", points: points.join(" ") }));
  const children = [root];
  if (!any) children.push(el("div", { class: "chart-empty" }, "Nothing published or finished in the last 30 minutes"));
  box.replaceChildren(...children);
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  for (const f of [1, 2, 5, 10]) if (f * p >= raw) return Math.max(1, f * p);
  return 10 * p;
}

// A table body's rows replaced (a live refresh) without losing the keyboard's place:
// the row that had the focus, or held it, has it again when it is still there.
function replaceRows(body, rows) {
  const active = document.activeElement;
  const held = active && body.contains(active) ? active.closest("tr[data-id]") : null;
  body.replaceChildren(...rows);
  if (!held) return;
  const again = body.querySelector(`tr[data-id="${CSS.escape(held.dataset.id)}"]`);
  if (again) again.focus({ preventScroll: true });
}

export { replaceRows, el, svg, changed, coarse, now, setSkew, num, ago, iso, clock, hhmm, duration, badge, renderChart, niceStep };
