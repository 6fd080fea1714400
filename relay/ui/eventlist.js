// Events: a page of GET /v1/events with the API's short-page rule followed, a table row
// per event, and the search that turns an id or an Idempotency-Key into an event.
// Shared by the dashboard (every app) and the portal (the session's app only: the API
// narrows what a portal token sees).
import { el, badge, ago, iso } from "./kit.js";
import { ApiError } from "./api.js";

const ORDER = ["dead", "pending", "held", "queued", "delivering", "succeeded"];

/** Up to `want` events from `cursor` on; a filtered page may come short with a cursor. */
export async function eventsPage(api, params, cursor, want) {
  let rows = [];
  let next = cursor || "";
  for (let i = 0; i < 8 && rows.length < want && next !== null; i++) {
    const page = await api("GET", "v1/events", { ...params, limit: want - rows.length, cursor: next });
    rows = rows.concat(page.data);
    next = page.next_cursor;
  }
  return { rows, next };
}

/** The statuses of an event's deliveries, worst first: "1 dead", "2 succeeded". */
export function statusChips(ev) {
  const counts = ev.status_counts || {};
  const known = ORDER.filter((s) => counts[s]);
  if (!known.length) return el("span", { class: "muted" }, "no deliveries");
  return el("span", { class: "chips" }, known.map((s) => badge(`${counts[s]} ${s}`, s)));
}

/** One row per event; Enter or a click opens it. */
export function eventRows(rows, open, withApp) {
  return rows.map((ev) => {
    const created = Date.parse(ev.created_at);
    return el("tr", { dataset: { id: ev.id }, tabindex: 0, onclick: () => open(ev.id), onkeydown: (e) => e.key === "Enter" && open(ev.id) },
      el("td", { class: "when-cell", title: iso(created) }, ago(created)),
      el("td", { class: "mono id-cell", title: ev.id }, ev.id),
      el("td", { class: "ellipsis" }, ev.type),
      withApp ? el("td", {}, ev.app) : null,
      el("td", { class: "mono ellipsis", title: ev.idempotency_key || "" }, ev.idempotency_key || el("span", { class: "muted" }, "—")),
      el("td", {}, statusChips(ev)));
  });
}

/** "customer.id = 42": a payload field, which only the archive can search. */
export const payloadQuery = (q) => /^[\w.]+\s*(=|==)\s*\S/.test(q.trim());
export const PAYLOAD_NOTE = "Searching payload fields needs the archive, which this relay does not have: search an event id, a delivery id or an Idempotency-Key";

/**
 * "customer.id = 42" as the JSON object GET /v1/events?payload= looks for in a payload
 * ({"customer": {"id": 42}}); the value is JSON when it parses (42, true, "42"), else
 * the text. "" for anything else.
 */
export function payloadFilter(raw) {
  const q = raw.trim();
  if (!payloadQuery(q)) return "";
  const [, path, text] = q.match(/^([\w.]+)\s*==?\s*(.+)$/);
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    value = text;
  }
  const keys = path.split(".").filter(Boolean);
  if (!keys.length) return "";
  let obj = value;
  for (const k of keys.reverse()) obj = { [k]: obj };
  return JSON.stringify(obj);
}

/**
 * What the search box found: {event, delivery} ids, or null. `q` is an event id, a
 * delivery id, or else an Idempotency-Key.
 */
export async function findEvent(api, raw) {
  const q = raw.trim();
  if (!q) return null;
  try {
    if (q.startsWith("evt_")) {
      const ev = await api("GET", `v1/events/${encodeURIComponent(q)}`);
      return { event: ev.id, delivery: null };
    }
    if (q.startsWith("dlv_")) {
      const d = await api("GET", `v1/deliveries/${encodeURIComponent(q)}`);
      return { event: d.event_id, delivery: d.id };
    }
    const { rows } = await eventsPage(api, { idempotency_key: q }, "", 1);
    return rows.length ? { event: rows[0].id, delivery: null } : null;
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 422)) return null;
    throw e;
  }
}

/** A datetime-local input's value as ms since the epoch ("" when empty). */
export const localMs = (value) => (value ? new Date(value).getTime() : "");
