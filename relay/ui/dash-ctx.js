// The dashboard's shared state, API client and small page helpers. The views import
// it; app.js (the entry) fills `hooks` with what crosses views (refresh, navigation).
import { client, AuthError, ApiError } from "./api.js";
import { el } from "./kit.js";

export const $ = (id) => document.getElementById(id);
export const TOKEN_KEY = "relay.token";

export const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  view: "deliveries",
  param: "", // the event id of the event view, the endpoint id of the endpoint view
  endpoints: new Map(),
  health: new Map(),
  catalog: [], // the event type catalog (read-only here)
  filters: { status: "", endpoint_id: "", type: "" },
  cursors: [null], // cursor of each page seen so far; the last one is the current page
  nextCursor: null,
  drawerId: null,
  timer: null,
  busy: false,
  types: new Set(),
  armed: null, // endpoint id whose "recover dead" awaits confirmation
  armedAction: null, // "rotate:<id>" or "delete:<id>" awaiting a second click
  shownSecret: null, // {id, secret} after a rotation, until hidden
  series: null, // the chart's last data, redrawn on resize
};

export const api = client(new URL("..", window.location.href), () => state.token);

/** Filled by app.js: refresh(), setView(view, param), signOut(message). */
export const hooks = {};

let toastTimer = null;
export function toast(text, isError) {
  const t = $("toast");
  t.textContent = text;
  t.className = isError ? "toast error" : "toast";
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 4000);
}

export function setLive(ok, text) {
  $("live").className = ok ? "live ok" : "live down";
  $("live-text").textContent = text;
}

export function handleError(e) {
  if (e instanceof AuthError) hooks.signOut("The token was rejected. Sign in again.");
  else if (e instanceof ApiError) toast(e.message, true);
  else setLive(false, "relay unreachable, retrying");
}

export function endpointLabel(id) {
  const ep = state.endpoints.get(id);
  if (!ep) return id;
  try {
    const u = new URL(ep.url);
    return u.host + u.pathname;
  } catch {
    return ep.url;
  }
}

/** A link to another view of the dashboard (a real <a>: keyboard and middle-click work). */
export const viewLink = (view, param, text, attrs) =>
  el("a", { href: `#/${view}${param ? `/${encodeURIComponent(param)}` : ""}`, ...(attrs || {}) }, text);

export { AuthError, ApiError };
