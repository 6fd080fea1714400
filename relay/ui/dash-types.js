// The event type catalog, read-only: descriptions, schemas, subscribers.
import { el, changed, num, ago, iso, badge } from "./kit.js";
import { $, state, api } from "./dash-ctx.js";

export async function loadTypes() {
  state.catalog = (await api("GET", "v1/event-types")).data;
  renderTypes();
}

function schemaCell(t) {
  if (t.schema === null || t.schema === undefined) return el("span", { class: "muted" }, "any payload");
  const req = t.schema && Array.isArray(t.schema.required) ? t.schema.required : [];
  return el("details", {},
    el("summary", {}, req.length ? `JSON Schema · requires ${req.join(", ")}` : "JSON Schema"),
    el("pre", { class: "payload" }, JSON.stringify(t.schema, null, 2)));
}

function renderTypes() {
  if (!changed("types", state.catalog, [...state.endpoints.values()].map((e) => e.event_types))) return;
  const eps = [...state.endpoints.values()];
  const rows = state.catalog.map((t) => {
    const subs = eps.filter((e) => e.event_types.some((p) => p === "*" || p === t.name || (p.endsWith(".*") && t.name.startsWith(p.slice(0, -1)) && t.name.length > p.length - 1)));
    return el("tr", { dataset: { type: t.name } },
      el("td", {}, el("span", { class: "mono strong" }, t.name),
        t.deprecated ? el("div", { class: "sub-line", title: "still accepted; publishing it answers type_deprecated" }, badge("deprecated", "disabled")) : null),
      el("td", {}, t.description || el("span", { class: "muted" }, "—")),
      el("td", { dataset: { col: "schema" } }, schemaCell(t)),
      el("td", { class: "num", title: subs.map((e) => e.id).join(" ") }, num(subs.length)),
      el("td", { title: iso(t.updated_at) }, ago(t.updated_at)));
  });
  $("types").tBodies[0].replaceChildren(...rows);
  $("types-empty").hidden = rows.length > 0;
  $("types-note").textContent = `${num(rows.length)} type${rows.length === 1 ? "" : "s"}; endpoints counts subscriptions, wildcards included`;
}
