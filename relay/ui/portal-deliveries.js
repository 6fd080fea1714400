// The portal's deliveries: the list (status and time in their own columns), and one
// delivery with its event's payload and every attempt with the receiver's answer.
import { replaceRows, el, changed, coarse, now, ago, iso, badge } from "./kit.js";
import { $, state, api, hooks, toast, fail, label } from "./portal-ctx.js";
import { payloadBlock } from "./payload.js";
import { attemptRows, lastResult } from "./attempts.js";

const PAGE = 20;
const act = (text, onclick) => el("button", { type: "button", class: "btn small", onclick }, text);

// Why a pending or held delivery is not going out now: shown beside its status, never
// instead of it.
const WAIT = {
  endpoint_disabled: () => "endpoint disabled",
  breaker_open: () => "endpoint failing",
  breaker_probing: () => "endpoint failing",
  in_flight_cap: () => "waiting for a free slot",
  rate_limited: () => "rate limited",
  lane_blocked: () => "waiting for an earlier event of the same key",
  retry_backoff: () => "retrying",
  scheduled: () => "scheduled",
  deliver_at: () => "scheduled",
};
function reason(d) {
  if (d.lane_blocked && (d.status === "pending" || d.status === "held")) return WAIT.lane_blocked();
  const w = d.waiting && WAIT[d.waiting.reason];
  if (w) return w(d.waiting);
  if (d.status === "held") return WAIT.endpoint_disabled();
  if (d.status === "delivering") return "sending now";
  return "";
}
/** The time that matters for its status: when it finished, or its next try. */
function moment(d) {
  if (d.status === "succeeded" || d.status === "dead") return ["Finished", d.finished_at || d.updated_at];
  if (d.status === "pending") return ["Next try", (d.waiting && d.waiting.until) || d.next_attempt_at];
  if (d.status === "scheduled") return ["Goes", d.deliver_at];
  return ["Updated", d.updated_at];
}
function when(d) {
  const [what, at] = moment(d);
  if (d.status === "held" || d.status === "delivering") return reason(d);
  if (what === "Goes") return `goes ${ago(at)}`;
  if (what !== "Next try") return ago(at);
  return at && at > now() ? `next try ${ago(at)}` : "due now";
}

export async function loadDeliveries(more) {
  const params = { ...state.filter, limit: PAGE, cursor: more ? state.cursor : "" };
  const page = await api("GET", "v1/deliveries", params);
  const mine = page.data.filter((d) => !state.app || d.app === state.app);
  state.rows = more ? [...state.rows, ...mine] : mine;
  state.cursor = page.next_cursor;
  renderDeliveries();
}

export function renderDeliveries() {
  if (!changed("p-deliveries", state.rows, state.cursor, state.detail && state.detail.id, coarse(10e3))) return;
  replaceRows($("p-deliveries").tBodies[0], state.rows.map((d) => el("tr",
    { dataset: { id: d.id, status: d.status }, class: state.detail && state.detail.id === d.id ? "selected" : "", onclick: () => openDetail(d.id), tabindex: 0, onkeydown: (e) => e.key === "Enter" && e.target === e.currentTarget && openDetail(d.id) },
    el("td", { class: "status-cell" }, badge(d.status)),
    el("td", { class: "ellipsis" }, d.type),
    el("td", { class: "num" }, `${d.attempts} / ${d.max_attempts}`),
    el("td", { class: "ellipsis" }, lastResult(d)),
    el("td", { class: "when-cell", title: iso(moment(d)[1]) }, when(d)),
    el("td", {}, d.status === "dead" ? act("Replay", (e) => { e.stopPropagation(); replay(d.id); }) : null))));
  $("p-deliveries-empty").hidden = state.rows.length > 0;
  $("p-more").hidden = !state.cursor;
}

export function applyFilter() {
  state.filter = { endpoint_id: $("p-f-endpoint").value, status: $("p-f-status").value };
  loadDeliveries(false).catch(fail);
}

export async function replay(id) {
  try {
    await api("POST", `v1/deliveries/${encodeURIComponent(id)}/replay`, null, {});
    toast("Sending it again");
  } catch (e) {
    fail(e);
  }
  await hooks.refresh();
}

export async function openDetail(id) {
  state.detail = { id };
  $("p-detail").hidden = false;
  await loadDetail().catch(fail);
  $("p-detail").focus();
}

async function eventOf(d) {
  if (state.event && state.event.id === d.event_id) return state.event;
  state.event = await api("GET", `v1/events/${encodeURIComponent(d.event_id)}`);
  return state.event;
}

export async function loadDetail() {
  if (!state.detail) return;
  const id = state.detail.id;
  const d = await api("GET", `v1/deliveries/${encodeURIComponent(id)}`);
  const ev = await eventOf(d);
  if (!state.detail || state.detail.id !== id) return;
  state.detail = d;
  if (!changed("p-detail", d, ev.id, coarse(5e3))) return;
  $("p-d-id").textContent = d.id;
  $("p-d-status").replaceChildren(badge(d.status));
  const btn = $("p-d-replay");
  btn.disabled = !(d.status === "dead" || d.status === "succeeded");
  btn.textContent = d.status === "succeeded" ? "Send again" : "Replay";
  const ep = state.endpoints.get(d.endpoint_id);
  const [what, at] = moment(d);
  const why = reason(d);
  const rows = [["Status", el("span", {}, badge(d.status), why ? ` ${why}` : "")],
    [what, at ? `${iso(at)} · ${ago(at)}` : "—"],
    ["Event type", d.type], ["Event", el("span", { class: "mono" }, d.event_id)],
    ["Endpoint", ep ? label(ep) : d.endpoint_id], ["Attempts", `${d.attempts} of ${d.max_attempts}`],
    ["Created", `${iso(d.created_at)} · ${ago(d.created_at)}`]];
  $("p-d-summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const log = d.attempt_log || [];
  $("p-d-log-empty").hidden = log.length > 0;
  $("p-d-log").tBodies[0].replaceChildren(...attemptRows(log, false));
  $("p-d-payload").replaceChildren(payloadBlock(ev.payload, `Payload of ${ev.id}`));
}
