// The portal's events: the app's events newest first (filter by type and by the status
// of their deliveries), the search (event id, delivery id, Idempotency-Key), and one
// event with its payload and every delivery's attempts, Replay and Edit endpoint.
import { replaceRows, el, changed, coarse, ago, iso, badge } from "./kit.js";
import { $, state, api, toast, fail, label } from "./portal-ctx.js";
import { eventsPage, eventRows, findEvent, payloadQuery } from "./eventlist.js";
import { payloadBlock } from "./payload.js";
import { attemptRows } from "./attempts.js";
import { editEndpoint } from "./portal-endpoints.js";
import { replay } from "./portal-deliveries.js";

const PAGE = 10;

export async function loadEvents() {
  const params = { type: $("p-e-type").value.trim(), status: $("p-e-status").value };
  const { rows, next } = await eventsPage(api, params, "", PAGE);
  if (!changed("p-events", rows, next, state.eventId, coarse(10e3))) return;
  replaceRows($("p-events").tBodies[0], eventRows(rows, openEvent, false));
  for (const tr of $("p-events").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === state.eventId);
  $("p-events-empty").hidden = rows.length > 0;
}

export async function openEvent(id, deliveryId) {
  state.eventId = id;
  state.focusDelivery = deliveryId || null;
  $("p-event").hidden = false;
  await loadEvent().catch(fail);
  $("p-event").focus();
}

export function closeEvent() {
  state.eventId = null;
  $("p-event").hidden = true;
}

function deliveryCard(d) {
  const ep = state.endpoints.get(d.endpoint_id);
  const log = d.attempt_log || [];
  const canReplay = d.status === "dead" || d.status === "succeeded";
  return el("article", { class: "ev-delivery", dataset: { id: d.id, status: d.status }, tabindex: -1 },
    el("div", { class: "ev-delivery-head" },
      badge(d.status),
      el("span", { class: "strong ellipsis" }, ep ? label(ep) : d.endpoint_id),
      el("span", { class: "muted small" }, `${d.attempts} of ${d.max_attempts} attempts`),
      el("span", { class: "spacer" }),
      ep ? el("button", { type: "button", class: "btn small", onclick: () => editEndpoint(ep) }, "Edit endpoint") : null,
      canReplay ? el("button", { type: "button", class: "btn small primary", onclick: () => replay(d.id) }, d.status === "succeeded" ? "Send again" : "Replay") : null),
    log.length
      ? el("div", { class: "table-wrap" }, el("table", { class: "grid compact ev-log" },
        el("thead", {}, el("tr", {}, el("th", { class: "num" }, "#"), el("th", {}, "Time"), el("th", { class: "num" }, "Duration"), el("th", {}, "Result and answer"))),
        el("tbody", {}, attemptRows(log, false))))
      : el("p", { class: "empty" }, d.status === "pending" ? `No request yet: due ${ago(d.next_attempt_at)}` : "No request made yet."));
}

export async function loadEvent() {
  const id = state.eventId;
  if (!id) return;
  const ev = await api("GET", `v1/events/${encodeURIComponent(id)}`, { expand: "deliveries" });
  if (state.eventId !== id || !changed("p-event", ev, coarse(10e3))) return;
  const created = Date.parse(ev.created_at);
  $("p-ev-id").textContent = ev.id;
  $("p-ev-body").replaceChildren(...[
    el("dl", { class: "summary" },
      el("dt", {}, "Type"), el("dd", { class: "mono" }, ev.type),
      el("dt", {}, "Created"), el("dd", { title: iso(created) }, `${iso(created)} · ${ago(created)}`),
      el("dt", {}, "Idempotency key"), el("dd", { class: "mono" }, ev.idempotency_key || "—")),
    el("h3", {}, "Payload"),
    payloadBlock(ev.payload, `Payload of ${ev.id}`),
    el("h3", {}, "Deliveries"),
    (ev.deliveries || []).map(deliveryCard),
  ].flat().filter(Boolean));
  if (state.focusDelivery) {
    const card = $("p-ev-body").querySelector(`.ev-delivery[data-id="${CSS.escape(state.focusDelivery)}"]`);
    state.focusDelivery = null;
    if (card) card.classList.add("selected");
  }
}

export async function search(raw) {
  if (payloadQuery(raw)) return toast("The portal finds an event by its id, a delivery id or its Idempotency-Key; it does not search payload fields", true);
  try {
    const found = await findEvent(api, raw);
    if (!found) return toast(`No event of yours has the id or Idempotency-Key ${raw.trim()}`, true);
    await openEvent(found.event, found.delivery);
  } catch (e) {
    fail(e);
  }
}

export function wireEvents() {
  $("p-search").addEventListener("submit", (e) => {
    e.preventDefault();
    search($("p-q").value);
  });
  $("p-e-filters").addEventListener("submit", (e) => e.preventDefault());
  $("p-e-status").addEventListener("change", () => loadEvents().catch(fail));
  let typing = null;
  $("p-e-type").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => loadEvents().catch(fail), 400);
  });
  $("p-ev-close").addEventListener("click", closeEvent);
}
