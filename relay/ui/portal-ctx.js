// The portal's session, state, API client and page helpers, shared by its views.
//
// The token arrives in the URL fragment (#token=...; browsers never send a fragment to
// a server), is removed from the address bar at once (history.replaceState), and is
// kept in memory and this tab's sessionStorage (so a reload still works). It is sent
// only as `Authorization: Bearer`, never in a query string. A second link opened in
// the same tab (a hashchange) replaces the session, whatever state the page is in.
import { client, AuthError, ApiError } from "./api.js";

export const $ = (id) => document.getElementById(id);
const KEY = "relay.portal";

/** The token of the fragment if there is one (it then replaces the stored one). */
export function takeToken() {
  const frag = new URLSearchParams(window.location.hash.slice(1));
  let token = frag.get("token");
  let app = frag.get("app") || "";
  if (token) {
    // Out of the address bar (and so out of history, bookmarks, screenshots) first.
    history.replaceState(null, "", window.location.pathname + window.location.search);
    sessionStorage.setItem(KEY, JSON.stringify({ token, app }));
  } else {
    try {
      ({ token, app } = JSON.parse(sessionStorage.getItem(KEY) || "{}"));
    } catch {
      token = null;
    }
  }
  return { token: token || null, app: app || "" };
}

export const forget = () => sessionStorage.removeItem(KEY);

/** What one session sees; reset() starts afresh for a new link. */
export const state = {};
export function reset(session) {
  Object.assign(state, {
    ...session,
    branding: null,
    endpoints: new Map(),
    types: [],
    typeInfo: new Map(),
    typesFromCatalog: false,
    secrets: new Map(), // endpoint id -> {secret, note} shown after "Reveal" or a rotation
    armed: null, // "rotate:<id>" or "recover:<id>" awaiting a second click
    filter: { endpoint_id: "", status: "" },
    cursor: null,
    rows: [],
    detail: null,
    event: null, // the open delivery's event (its payload)
    eventId: null, // the event shown in the event panel
    focusDelivery: null,
    gone: false,
  });
}

export const api = client(new URL("..", window.location.href), () => state.token);
export { AuthError as Gone, ApiError };

/** Filled by portal.js: refresh(), showGone(expired). */
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

export function fail(e) {
  if (e instanceof AuthError) hooks.showGone(true);
  else toast(e.message || "relay did not answer", true);
}

export const label = (ep) => {
  try {
    const u = new URL(ep.url);
    return u.host + u.pathname;
  } catch {
    return ep.url;
  }
};
