// The portal's endpoints: the list with its actions (edit, enable/disable, reveal and
// rotate the secret, send a test event, recover dead), and the event type catalog.
import { el, changed, coarse, num, iso, clock, badge } from "./kit.js";
import { open as openForm } from "./epform.js";
import { $, state, api, hooks, Gone, ApiError, toast, fail, label } from "./portal-ctx.js";
import { applyFilter } from "./portal-deliveries.js";

const TEST_TYPE = "relay.test";

export async function loadEndpoints() {
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

export async function editEndpoint(ep) {
  const saved = await openForm({
    title: ep ? "Edit endpoint" : "Add an endpoint",
    endpoint: ep,
    types: state.types,
    typeInfo: state.typeInfo,
    save: (body) => {
      if (!ep && state.app) body.app = state.app;
      const sent = ep ? api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, body) : api("POST", "v1/endpoints", null, body);
      // An expired link closes the form and shows the expired page; other errors stay in it.
      return sent.catch((e) => {
        if (!(e instanceof Gone)) throw e;
        hooks.showGone(true);
        return null;
      });
    },
  }).catch((e) => fail(e));
  if (!saved) return;
  if (!ep && saved.secret) state.secrets.set(saved.id, { secret: saved.secret, note: "verify each webhook's signature with it" });
  toast(ep ? `Saved ${label(saved)}` : `Added ${label(saved)}`);
  await hooks.refresh();
}

async function setEnabled(ep, enabled, button) {
  button.disabled = true;
  try {
    await api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, { enabled });
    toast(enabled ? `Enabled ${label(ep)}: held deliveries go out now` : `Disabled ${label(ep)}: deliveries are held`);
  } catch (e) {
    fail(e);
  }
  await hooks.refresh();
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
  await hooks.refresh();
}

async function recover(id) {
  state.armed = null;
  try {
    const res = await api("POST", `v1/endpoints/${encodeURIComponent(id)}/recover`, null, {});
    toast(`Recovered ${num(res.recovered)} dead deliver${res.recovered === 1 ? "y" : "ies"}`);
  } catch (e) {
    fail(e);
  }
  await hooks.refresh();
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
  await hooks.refresh();
}


export async function loadTypes() {
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
