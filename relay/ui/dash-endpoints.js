// The endpoints table: breaker, limits, success rate, and the writes (create, edit,
// enable/disable, rotate, delete, recover dead).
import { el, changed, coarse, num, ago, iso, clock, badge } from "./kit.js";
import { open as openForm } from "./epform.js";
import { $, state, api, hooks, toast, handleError, endpointLabel, viewLink } from "./dash-ctx.js";
import { applyFilters } from "./dash-deliveries.js";

export async function loadEndpoints() {
  // The health read costs a little per endpoint: only while the endpoints view shows.
  const wantHealth = state.view === "endpoints";
  const [list, health] = await Promise.all([
    api("GET", "v1/endpoints"),
    wantHealth ? api("GET", "v1/ui/endpoint-health") : null,
  ]);
  state.endpoints = new Map(list.data.map((e) => [e.id, e]));
  if (health) {
    state.health = new Map(health.data.map((h) => [h.endpoint_id, h]));
    $("endpoints-note").textContent = `success rate over each endpoint's newest ${health.sample_size} deliveries`;
  }
  fillEndpointFilter();
  if (state.view === "endpoints") renderEndpoints();
}

function fillEndpointFilter() {
  const sel = $("f-endpoint");
  // Rebuilding the options would close the list under the user's pointer.
  if (!changed("endpoint-filter", [...state.endpoints.values()].map((e) => [e.id, e.url]))) return;
  const current = sel.value;
  const opts = [el("option", { value: "" }, "any")];
  for (const ep of state.endpoints.values()) opts.push(el("option", { value: ep.id }, endpointLabel(ep.id)));
  sel.replaceChildren(...opts);
  sel.value = state.endpoints.has(current) ? current : "";
}

export function breakerCell(ep) {
  const b = ep.breaker;
  if (b === undefined || b === null) return el("span", { class: "muted" }, "—");
  const st = typeof b === "string" ? b : String(b.state || "unknown");
  const node = el("div", {}, badge(st.replace("_", "-"), st.replace(/[^a-z_-]/gi, "")));
  if (typeof b === "object") {
    const notes = [];
    if (st === "open" && b.open_until) notes.push(`probe ${ago(b.open_until)}`);
    if (b.consecutive_failures) notes.push(`${b.consecutive_failures} failure${b.consecutive_failures > 1 ? "s" : ""} in a row`);
    if (b.times_opened) notes.push(`opened ${b.times_opened}×`);
    if (notes.length) node.append(el("div", { class: "sub-line" }, notes.join(" · ")));
    if (b.last_success_at) node.title = `last success ${iso(b.last_success_at)}`;
  }
  return node;
}

function rateCell(h) {
  if (!h || h.success_rate === null || h.success_rate === undefined) return el("span", { class: "muted" }, "no finished deliveries");
  const pct = h.success_rate * 100;
  const fill = el("div", { class: `fill ${pct < 50 ? "low" : pct < 95 ? "mid" : ""}` });
  fill.style.width = `${pct}%`;
  return el("div", { class: "rate", title: `${h.succeeded} succeeded, ${h.dead} dead of the newest ${h.sample}` },
    el("div", { class: "track" }, fill), el("span", { class: "strong" }, `${pct.toFixed(1).replace(/\.0$/, "")}%`),
    el("span", { class: "muted small" }, `of ${h.succeeded + h.dead}`));
}

