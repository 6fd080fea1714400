// relay consumer portal: an app's customer manages their own endpoints. Vanilla JS, no
// build step, no third-party code.
//
// The token arrives in the URL fragment (#token=...; browsers never send a fragment to
// a server), is removed from the address bar at once (history.replaceState), and is
// kept in memory and this tab's sessionStorage (so a reload still works). It is sent
// only as `Authorization: Bearer`, never in a query string. Data from the API reaches
// the page as text only (kit.el); innerHTML is never used.
"use strict";

(() => {
  const POLL_MS = 3000;
  const PAGE = 20;
  const KEY = "relay.portal";
  const ROOT = new URL("..", window.location.href); // relay's base, beside /portal/
  const TEST_TYPE = "relay.test";
  const { el, changed, coarse, num, ago, iso, clock, badge } = window.relayKit;
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ the token

  function takeToken() {
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

  const state = {
    ...takeToken(),
    endpoints: new Map(),
    types: [],
    typesFromCatalog: false,
    secrets: new Map(), // endpoint id -> {secret, note} shown after "Reveal" or a rotation
    armed: null, // "rotate:<id>" or "recover:<id>" awaiting a second click
    filter: { endpoint_id: "", status: "" },
    cursor: null,
    rows: [],
    detail: null,
    timer: null,
    gone: false,
  };

  class Gone extends Error {}
  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, params, body) {
    const url = new URL(path, ROOT);
    for (const [k, v] of Object.entries(params || {})) if (v) url.searchParams.set(k, v);
    const headers = { Authorization: `Bearer ${state.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(url, {
      method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) throw new Gone("token rejected");
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) throw new ApiError((data && data.message) || `HTTP ${res.status}`, res.status);
    return data;
  }

  function showGone(expired) {
    state.gone = true;
    clearTimeout(state.timer);
    sessionStorage.removeItem(KEY);
    state.token = null;
    $("portal").hidden = true;
    for (const d of document.querySelectorAll("dialog")) d.remove(); // a half-filled form
    $("gone").hidden = false;
    $("gone-title").textContent = expired ? "This link has expired" : "This page needs a link";
    $("gone-text").textContent = expired
      ? "Ask the service that sent you here for a new one: links to this page work for a limited time."
      : "Open it from the service you use: its link carries the access this page needs.";
  }

  let toastTimer = null;
  function toast(text, isError) {
    const t = $("toast");
    t.textContent = text;
    t.className = isError ? "toast error" : "toast";
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (t.hidden = true), 4000);
  }
  function fail(e) {
    if (e instanceof Gone) showGone(true);
    else toast(e.message || "relay did not answer", true);
  }

  // ------------------------------------------------------------------ endpoints

  const label = (ep) => {
    try {
      const u = new URL(ep.url);
      return u.host + u.pathname;
    } catch {
      return ep.url;
    }
  };

  async function loadEndpoints() {
    const list = await api("GET", "v1/endpoints", { app: state.app });
    state.endpoints = new Map(list.data.map((e) => [e.id, e]));
    if (!state.app && list.data.length) state.app = list.data[0].app;
    $("p-app").textContent = state.app ? `· ${state.app}` : "";
    renderEndpoints();
    fillEndpointFilter();
    if (!state.typesFromCatalog) renderTypes();
  }

  function act(text, onclick, attrs) {
    return el("button", { type: "button", class: "btn small", onclick, ...(attrs || {}) }, text);
  }

  function renderEndpoints() {
    if (!changed("p-endpoints", [...state.endpoints.values()], [...state.secrets], state.armed, coarse(10e3))) return;
    const items = [...state.endpoints.values()].map((ep) => {
      const b = ep.breaker && ep.breaker.state;
      const secret = state.secrets.get(ep.id);
      const armed = (what) => state.armed === `${what}:${ep.id}`;
      const arm = (what) => () => {
        state.armed = `${what}:${ep.id}`;
        renderEndpoints();
      };
      const disarm = act("Cancel", () => { state.armed = null; renderEndpoints(); }, { class: "btn small ghost" });
      // The text (address, state; id, description, limit, types) beside the buttons where
      // the width allows, the buttons below it where it does not.
      return el("li", { class: "p-ep", dataset: { id: ep.id } },
        el("div", { class: "p-ep-main" },
          el("div", { class: "p-ep-top" },
            el("span", { class: "p-ep-url", title: ep.url }, ep.url),
            ep.enabled ? badge("enabled", "succeeded") : badge("disabled", "disabled"),
            b && b !== "closed" ? el("span", { title: ep.breaker.open_until ? `until ${iso(ep.breaker.open_until)}` : "" }, badge(`failing: ${b.replace("_", "-")}`, b)) : null),
          el("div", { class: "sub-line" }, el("span", { class: "mono" }, ep.id), ep.description ? ` · ${ep.description}` : "",
            ep.rate_limit ? ` · at most ${num(ep.rate_limit)}/s` : "", " ",
            ep.event_types.map((t) => el("span", { class: "chip" }, t)))),
        secret ? el("div", { class: "p-secret", dataset: { secret: ep.id } },
          el("span", { class: "muted" }, "Signing secret"), el("code", {}, secret.secret),
          secret.note ? el("span", { class: "muted small" }, secret.note) : null,
          act("Hide", () => { state.secrets.delete(ep.id); renderEndpoints(); }, { class: "btn small ghost" })) : null,
        el("div", { class: "actions" },
          act("Edit", () => editEndpoint(ep)),
          act(ep.enabled ? "Disable" : "Enable", (e) => setEnabled(ep, !ep.enabled, e.currentTarget)),
          secret ? null : act("Reveal secret", () => revealSecret(ep.id)),
          armed("rotate") ? [act("Rotate now", () => rotate(ep.id), { class: "btn small danger" }), disarm]
            : act("Rotate secret…", arm("rotate"), { title: "A new secret; the old one keeps signing for a grace period" }),
          act("Send test event", (e) => sendTest(ep, e.currentTarget)),
          act("Deliveries", () => { $("p-f-endpoint").value = ep.id; applyFilter(); }, { class: "btn small ghost" }),
          armed("recover") ? [act("Recover all dead", () => recover(ep.id), { class: "btn small danger" }), disarm]
            : act("Recover dead…", arm("recover"), { class: "btn small ghost", title: "Send every dead delivery of this endpoint again" })));
    });
    $("p-endpoints").replaceChildren(...items);
    $("p-endpoints-empty").hidden = items.length > 0;
  }

  function fillEndpointFilter() {
    const sel = $("p-f-endpoint");
    if (!changed("p-filter", [...state.endpoints.values()].map((e) => [e.id, e.url]))) return;
    const current = sel.value;
    sel.replaceChildren(el("option", { value: "" }, "all"),
      ...[...state.endpoints.values()].map((ep) => el("option", { value: ep.id }, label(ep))));
    sel.value = state.endpoints.has(current) ? current : "";
  }

  async function editEndpoint(ep) {
    const saved = await window.relayEpForm.open({
      title: ep ? "Edit endpoint" : "Add an endpoint",
      endpoint: ep,
      types: state.types,
      save: (body) => {
        if (!ep && state.app) body.app = state.app;
        const sent = ep ? api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, body) : api("POST", "v1/endpoints", null, body);
        // An expired link closes the form and shows the expired page; other errors stay in it.
        return sent.catch((e) => {
          if (!(e instanceof Gone)) throw e;
          showGone(true);
          return null;
        });
      },
    }).catch((e) => fail(e));
    if (!saved) return;
    if (!ep && saved.secret) state.secrets.set(saved.id, { secret: saved.secret, note: "verify each webhook's signature with it" });
    toast(ep ? `Saved ${label(saved)}` : `Added ${label(saved)}`);
    await refresh();
  }

  async function setEnabled(ep, enabled, button) {
    button.disabled = true;
    try {
      await api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, { enabled });
      toast(enabled ? `Enabled ${label(ep)}: held deliveries go out now` : `Disabled ${label(ep)}: deliveries are held`);
    } catch (e) {
      fail(e);
    }
    await refresh();
  }

  async function revealSecret(id) {
    try {
      const res = await api("GET", `v1/endpoints/${encodeURIComponent(id)}/secret`);
      state.secrets.set(id, { secret: res.secret, note: "" });
      renderEndpoints();
    } catch (e) {
      fail(e);
    }
  }

  async function rotate(id) {
    state.armed = null;
    try {
      const res = await api("POST", `v1/endpoints/${encodeURIComponent(id)}/rotate-secret`, null, {});
      const until = res.previous_secret_expires_at;
      state.secrets.set(id, { secret: res.secret, note: until ? `new; the old one also signs until ${clock(until)}` : "new" });
      toast("Secret rotated");
    } catch (e) {
      fail(e);
    }
    await refresh();
  }

  async function recover(id) {
    state.armed = null;
    try {
      const res = await api("POST", `v1/endpoints/${encodeURIComponent(id)}/recover`, null, {});
      toast(`Recovered ${num(res.recovered)} dead deliver${res.recovered === 1 ? "y" : "ies"}`);
    } catch (e) {
      fail(e);
    }
    await refresh();
  }

  async function sendTest(ep, button) {
    button.disabled = true;
    try {
      let sent;
      try {
        sent = await api("POST", `v1/endpoints/${encodeURIComponent(ep.id)}/test`, null, {});
      } catch (e) {
        if (!(e instanceof ApiError) || (e.status !== 404 && e.status !== 405)) throw e;
        // No test route on this relay: publish a relay.test event to this endpoint only.
        const body = { type: TEST_TYPE, payload: { test: true, endpoint_id: ep.id, sent_at: new Date().toISOString() }, endpoint_ids: [ep.id] };
        if (state.app || ep.app) body.app = state.app || ep.app;
        sent = await api("POST", "v1/events", null, body);
        if (!sent.deliveries || !sent.deliveries.length) {
          throw new Error(`Not sent: this endpoint does not subscribe to ${TEST_TYPE} (or is disabled)`);
        }
      }
      toast(`Test event sent to ${label(ep)}`);
    } catch (e) {
      fail(e);
    } finally {
      button.disabled = false;
    }
    await refresh();
  }

  // ------------------------------------------------------------------ event types

  async function loadTypes() {
    try {
      const res = await api("GET", "v1/event-types");
      state.types = res.data.filter((t) => !t.deprecated).map((t) => t.name);
      // an empty catalog (the service keeps none): the types the endpoints subscribe to
      state.typesFromCatalog = res.data.length > 0;
      state.typeInfo = new Map(res.data.map((t) => [t.name, t.description || ""]));
    } catch (e) {
      if (!(e instanceof ApiError) || (e.status !== 404 && e.status !== 403)) throw e;
      state.typesFromCatalog = false; // no catalog here: the types the endpoints subscribe to
    }
    renderTypes();
  }

  function renderTypes() {
    if (!state.typesFromCatalog) {
      state.types = [...new Set([...state.endpoints.values()].flatMap((e) => e.event_types))].filter((t) => t !== "*").sort();
    }
    if (!changed("p-types", state.types, state.typesFromCatalog)) return;
    $("p-types-note").textContent = state.typesFromCatalog ? "the events this service sends" : "the types your endpoints subscribe to";
    const info = state.typeInfo || new Map();
    $("p-types").replaceChildren(...(state.types.length ? state.types.map((t) =>
      el("li", {}, el("span", { class: "chip" }, t), info.get(t) ? el("span", { class: "muted small" }, info.get(t)) : null))
      : [el("li", { class: "muted" }, "none yet")]));
  }

  // ------------------------------------------------------------------ deliveries

  const WAIT = {
    endpoint_disabled: () => "held: endpoint disabled",
    breaker_open: (w) => `endpoint failing, next try ${ago(w.until)}`,
    breaker_probing: (w) => `endpoint failing, next try ${ago(w.until)}`,
    in_flight_cap: (w) => `waiting for a free slot, ${ago(w.until)}`,
    rate_limited: (w) => `rate limited, ${ago(w.until)}`,
    lane_blocked: () => "waiting for an earlier event of the same key",
    retry_backoff: (w) => `retry ${ago(w.until)}`,
    scheduled: (w) => `due ${ago(w.until)}`,
    deliver_at: (w) => `scheduled, goes ${ago(w.until)}`,
  };
  function when(d) {
    if (d.lane_blocked && (d.status === "pending" || d.status === "held")) return WAIT.lane_blocked();
    const w = d.waiting && WAIT[d.waiting.reason];
    if (w) return w(d.waiting);
    if (d.status === "held") return "held: endpoint disabled";
    if (d.status === "pending") return `due ${ago(d.next_attempt_at)}`;
    if (d.status === "delivering") return "sending now";
    return ago(d.finished_at || d.updated_at);
  }
  function result(d) {
    if (d.last_status_code) return el("span", { class: d.last_status_code < 300 ? "" : "err-text" }, `HTTP ${d.last_status_code}`);
    if (d.last_error) return el("span", { class: "err-text" }, d.last_error);
    return el("span", { class: "muted" }, "—");
  }

  async function loadDeliveries(more) {
    const params = { ...state.filter, limit: PAGE, cursor: more ? state.cursor : "" };
    const page = await api("GET", "v1/deliveries", params);
    const mine = page.data.filter((d) => !state.app || d.app === state.app);
    state.rows = more ? [...state.rows, ...mine] : mine;
    state.cursor = page.next_cursor;
    renderDeliveries();
  }

  function renderDeliveries() {
    if (!changed("p-deliveries", state.rows, state.cursor, state.detail && state.detail.id, coarse(10e3))) return;
    $("p-deliveries").tBodies[0].replaceChildren(...state.rows.map((d) => el("tr",
      { dataset: { id: d.id, status: d.status }, class: state.detail && state.detail.id === d.id ? "selected" : "", onclick: () => openDetail(d.id), tabindex: 0, onkeydown: (e) => e.key === "Enter" && openDetail(d.id) },
      el("td", {}, badge(d.status)),
      el("td", { class: "ellipsis" }, d.type),
      el("td", { class: "num" }, `${d.attempts} / ${d.max_attempts}`),
      el("td", { class: "ellipsis" }, result(d)),
      el("td", { class: "when-cell", title: iso(d.finished_at || d.next_attempt_at || d.updated_at) }, when(d)),
      el("td", {}, d.status === "dead" ? act("Replay", (e) => { e.stopPropagation(); replay(d.id); }) : null))));
    $("p-deliveries-empty").hidden = state.rows.length > 0;
    $("p-more").hidden = !state.cursor;
  }

  function applyFilter() {
    state.filter = { endpoint_id: $("p-f-endpoint").value, status: $("p-f-status").value };
    loadDeliveries(false).catch(fail);
  }

  async function replay(id) {
    try {
      await api("POST", `v1/deliveries/${encodeURIComponent(id)}/replay`, null, {});
      toast("Sending it again");
    } catch (e) {
      fail(e);
    }
    await refresh();
  }

  async function openDetail(id) {
    state.detail = { id };
    $("p-detail").hidden = false;
    await loadDetail().catch(fail);
    $("p-detail").focus();
  }

  async function loadDetail() {
    if (!state.detail) return;
    const id = state.detail.id;
    const d = await api("GET", `v1/deliveries/${encodeURIComponent(id)}`);
    if (!state.detail || state.detail.id !== id) return;
    state.detail = d;
    if (!changed("p-detail", d, coarse(5e3))) return;
    $("p-d-id").textContent = d.id;
    $("p-d-status").replaceChildren(badge(d.status));
    const btn = $("p-d-replay");
    btn.disabled = !(d.status === "dead" || d.status === "succeeded");
    btn.textContent = d.status === "succeeded" ? "Send again" : "Replay";
    const ep = state.endpoints.get(d.endpoint_id);
    const rows = [["Event type", d.type], ["Event", el("span", { class: "mono" }, d.event_id)],
      ["Endpoint", ep ? label(ep) : d.endpoint_id], ["Attempts", `${d.attempts} of ${d.max_attempts}`],
      ["Created", `${iso(d.created_at)} · ${ago(d.created_at)}`], ["Status", el("span", {}, badge(d.status), " ", when(d))]];
    $("p-d-summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const log = d.attempt_log || [];
    $("p-d-log-empty").hidden = log.length > 0;
    $("p-d-log").tBodies[0].replaceChildren(...log.map((a) => el("tr", { dataset: { n: a.n } },
      el("td", { class: "num" }, a.n),
      el("td", { title: iso(a.at) }, clock(a.at)),
      el("td", { class: "num" }, a.duration_ms === null || a.duration_ms === undefined ? "—" : `${Math.round(a.duration_ms)} ms`),
      el("td", {}, a.status_code ? `HTTP ${a.status_code}` : a.error || "no answer", a.outcome ? ` → ${a.outcome}` : "",
        a.detail ? el("div", { class: "sub-line" }, a.detail.slice(0, 160)) : null))));
  }

  // ------------------------------------------------------------------ polling

  let busy = false;
  async function refresh() {
    if (busy || state.gone) return;
    busy = true;
    try {
      await loadEndpoints();
      await Promise.all([loadDeliveries(false), loadDetail()]);
    } catch (e) {
      fail(e);
    } finally {
      busy = false;
    }
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = setTimeout(async () => {
      if (!document.hidden) await refresh();
      if (!state.gone) schedule();
    }, POLL_MS);
  }

  function wire() {
    $("p-new").addEventListener("click", () => editEndpoint(null));
    $("p-f-endpoint").addEventListener("change", applyFilter);
    $("p-f-status").addEventListener("change", applyFilter);
    $("p-filters").addEventListener("submit", (e) => e.preventDefault());
    $("p-refresh").addEventListener("click", refresh);
    $("p-more").addEventListener("click", () => loadDeliveries(true).catch(fail));
    $("p-d-close").addEventListener("click", () => {
      state.detail = null;
      $("p-detail").hidden = true;
      renderDeliveries();
    });
    $("p-d-replay").addEventListener("click", () => state.detail && replay(state.detail.id));
  }

  async function start() {
    if (!state.token) return showGone(false);
    wire();
    try {
      await loadEndpoints(); // the first call proves the token, or shows the expired page
    } catch (e) {
      if (e instanceof Gone) return showGone(true);
      toast(e.message, true);
    }
    $("portal").hidden = false;
    await loadTypes().catch(fail);
    await refresh();
    schedule();
  }

  start();
})();
