// The attempt log of a delivery as table rows: each request's result and what the
// receiver answered, its body excerpt in full (relay keeps it up to
// RELAY_RESPONSE_BODY_CAP bytes) and its headers (kept on answers that did not succeed).
import { el, badge, clock, iso } from "./kit.js";

function answerHeaders(headers) {
  const names = Object.keys(headers || {});
  if (!names.length) return null;
  return el("details", { class: "answer-headers" },
    el("summary", {}, `Answer headers (${names.length})`),
    el("dl", { class: "answer-list" },
      names.flatMap((n) => [el("dt", { class: "mono", dataset: { header: n } }, n), el("dd", { class: "mono", dataset: { header: n } }, headers[n])])));
}

/** The result cell: the status or error, where it led, the answer's body and headers.
 * A broker's acknowledgement succeeded with no status code. */
export function attemptResult(a) {
  const code = a.status_code;
  const ok = a.outcome === "succeeded";
  const said = code ? `HTTP ${code}` : a.error || (ok ? "acknowledged" : "no answer");
  return el("div", {},
    el("span", { class: ok ? "strong" : "strong err-text" }, said),
    a.outcome ? el("span", { class: "muted" }, ` → ${a.outcome}`) : null,
    a.fenced ? el("span", {}, " ", badge("fenced", "fenced")) : null,
    a.detail ? el("pre", { class: "answer", dataset: { col: "answer" } }, a.detail) : null,
    answerHeaders(a.response_headers));
}

/** A delivery's last result: its last status or error; "acknowledged" for one that
 * succeeded with neither (a broker destination's). */
export function lastResult(d) {
  if (d.last_status_code) {
    const ok = d.last_status_code >= 200 && d.last_status_code < 300;
    return el("span", { class: ok ? "" : "err-text" }, `HTTP ${d.last_status_code}`);
  }
  if (d.last_error) return el("span", { class: "err-text" }, d.last_error);
  if (d.status === "succeeded") return el("span", {}, "acknowledged");
  return el("span", { class: "muted" }, "—");
}

const ms = (d) => (d === null || d === undefined ? "—" : `${Math.round(d)} ms`);

/** One row per attempt; `withWorker` adds the try number and the worker (dashboard). */
export function attemptRows(log, withWorker) {
  return log.map((a) => el("tr", { dataset: { n: a.n } },
    el("td", { class: "num" }, a.n),
    withWorker ? el("td", { class: "num" }, a.attempt ?? "—") : null,
    el("td", { title: iso(a.at) }, clock(a.at)),
    el("td", { class: "num" }, ms(a.duration_ms)),
    el("td", {}, attemptResult(a)),
    withWorker ? el("td", { class: "mono" }, a.worker) : null));
}

/** The headers a request went with (name, value, note); signatures never shown. */
export const sentHeaderRows = (headers) => (headers || []).map((h) =>
  el("tr", { dataset: { header: h.name } }, el("td", {}, h.name), el("td", {}, h.value), el("td", {}, h.note || "")));
