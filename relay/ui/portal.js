// relay consumer portal: an app's customer manages their own endpoints and sees what
// happened to their webhooks. Vanilla JS modules, no build step, no third-party code.
// Data from the API reaches the page as text only (kit.el); innerHTML is never used.
// This is the entry: the session (portal-ctx.js), the poll and the wiring.
import { $, state, api, hooks, reset, takeToken, forget, Gone, toast, fail } from "./portal-ctx.js";
import { loadEndpoints, loadTypes, editEndpoint } from "./portal-endpoints.js";
import { applyBranding } from "./portal-brand.js";
import { loadDeliveries, loadDetail, renderDeliveries, applyFilter, replay } from "./portal-deliveries.js";
import { loadEvents, loadEvent, wireEvents, closeEvent } from "./portal-events.js";

const POLL_MS = 3000;
let timer = null;
let generation = 0; // bumped by each new session: answers of the one before are dropped

function showGone(expired) {
  state.gone = true;
  clearTimeout(timer);
  forget();
  state.token = null;
  $("portal").hidden = true;
  for (const d of document.querySelectorAll("dialog")) d.remove(); // a half-filled form
  $("gone").hidden = false;
  $("gone-title").textContent = expired ? "This link has expired" : "This page needs a link";
  $("gone-text").textContent = expired
    ? "Ask the service that sent you here for a new one: links to this page work for a limited time."
    : "Open it from the service you use: its link carries the access this page needs.";
}

let busy = false;
let again = false;
async function refresh() {
  // One at a time; asked again meanwhile (a write, a new link), one more runs after it.
  if (state.gone) return;
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  again = false;
  const mine = generation;
  try {
    await loadEndpoints();
    if (mine === generation) await Promise.all([loadEvents(), loadEvent(), loadDeliveries(false), loadDetail()]);
  } catch (e) {
    if (mine === generation) fail(e);
  } finally {
    busy = false;
  }
  if (again) await refresh();
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (!document.hidden) await refresh();
    if (!state.gone) schedule();
  }, POLL_MS);
}

function closeDetail() {
  state.detail = null;
  $("p-detail").hidden = true;
  renderDeliveries();
}

function wire() {
  wireEvents();
  $("p-new").addEventListener("click", () => editEndpoint(null));
  $("p-f-endpoint").addEventListener("change", applyFilter);
  $("p-f-status").addEventListener("change", applyFilter);
  $("p-filters").addEventListener("submit", (e) => e.preventDefault());
  $("p-refresh").addEventListener("click", refresh);
  $("p-more").addEventListener("click", () => loadDeliveries(true).catch(fail));
  $("p-d-close").addEventListener("click", closeDetail);
  $("p-d-replay").addEventListener("click", () => state.detail && replay(state.detail.id));
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || e.target.closest("dialog")) return;
    if (state.detail) closeDetail();
    else if (state.eventId) closeEvent();
  });
  // Another link opened in this tab: its session replaces this one.
  window.addEventListener("hashchange", () => {
    if (new URLSearchParams(window.location.hash.slice(1)).get("token")) start();
  });
}

/** Start (or restart, for a new link) from the session in the fragment or the tab. */
async function start() {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  for (const d of document.querySelectorAll("dialog")) d.remove();
  reset(takeToken());
  if (!state.token) return showGone(false);
  $("gone").hidden = true;
  $("p-detail").hidden = true;
  $("p-event").hidden = true;
  for (const f of ["p-filters", "p-e-filters", "p-search"]) $(f).reset();
  try {
    // The first call proves the token (or shows the expired page) and names its app.
    const session = await api("GET", "v1/portal/session");
    if (mine !== generation) return;
    state.app = session.app;
    applyBranding(session.branding);
    await loadEndpoints();
  } catch (e) {
    if (e instanceof Gone) return showGone(true);
    toast(e.message, true);
  }
  if (mine !== generation) return;
  $("portal").hidden = false;
  await loadTypes().catch(fail);
  await refresh();
  if (mine === generation) schedule();
}

Object.assign(hooks, { refresh, showGone });
wire();
start();
