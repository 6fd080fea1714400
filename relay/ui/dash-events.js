// The events view: every app's events, newest first, filtered by type, app, endpoint,
// the status of their deliveries, creation time and, the archive on, a payload field of
// archived events; a row opens the event page.
import { replaceRows, el, changed, coarse } from "./kit.js";
import { $, state, api, hooks, handleError } from "./dash-ctx.js";
import { eventsPage, eventRows, localMs, payloadFilter } from "./eventlist.js";

const PAGE_SIZE = 25;
const page = { filters: {}, cursors: [""], next: null };
let archive = null; // whether the archive is on: null until asked

function filters() {
  return {
    type: $("e-type").value.trim(), app: $("e-app").value.trim(), endpoint_id: $("e-endpoint").value,
    status: $("e-status").value, since: localMs($("e-since").value), until: localMs($("e-until").value),
    payload: payloadFilter($("e-payload").value),
  };
}

/** Whether the archive is on (GET /v1/stats has an `archived` section then); asked once. */
export async function archiveOn() {
  if (archive === null) archive = "archived" in (await api("GET", "v1/stats"));
  $("e-payload-label").hidden = !archive;
  return archive;
}

/** The events list narrowed to a payload field ("customer.id = 42"), the archive on. */
export function searchPayload(raw) {
  $("e-filters").reset();
  $("e-payload").value = raw.trim();
  page.filters = filters();
  page.cursors = [""];
  hooks.setView("events");
}

let seq = 0;
export async function loadEvents() {
  const mine = ++seq;
  if (archive === null) await archiveOn();
  const { rows, next } = await eventsPage(api, page.filters, page.cursors[page.cursors.length - 1], PAGE_SIZE);
  if (mine !== seq) return;
  page.next = next;
  render(rows);
}

function render(rows) {
  if (!changed("events", rows, page.filters, page.cursors.length, page.next, coarse(10e3))) return;
  replaceRows($("events").tBodies[0], eventRows(rows, (id) => hooks.setView("event", id), true));
  const empty = $("events-empty");
  empty.hidden = rows.length > 0;
  empty.textContent = Object.values(page.filters).some(Boolean) ? "No events match these filters." : "No events yet.";
  const n = page.cursors.length;
  $("e-page-info").textContent = `Page ${n} · ${rows.length} shown${n === 1 ? " · refreshing live" : ""}`;
  $("e-page-first").disabled = n === 1;
  $("e-page-next").disabled = !page.next;
}

function apply() {
  page.filters = filters();
  page.cursors = [""];
  loadEvents().catch(handleError);
}

/** The endpoint filter's options follow the endpoints list (kept when unchanged). */
export function fillEventEndpoints() {
  const sel = $("e-endpoint");
  const eps = [...state.endpoints.values()];
  if (!changed("e-endpoint", eps.map((e) => [e.id, e.url]))) return;
  const current = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "any"), ...eps.map((ep) => el("option", { value: ep.id }, `${ep.app} · ${ep.url}`)));
  sel.value = state.endpoints.has(current) ? current : "";
}

/** Live while on its first page; older pages stay put. */
export const eventsLive = () => page.cursors.length === 1;

export function wireEvents() {
  for (const id of ["e-endpoint", "e-status", "e-since", "e-until"]) $(id).addEventListener("change", apply);
  let typing = null;
  for (const id of ["e-type", "e-app", "e-payload"]) {
    $(id).addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(apply, 400);
    });
  }
  $("e-filters").addEventListener("submit", (e) => e.preventDefault());
  $("e-reset").addEventListener("click", () => {
    $("e-filters").reset();
    apply();
  });
  $("e-page-next").addEventListener("click", () => {
    if (!page.next) return;
    page.cursors.push(page.next);
    loadEvents().catch(handleError);
  });
  $("e-page-first").addEventListener("click", () => {
    page.cursors = [""];
    loadEvents().catch(handleError);
  });
}
