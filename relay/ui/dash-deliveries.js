// The deliveries table: filters, pages, and the row actions (replay, discard).
import { replaceRows, el, changed, coarse, ago, iso, clock, badge } from "./kit.js";
import { $, state, api, hooks, toast, handleError, endpointLabel } from "./dash-ctx.js";
import { openDrawer } from "./dash-drawer.js";
import { lastResult } from "./attempts.js";

const PAGE_SIZE = 25;

// Why a pending or held delivery is not going out now (the API's `waiting`).
const WAIT_TEXT = {
  endpoint_disabled: () => "held: endpoint disabled",
  endpoint_deleted: () => "endpoint deleted",
  breaker_open: (w) => `breaker open until ${clock(w.until)}`,
  breaker_probing: (w) => `breaker probing, next try ${ago(w.until)}`,
  in_flight_cap: (w) => `in-flight cap, next try ${ago(w.until)}`,
  rate_limited: (w) => `rate limited, next try ${ago(w.until)}`,
  ordering_lane: () => "queued in its ordered lane",
  retry_backoff: (w) => `retry ${ago(w.until)}`,
  scheduled: (w) => `due ${ago(w.until)}`,
  deliver_at: (w) => `scheduled, goes ${ago(w.until)}`,
  lane_blocked: () => "lane blocked: an earlier event of its key is dead",
};
export function waitText(w, d) {
  // Ordered delivery: a lane stopped at a dead head says so (the read's lane_blocked).
  if (d && d.lane_blocked && (d.status === "pending" || d.status === "held")) return WAIT_TEXT.lane_blocked();
  const text = w && WAIT_TEXT[w.reason];
  return text ? text(w) : null;
}
export function when(d) {
  const waiting = waitText(d.waiting, d);
  if (d.status === "held") return el("span", { class: "muted", title: d.held || "endpoint_disabled" }, waiting || "held: endpoint disabled");
  if (d.status === "pending") {
    const title = d.waiting ? `${d.waiting.reason}${d.waiting.until ? ` until ${iso(d.waiting.until)}` : ""}` : iso(d.next_attempt_at);
    return el("span", { title, class: d.waiting && d.waiting.reason.startsWith("breaker") ? "err-text" : "" },
      waiting || (d.attempts ? `retry ${ago(d.next_attempt_at)}` : `due ${ago(d.next_attempt_at)}`));
  }
  if (d.status === "scheduled") return el("span", { class: "muted", title: iso(d.deliver_at) }, waiting || `scheduled, goes ${ago(d.deliver_at)}`);
  if (d.status === "delivering") return el("span", { title: iso(d.updated_at) }, "sending now");
  if (d.status === "queued") return el("span", { class: "muted", title: d.lane || "" }, "behind its lane's head");
  if (d.blocking) return el("span", { class: "err-text", title: d.lane || "" }, "blocks its ordered lane");
  const at = d.finished_at || d.updated_at;
  return el("span", { title: iso(at) }, ago(at));
}

function deliveryParams() {
  const f = state.filters;
  return { status: f.status, endpoint_id: f.endpoint_id, type: f.type, limit: PAGE_SIZE, cursor: state.cursors[state.cursors.length - 1] };
}

let listSeq = 0;
export async function loadDeliveries() {
  // Answers can arrive out of order (a poll and a filter change): only the latest counts.
  const seq = ++listSeq;
  const page = await api("GET", "v1/ui/deliveries", deliveryParams());
  if (seq !== listSeq) return;
  state.nextCursor = page.next_cursor;
  renderDeliveries(page.data);
}

function renderDeliveries(rows) {
  if (!changed("deliveries", rows, state.filters, state.cursors.length, state.nextCursor, coarse(10e3))) return;
  const body = $("deliveries").tBodies[0];
  const out = rows.map((d) => {
    state.types.add(d.type);
    const replay = d.status === "dead"
      ? el("button", { type: "button", class: "btn small", title: "Send it again with a fresh attempt budget", onclick: (e) => { e.stopPropagation(); replay(d.id, e.currentTarget); } }, "Replay")
      : null;
    const skip = d.status === "dead" && d.blocking
      ? el("button", { type: "button", class: "btn small", title: "Skip this dead head: the next delivery of its ordered lane goes", onclick: (e) => { e.stopPropagation(); discard(d.id, e.currentTarget); } }, "Discard")
      : null;
    return el(
      "tr",
      { dataset: { id: d.id, status: d.status }, class: d.id === state.drawerId ? "selected" : "", onclick: () => openDrawer(d.id), tabindex: 0, onkeydown: (e) => e.key === "Enter" && e.target === e.currentTarget && openDrawer(d.id) },
      el("td", {}, badge(d.status)),
      el("td", { class: "mono id-cell", title: d.id }, d.id),
      el("td", { class: "ellipsis" }, d.type),
      el("td", { class: "ellipsis", title: d.endpoint_id }, endpointLabel(d.endpoint_id)),
      el("td", { class: "num" }, `${d.attempts} / ${d.max_attempts}`),
      el("td", { class: "ellipsis" }, lastResult(d)),
      el("td", { class: "when-cell" }, when(d)),
      el("td", {}, el("div", { class: "actions" }, replay, skip)),
    );
  });
  replaceRows(body, out);
  const empty = $("deliveries-empty");
  const filtered = Object.values(state.filters).some(Boolean);
  empty.hidden = rows.length > 0;
  empty.textContent = filtered ? "No deliveries match these filters." : "No deliveries yet.";
  const page = state.cursors.length;
  $("page-info").textContent = `Page ${page} · ${rows.length} shown${page === 1 ? " · refreshing live" : " · not refreshing (go to newest for live)"}`;
  $("page-prev").disabled = page === 1;
  $("page-first").disabled = page === 1;
  $("page-next").disabled = !state.nextCursor;
  const dl = $("known-types");
  dl.replaceChildren(...[...state.types].sort().slice(0, 200).map((t) => el("option", { value: t })));
}

export function applyFilters() {
  state.filters = { status: $("f-status").value, endpoint_id: $("f-endpoint").value, type: $("f-type").value.trim() };
  state.cursors = [null];
  loadDeliveries().catch(handleError);
}

export async function replay(id, button) {
  if (button) button.disabled = true;
  try {
    await api("POST", `v1/deliveries/${encodeURIComponent(id)}/replay`);
    toast(`Replaying ${id}`);
  } catch (e) {
    if (button) button.disabled = false;
    handleError(e);
    return;
  }
  await hooks.refresh();
}

export async function discard(id, button) {
  if (button) button.disabled = true;
  try {
    await api("POST", `v1/deliveries/${encodeURIComponent(id)}/discard`);
    toast(`Discarded ${id}: its lane goes on`);
  } catch (e) {
    if (button) button.disabled = false;
    handleError(e);
    return;
  }
  await hooks.refresh();
}
