// The endpoint page (#/endpoint/<id>): success rate, attempts per step and latency over
// the last hour or day (GET /v1/endpoints/{id}/stats, from counters relay keeps per
// endpoint and minute), the breaker and why, failures grouped, and the actions, each
// confirmed in a dialog first.
import { el, changed, coarse, num, ago, iso, badge } from "./kit.js";
import { $, state, api, hooks, toast, handleError } from "./dash-ctx.js";
import { attemptsChart, latencyChart } from "./charts.js";
import { confirmDialog } from "./confirm.js";
import { editEndpoint, breakerCell } from "./dash-endpoints.js";
import { localMs } from "./eventlist.js";

const page = { window: "1h", since: null, until: "" };
const pct = (r) => (r === null || r === undefined ? "—" : `${(r * 100).toFixed(1).replace(/\.0$/, "")}%`);
const ms = (v) => (v === null || v === undefined ? "—" : `${num(Math.round(v))} ms`);

export async function loadEndpoint() {
  const id = state.param;
  const ep = state.endpoints.get(id);
  if (!ep) {
    $("ep-body").replaceChildren(el("p", { class: "form-error", role: "alert" }, `Endpoint ${id} does not exist.`));
    return;
  }
  const stats = await api("GET", `v1/endpoints/${encodeURIComponent(id)}/stats`, { window: page.window });
  if (state.view === "endpoint" && state.param === id) render(ep, stats);
}

function perMinute(s) {
  const rate = s.attempts / ((s.series.length * s.step_seconds) / 60);
  if (rate >= 10) return `${num(Math.round(rate))} a minute on average`;
  if (rate >= 0.1) return `${rate.toFixed(1).replace(/\.0$/, "")} a minute on average`;
  return s.attempts ? "under 0.1 a minute" : "none";
}

function tile(key, label, value, sub, cls) {
  return el("div", { class: `card ${cls || ""}`, dataset: { key } },
    el("span", { class: "label" }, label), el("span", { class: "value" }, value), el("span", { class: "sub" }, sub || "\u00a0"));
}

function failuresTable(groups, ep) {
  if (!groups.length) return el("p", { class: "empty" }, "No failed attempt in this window.");
  return el("table", { class: "grid compact", id: "ep-failures" },
    el("thead", {}, el("tr", {}, el("th", {}, "Answer"), el("th", { class: "num" }, "Attempts"), el("th", {}))),
    el("tbody", {}, groups.map((g) => el("tr", { dataset: { status: g.status_code ?? "", error: g.error ?? "" } },
      el("td", { class: "err-text strong" }, g.status_code ? `HTTP ${g.status_code}` : g.error || "no answer"),
      el("td", { class: "num" }, num(g.count)),
      el("td", {}, el("a", { href: `#/events`, onclick: (e) => { e.preventDefault(); showEvents(ep.id); } }, "events with a dead delivery"))))));
}

function showEvents(id) {
  hooks.setView("events");
  $("e-endpoint").value = id;
  $("e-status").value = "dead";
  $("e-status").dispatchEvent(new Event("change"));
}

function render(ep, s) {
  if (!changed("endpoint-page", ep, s, page.window, coarse(10e3))) return;
  if ($("ep-body").contains(document.activeElement) && document.activeElement.matches("input")) return; // typing
  $("ep-title").textContent = ep.url;
  const windowName = page.window === "1h" ? "last hour" : "last 24 hours";
  const b = s.breaker || {};
  $("ep-body").replaceChildren(...[
    el("div", { class: "ep-head" },
      el("span", { class: "mono muted" }, ep.id), " · ", ep.app, " · ",
      ep.enabled ? badge("enabled", "succeeded") : badge("paused", "disabled"), " ", breakerCell(ep),
      ep.event_types.map((t) => el("span", { class: "chip" }, t))),
    s.why ? el("p", { class: "ep-why", role: "status", id: "ep-why" }, s.why) : null,
    el("div", { class: "ep-actions" }, actions(ep)),
    el("div", { class: "panel-head inner" }, el("h3", {}, `Health, ${windowName}`), el("span", { class: "spacer" }),
      el("div", { class: "seg", role: "group", "aria-label": "Window" },
        ["1h", "24h"].map((w) => el("button", { type: "button", class: "btn small", "aria-pressed": String(page.window === w),
          onclick: () => { page.window = w; loadEndpoint().catch(handleError); } }, w === "1h" ? "1 hour" : "24 hours")))),
    el("div", { class: "ep-tiles" },
      tile("rate", "Success rate", pct(s.success_rate), `${num(s.successes)} of ${num(s.attempts)} attempts`, s.success_rate !== null && s.success_rate < 0.9 ? "bad" : ""),
      tile("attempts", "Attempts", num(s.attempts), perMinute(s)),
      tile("failures", "Failed", num(s.failures), "a 429 counts as failed", s.failures ? "bad" : ""),
      tile("p50", "Latency p50", ms(s.latency_ms && s.latency_ms.p50), "HTTP answers only"),
      tile("p90", "p90", ms(s.latency_ms && s.latency_ms.p90)),
      tile("p99", "p99", ms(s.latency_ms && s.latency_ms.p99))),
    el("div", { class: "ep-charts" },
      el("figure", {}, el("figcaption", {}, `Attempts every ${s.step_seconds / 60} min`, el("span", { class: "muted small" }, " succeeded · failed")), attemptsChart(s.series, s.step_seconds)),
      el("figure", {}, el("figcaption", {}, "Latency", el("span", { class: "muted small" }, " answers per bucket (ms)")),
        s.latency_ms ? latencyChart(s.latency_ms) : el("p", { class: "empty" }, "No HTTP answer in this window."))),
    el("h3", {}, "Failures, grouped"),
    failuresTable(s.failures_by, ep),
    b.last_success_at ? el("p", { class: "muted small" }, `Last success ${iso(b.last_success_at)} (${ago(b.last_success_at)})`) : null,
  ].flat().filter(Boolean));
}

