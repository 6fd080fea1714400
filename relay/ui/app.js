// relay dashboard: vanilla JS modules, no build step, no third-party code. This is the
// entry: sign in and out, the views and their routes (#/deliveries, #/event/<id>, ...),
// and the poll that refreshes whatever shows.
//
// Safety rule: data from the API (payloads, errors, urls, anything) only ever reaches
// the page as text (textContent / text nodes / attribute values set one by one);
// innerHTML is never used. The token lives in sessionStorage, never in a URL.
import { setSkew, clock, renderChart } from "./kit.js";
import { $, TOKEN_KEY, state, api, hooks, AuthError, handleError, setLive } from "./dash-ctx.js";
import { renderCards } from "./dash-overview.js";
import { loadDeliveries, applyFilters, replay, discard } from "./dash-deliveries.js";
import { closeDrawer, loadDrawer } from "./dash-drawer.js";
import { loadEndpoints, renderEndpoints, editEndpoint } from "./dash-endpoints.js";
import { loadReplays, replayRange } from "./dash-replays.js";
import { loadTypes } from "./dash-types.js";
import { loadEvent, find } from "./dash-event.js";
import { loadEndpoint } from "./dash-endpoint.js";
import { loadEvents, wireEvents, fillEventEndpoints, eventsLive } from "./dash-events.js";

const POLL_MS = 2500;
const VIEWS = ["deliveries", "events", "endpoints", "types", "event", "endpoint"];
const WITH_ID = ["event", "endpoint"];

// ------------------------------------------------------------------ sign in / out

function showSignin(message) {
  stopPolling();
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("token").focus();
}

async function signIn(token) {
  state.token = token;
  try {
    await api("GET", "v1/stats");
  } catch (e) {
    state.token = null;
    if (e instanceof AuthError) throw new Error("That token was not accepted.");
    throw new Error(`relay did not answer: ${e.message}`);
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  closeDrawer();
  showSignin(message);
}

// ------------------------------------------------------------------ polling

let again = false;
async function refresh() {
  // One refresh at a time; a request for another while one runs makes one more after it.
  if (state.busy) {
    again = true;
    return;
  }
  state.busy = true;
  again = false;
  try {
    const jobs = [api("GET", "v1/ui/overview").then((ov) => {
      setSkew(ov.server_time - Date.now());
      $("version").textContent = `v${ov.version}`;
      renderCards(ov);
      state.series = ov.series;
      renderChart(ov.series);
    })];
    // Endpoint names label the deliveries table, so they load first.
    jobs.push(loadEndpoints().then(() => {
      if (state.view === "deliveries" && state.cursors.length === 1) return loadDeliveries();
      if (state.view === "event") return loadEvent();
      if (state.view === "endpoint") return loadEndpoint();
      if (state.view === "events") {
        fillEventEndpoints();
        return eventsLive() ? loadEvents() : null;
      }
      return null;
    }));
    if (state.drawerId) jobs.push(loadDrawer());
    jobs.push(loadReplays());
    if (state.view === "types") jobs.push(loadTypes());
    await Promise.all(jobs);
    setLive(true, `live · ${clock(Date.now())}`);
  } catch (e) {
    handleError(e);
  } finally {
    state.busy = false;
  }
  if (again && state.token) await refresh();
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => {
    if (!document.hidden) await refresh();
    if (state.token) schedule();
  }, POLL_MS);
}
function stopPolling() {
  clearTimeout(state.timer);
  state.timer = null;
}

// ------------------------------------------------------------------ views

