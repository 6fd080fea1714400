// The event page (#/event/<id>): its payload (pretty, copyable), the headers its
// requests carry, and every delivery with its attempts and the receiver's answers.
// The search box finds an event by its id, a delivery id or its Idempotency-Key.
import { el, changed, coarse, num, ago, iso, badge } from "./kit.js";
import { $, state, api, ApiError, hooks, toast, handleError, endpointLabel } from "./dash-ctx.js";
import { payloadBlock } from "./payload.js";
import { findEvent, payloadQuery, PAYLOAD_NOTE } from "./eventlist.js";
import { archiveOn, searchPayload } from "./dash-events.js";
import { attemptRows, lastResult, sentHeaderRows } from "./attempts.js";
import { replay } from "./dash-deliveries.js";
import { editEndpoint } from "./dash-endpoints.js";

const stamp = (ms) => (ms ? `${iso(ms)} · ${ago(ms)}` : "—");

export async function loadEvent() {
  const id = state.param;
  if (!id) return;
  let ev;
  try {
    ev = await api("GET", `v1/events/${encodeURIComponent(id)}`, { expand: "deliveries" });
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 404) throw e;
    ev = null;
  }
  if (state.view === "event" && state.param === id) renderEvent(id, ev);
}

function deliveryCard(d) {
  const ep = state.endpoints.get(d.endpoint_id);
  const log = d.attempt_log || [];
  const canReplay = d.status === "dead" || d.status === "succeeded";
  return el("article", { class: "ev-delivery", dataset: { id: d.id, status: d.status }, tabindex: -1 },
    el("div", { class: "ev-delivery-head" },
      badge(d.status),
      el("a", { class: "strong ellipsis", title: d.endpoint_id, href: `#/endpoint/${encodeURIComponent(d.endpoint_id)}` }, endpointLabel(d.endpoint_id)),
      el("span", { class: "mono muted small" }, d.id),
      el("span", { class: "muted small" }, `${d.attempts} of ${d.max_attempts} attempts · `, lastResult(d)),
      el("span", { class: "spacer" }),
      ep ? el("button", { type: "button", class: "btn small", title: "Fix the endpoint (its URL, types, limits)",
        onclick: () => editEndpoint(ep).catch(handleError) }, "Edit endpoint") : null,
      canReplay ? el("button", { type: "button", class: "btn small primary", title: "Send it again with a fresh attempt budget",
        onclick: (e) => replay(d.id, e.currentTarget) }, d.status === "succeeded" ? "Send again" : "Replay") : null),
    log.length
      ? el("div", { class: "table-wrap" }, el("table", { class: "grid compact ev-log" },
        el("thead", {}, el("tr", {}, el("th", { class: "num" }, "#"), el("th", { class: "num" }, "Try"), el("th", {}, "Time"),
          el("th", { class: "num" }, "Duration"), el("th", {}, "Result and answer"), el("th", {}, "Worker"))),
        el("tbody", {}, attemptRows(log, true))))
      : el("p", { class: "empty" }, d.status === "pending" ? `No request yet: due ${ago(d.next_attempt_at)}` : "No request made yet."));
}

function renderEvent(id, ev) {
  if (!changed("event", id, ev, coarse(10e3))) return;
  $("ev-id").textContent = id;
  if (!ev) {
    $("ev-body").replaceChildren(el("p", { class: "form-error", role: "alert" }, `Event ${id} does not exist (or has expired).`));
    return;
  }
  const deliveries = ev.deliveries || [];
  const total = ev.delivery_count ?? deliveries.length;
  const facts = [
    ["Type", el("span", { class: "mono" }, ev.type)],
    ["App", ev.app],
    ["Created", stamp(Date.parse(ev.created_at))],
    ["Idempotency key", ev.idempotency_key ? el("span", { class: "mono" }, ev.idempotency_key) : el("span", { class: "muted" }, "none")],
    ["Deliveries", `${num(total)}${total > deliveries.length ? ` (the first ${deliveries.length} shown)` : ""}`],
  ];
  if (ev.filtered && ev.filtered.length) facts.push(["Left out", `${ev.filtered.length} endpoint(s) whose filter erred on it`]);
  const headers = (deliveries.find((d) => d.headers_sent) || {}).headers_sent;
  $("ev-body").replaceChildren(...[
    el("dl", { class: "summary" }, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("h3", {}, "Payload"),
    payloadBlock(ev.payload, `Payload of ${id}`),
    headers ? [el("h3", {}, "Headers sent ", el("span", { class: "muted small" }, "latest request of the first delivery; signatures never shown")),
      el("table", { class: "grid compact headers", id: "ev-headers" }, el("tbody", {}, sentHeaderRows(headers)))] : null,
    el("h3", {}, "Deliveries"),
    deliveries.length ? deliveries.map(deliveryCard) : el("p", { class: "empty" }, "No endpoint subscribed to it."),
  ].flat(2).filter(Boolean));
  if (state.focusDelivery) {
    const card = $("ev-body").querySelector(`.ev-delivery[data-id="${CSS.escape(state.focusDelivery)}"]`);
    state.focusDelivery = null;
    if (card) {
      card.classList.add("selected");
      card.scrollIntoView({ block: "nearest" });
      card.focus();
    }
  }
}

/**
 * The search box: an event id, a delivery id or an Idempotency-Key, to its event page;
 * a payload field ("customer.id = 42"), to the events whose archived payload has it.
 */
export async function find(raw) {
  try {
    if (payloadQuery(raw)) return (await archiveOn()) ? searchPayload(raw) : toast(PAYLOAD_NOTE, true);
    const found = await findEvent(api, raw);
    if (!found) return toast(`No event has the id or Idempotency-Key ${raw.trim()}`, true);
    state.focusDelivery = found.delivery;
    hooks.setView("event", found.event);
  } catch (e) {
    handleError(e);
  }
}