// ------------------------------------------------------------------ actions

const hourAgo = () => {
  const d = new Date(Date.now() - 3600e3 - new Date().getTimezoneOffset() * 60e3);
  return d.toISOString().slice(0, 19);
};

function actions(ep) {
  const btn = (text, onclick, cls) => el("button", { type: "button", class: `btn small ${cls || ""}`, onclick }, text);
  // Their values live in `page`: a refresh that redraws the page keeps what was typed.
  page.since = page.since ?? hourAgo();
  const since = el("input", { type: "datetime-local", step: "1", id: "ep-since", value: page.since, oninput: (e) => (page.since = e.target.value) });
  const until = el("input", { type: "datetime-local", step: "1", id: "ep-until", value: page.until || "", oninput: (e) => (page.until = e.target.value) });
  return [
    btn("Send test event", () => act(ep, "Send a test event", `A relay.test event goes to ${ep.url} now.`, "Send",
      () => api("POST", `v1/endpoints/${encodeURIComponent(ep.id)}/test`, null, {}), "Test event sent")),
    btn("Edit", () => editEndpoint(ep).catch(handleError)),
    ep.enabled
      ? btn("Pause", () => act(ep, "Pause this endpoint", "Its deliveries are held (not sent, not lost) until you resume it.", "Pause",
        () => api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, { enabled: false }), "Paused: deliveries are held"))
      : btn("Resume", () => act(ep, "Resume this endpoint", "Its held deliveries go out now, paced by its limits.", "Resume",
        () => api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, { enabled: true }), "Resumed")),
    btn("Rotate secret", () => act(ep, "Rotate the signing secret", "A new secret signs from now on; the old one also signs for a grace period, so the receiver can switch.", "Rotate",
      () => api("POST", `v1/endpoints/${encodeURIComponent(ep.id)}/rotate-secret`, null, {}), "Secret rotated: see it in the endpoints view")),
    el("label", {}, "Since", since),
    btn("Recover dead since…", () => {
      const from = localMs(since.value);
      if (!from) return toast("Give a start time", true);
      return act(ep, "Recover dead deliveries", `Every dead delivery of this endpoint since ${iso(from)} goes back to pending.`, "Recover",
        () => api("POST", `v1/endpoints/${encodeURIComponent(ep.id)}/recover`, null, { since: from }), (r) => `Recovered ${num(r.recovered)}`);
    }),
    el("label", {}, "Until", until),
    btn("Replay range…", () => replayRange(ep, since.value, until.value)),
  ];
}

async function act(ep, title, text, ok, call, done) {
  if (!(await confirmDialog(title, text, ok))) return;
  try {
    const res = await call();
    toast(typeof done === "function" ? done(res) : done);
  } catch (e) {
    handleError(e);
  }
  await hooks.refresh();
}

async function replayRange(ep, since, until) {
  if (!since || !until) return toast("Give both ends of the range", true);
  const body = { since: new Date(since).toISOString(), until: new Date(until).toISOString(), endpoint_id: ep.id, status: ["dead"] };
  try {
    const count = await api("POST", "v1/replays", null, { ...body, dry_run: true });
    const text = `${num(count.matched)} dead deliver${count.matched === 1 ? "y" : "ies"} of this endpoint created from ${body.since} to ${body.until} go again, paced.`;
    if (!(await confirmDialog("Replay a range", text, "Replay"))) return;
    const job = await api("POST", "v1/replays", null, { ...body, dry_run: false });
    toast(`${job.id} started`);
  } catch (e) {
    handleError(e);
  }
  await hooks.refresh();
}