/** "#/event/evt_1" -> ["event", "evt_1"]; anything unknown is the deliveries view. */
function route(hash) {
  const [view, param] = hash.replace(/^#\/?/, "").split("/");
  const known = VIEWS.includes(view) && (!WITH_ID.includes(view) || param);
  return known ? [view, param ? decodeURIComponent(param) : ""] : ["deliveries", ""];
}

function setView(view, param) {
  [state.view, state.param] = route(`#/${view}${param ? `/${encodeURIComponent(param)}` : ""}`);
  const hash = `#/${state.view}${state.param ? `/${encodeURIComponent(state.param)}` : ""}`;
  if (window.location.hash !== hash) window.location.hash = hash;
  for (const v of VIEWS) $(`view-${v}`).hidden = state.view !== v;
  const tab = { event: "events", endpoint: "endpoints" }[state.view] || state.view;
  for (const a of document.querySelectorAll(".tabs a")) a.classList.toggle("active", a.dataset.view === tab);
  $("toast").hidden = true;
  if (state.drawerId) closeDrawer();
  if (state.view === "endpoints") renderEndpoints();
  if (state.view === "event") {
    $("ev-id").textContent = state.param;
    $("ev-body").replaceChildren();
    $("view-event").focus();
  }
  if (state.view === "endpoint") {
    $("ep-title").textContent = state.param;
    $("ep-body").replaceChildren();
    $("view-endpoint").focus();
  }
  if (state.token) refresh();
}

function start() {
  $("signin").hidden = true;
  $("app").hidden = false;
  // The form is hidden: the token leaves it, and so does the keyboard's focus, which
  // would otherwise stay in the hidden field and take the next keys ("/" included).
  $("token").value = "";
  $("token").blur();
  setView(...route(window.location.hash || "")); // loads the data
  schedule();
}

// ------------------------------------------------------------------ wiring

function wire() {
  wireEvents();
  $("signin-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    $("signin-error").textContent = "";
    try {
      await signIn(token);
    } catch (err) {
      $("signin-error").textContent = err.message;
    }
  });
  $("signout").addEventListener("click", () => signOut(""));
  $("f-status").addEventListener("change", applyFilters);
  $("f-endpoint").addEventListener("change", applyFilters);
  let typing = null;
  $("f-type").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(applyFilters, 400);
  });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("replay-form").addEventListener("submit", (e) => {
    e.preventDefault();
    replayRange(false);
  });
  $("r-count").addEventListener("click", () => replayRange(true));
  $("ep-new").addEventListener("click", () => editEndpoint(null).catch(handleError));
  $("f-reset").addEventListener("click", () => {
    $("f-status").value = "";
    $("f-endpoint").value = "";
    $("f-type").value = "";
    applyFilters();
  });
  $("search").addEventListener("submit", (e) => {
    e.preventDefault();
    find($("q").value);
  });
  $("page-next").addEventListener("click", () => {
    if (!state.nextCursor) return;
    state.cursors.push(state.nextCursor);
    loadDeliveries().catch(handleError);
  });
  $("page-prev").addEventListener("click", () => {
    if (state.cursors.length > 1) state.cursors.pop();
    loadDeliveries().catch(handleError);
  });
  $("page-first").addEventListener("click", () => {
    state.cursors = [null];
    loadDeliveries().catch(handleError);
  });
  $("d-close").addEventListener("click", closeDrawer);
  $("scrim").addEventListener("click", closeDrawer);
  $("d-replay").addEventListener("click", (e) => state.drawerId && replay(state.drawerId, e.currentTarget));
  $("d-discard").addEventListener("click", (e) => state.drawerId && discard(state.drawerId, e.currentTarget));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.drawerId) closeDrawer();
    // "/" jumps to the search box, as on most consoles.
    if (e.key === "/" && !e.target.closest("input, textarea, select, dialog")) {
      e.preventDefault();
      $("q").focus();
    }
  });
  window.addEventListener("hashchange", () => {
    const [view, param] = route(window.location.hash);
    if ((view !== state.view || param !== state.param) && state.token) setView(view, param);
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && state.token) refresh();
  });
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => state.series && renderChart(state.series), 100);
  });
}

Object.assign(hooks, { refresh, setView, signOut });
wire();
if (state.token) {
  // A token from this tab's session: check it quietly, fall back to the form.
  signIn(state.token).catch((e) => showSignin(e.message));
} else {
  showSignin("");
}