export function renderEndpoints() {
  if (!changed("endpoints", [...state.endpoints.values()], [...state.health.values()], state.armed, state.armedAction, state.shownSecret, coarse(10e3))) return;
  const rows = [...state.endpoints.values()].map((ep) => {
    const h = state.health.get(ep.id);
    const recover = state.armed === ep.id
      ? [el("button", { type: "button", class: "btn small danger", onclick: () => recoverDead(ep.id) }, "Recover all dead"),
         el("button", { type: "button", class: "btn small ghost", onclick: () => { state.armed = null; renderEndpoints(); } }, "Cancel")]
      : [el("button", { type: "button", class: "btn small", dataset: { recover: ep.id }, title: "Put every dead delivery of this endpoint back to pending", onclick: () => { state.armed = ep.id; renderEndpoints(); } }, "Recover dead…")];
    return el("tr", { dataset: { id: ep.id } },
      el("td", {},
        el("div", { class: "ellipsis strong", title: ep.url }, viewLink("endpoint", ep.id, ep.url, { class: "ep-link" })),
        el("div", { class: "sub-line" }, el("span", { class: "mono" }, ep.id), ep.description ? ` · ${ep.description}` : "",
          ep.signing === "ed25519" ? el("span", { class: "chip", title: `v1a signatures; public key ${ep.public_key}` }, "ed25519") : ""),
        ep.enabled ? null : el("div", { class: "sub-line", title: ep.disabled_reason || "" }, badge("disabled", "disabled"), h && h.held ? ` ${num(h.held)} held` : ""),
        state.shownSecret && state.shownSecret.id === ep.id ? el("div", { class: "sub-line", dataset: { secret: ep.id } }, "new secret ", el("code", {}, state.shownSecret.secret), " ",
          el("button", { type: "button", class: "btn small ghost", onclick: () => { state.shownSecret = null; renderEndpoints(); } }, "Hide")) : null),
      el("td", {}, ep.app),
      el("td", {}, ep.event_types.map((t) => el("span", { class: "chip" }, t)),
        ep.filter ? el("div", { class: "sub-line mono ellipsis", title: `filter: ${ep.filter}`, dataset: { col: "filter" } }, `filter: ${ep.filter}`) : null),
      el("td", { dataset: { col: "breaker" } }, breakerCell(ep)),
      el("td", { class: "num" }, ep.rate_limit ? `${num(ep.rate_limit)}/s` : "—"),
      el("td", { class: "num", title: "claimed now / max_in_flight" }, `${h ? h.in_flight : "—"} / ${ep.max_in_flight ?? "∞"}`),
      el("td", {}, rateCell(h)),
      el("td", { class: "num", dataset: { col: "dead" } }, h ? el("span", { class: h.dead ? "err-text strong" : "" }, num(h.dead)) : "—"),
      el("td", {}, el("div", { class: "actions" },
        el("button", { type: "button", class: "btn small ghost", onclick: () => showEndpointDeliveries(ep.id) }, "Deliveries"),
        recover, endpointActions(ep))),
    );
  });
  $("endpoints").tBodies[0].replaceChildren(...rows);
  $("endpoints-empty").hidden = rows.length > 0;
}

// ------------------------------------------------------------------ endpoint writes

function endpointActions(ep) {
  const small = (text, onclick, cls) => el("button", { type: "button", class: `btn small ${cls || ""}`, onclick }, text);
  const arm = (what) => () => { state.armedAction = `${what}:${ep.id}`; renderEndpoints(); };
  const cancel = small("Cancel", () => { state.armedAction = null; renderEndpoints(); }, "ghost");
  return [
    small("Edit", () => editEndpoint(ep)),
    small(ep.enabled ? "Disable" : "Enable", () => writeEndpoint("PATCH", ep, { enabled: !ep.enabled }, ep.enabled ? "Disabled" : "Enabled")),
    state.armedAction === `rotate:${ep.id}` ? [small("Rotate now", () => rotateSecret(ep), "danger"), cancel] : small("Rotate…", arm("rotate")),
    state.armedAction === `delete:${ep.id}` ? [small("Delete now", () => writeEndpoint("DELETE", ep, undefined, "Deleted"), "danger"), cancel] : small("Delete…", arm("delete"), "ghost"),
  ].flat();
}

export async function editEndpoint(ep) {
  const saved = await openForm({
    title: ep ? `Edit ${ep.id}` : "New endpoint",
    endpoint: ep,
    types: [...state.types, ...[...state.endpoints.values()].flatMap((e) => e.event_types)].filter((t) => t !== "*"),
    withApp: true,
    withLimits: true,
    save: (body) => (ep ? api("PATCH", `v1/endpoints/${encodeURIComponent(ep.id)}`, null, body) : api("POST", "v1/endpoints", null, body)),
  });
  if (!saved) return;
  if (!ep && saved.secret) state.shownSecret = { id: saved.id, secret: saved.secret };
  toast(`${ep ? "Saved" : "Created"} ${saved.id}`);
  await hooks.refresh();
}

async function writeEndpoint(method, ep, body, done) {
  state.armedAction = null;
  try {
    await api(method, `v1/endpoints/${encodeURIComponent(ep.id)}`, null, body);
    toast(`${done} ${endpointLabel(ep.id)}`);
  } catch (e) {
    handleError(e);
  }
  await hooks.refresh();
}

async function rotateSecret(ep) {
  state.armedAction = null;
  try {
    const res = await api("POST", `v1/endpoints/${encodeURIComponent(ep.id)}/rotate-secret`, null, {});
    state.shownSecret = { id: ep.id, secret: res.secret };
    toast(`Rotated the secret of ${endpointLabel(ep.id)}${res.previous_secret_expires_at ? `; the old one signs too until ${clock(res.previous_secret_expires_at)}` : ""}`);
  } catch (e) {
    handleError(e);
  }
  await hooks.refresh();
}

function showEndpointDeliveries(id) {
  $("f-endpoint").value = id;
  $("f-status").value = "";
  hooks.setView("deliveries");
  applyFilters();
}

async function recoverDead(id) {
  state.armed = null;
  try {
    const res = await api("POST", `v1/endpoints/${encodeURIComponent(id)}/recover`, null, {});
    toast(`Recovered ${num(res.recovered)} dead deliver${res.recovered === 1 ? "y" : "ies"} of ${endpointLabel(id)}`);
  } catch (e) {
    handleError(e);
  }
  await hooks.refresh();
}
