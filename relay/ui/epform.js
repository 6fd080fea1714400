// relay endpoint form: create or edit an endpoint in a modal <dialog>. Shared by the
// operator's dashboard (/ui/) and the consumer portal (/portal/). Built with the kit's
// el(), so every value reaches the page as text or as an attribute set one by one.
import { el } from "./kit.js";

export const splitTypes = (raw) => raw.split(/[\s,]+/).map((t) => t.trim()).filter(Boolean);

/**
 * Open the form. opts: {title, endpoint (to edit; absent: create), types (known event
 * types, offered as checkboxes), typeInfo (type -> description, their tooltips), withApp (an "App" field, on create), withLimits
 * (max in flight too), save(body) -> Promise (throws an Error whose message is shown)}.
 * Resolves with what save() returned, or null when cancelled.
 */
export function open(opts) {
  const ep = opts.endpoint || null;
  const id = (name) => `epf-${name}`;
  const field = (name, label, input, hint) =>
    el("div", { class: "epf-field" }, el("label", { for: id(name) }, label), input,
      hint ? el("span", { class: "muted small" }, hint) : null);
  const url = el("input", { id: id("url"), name: "url", type: "url", required: true, spellcheck: "false", placeholder: "https://example.com/webhooks", value: ep ? ep.url : "" });
  const desc = el("input", { id: id("description"), name: "description", type: "text", maxlength: 1024, value: ep ? ep.description : "" });
  const types = el("input", { id: id("types"), name: "event_types", type: "text", spellcheck: "false", placeholder: "* for every type", value: ep ? ep.event_types.join(", ") : "*" });
  const rate = el("input", { id: id("rate"), name: "rate_limit", type: "number", min: "0.001", step: "any", placeholder: "no limit", value: ep && ep.rate_limit ? ep.rate_limit : "" });
  const cap = el("input", { id: id("cap"), name: "max_in_flight", type: "number", min: "1", step: "1", placeholder: "no cap", value: ep && ep.max_in_flight ? ep.max_in_flight : "" });
  const filter = el("textarea", { id: id("filter"), name: "filter", rows: 2, spellcheck: "false", maxlength: 2048, placeholder: "payload.amount >= 1000 (CEL; empty: every event)" }, ep && ep.filter ? ep.filter : "");
  const app = el("input", { id: id("app"), name: "app", type: "text", spellcheck: "false", value: "default" });
  const known = [...new Set(opts.types || [])].sort();
  const picks = known.length
    ? el("fieldset", { class: "epf-types" }, el("legend", { class: "muted small" }, "Event types that exist (tick to add)"),
      ...known.map((t, i) => {
        const box = el("input", { type: "checkbox", id: id(`t${i}`), value: t, checked: splitTypes(types.value).includes(t) });
        box.addEventListener("change", () => {
          const now = splitTypes(types.value).filter((x) => x !== t && x !== "*");
          if (box.checked) now.push(t);
          types.value = (now.length ? now : ["*"]).join(", ");
        });
        const about = (opts.typeInfo && opts.typeInfo.get(t)) || "";
        return el("label", { class: "epf-type", for: id(`t${i}`), title: about }, box, t);
      }))
    : null;
  const error = el("p", { class: "form-error", role: "alert" });
  const submit = el("button", { type: "submit", class: "btn primary" }, ep ? "Save" : "Create endpoint");
  const cancel = el("button", { type: "button", class: "btn ghost" }, "Cancel");
  const form = el("form", { class: "epf", method: "dialog", "aria-label": opts.title },
    el("h2", {}, opts.title),
    field("url", "URL", url, "where relay POSTs each event"),
    field("description", "Description", desc),
    opts.withApp && !ep ? field("app", "App", app) : null,
    field("types", "Event types", types, "comma-separated; order.* matches every order event"),
    picks,
    field("filter", "Filter", filter, "only events for which this is true; checked when you save"),
    el("div", { class: "epf-row" },
      field("rate", "Rate limit (per second)", rate),
      opts.withLimits ? field("cap", "Max in flight", cap) : null),
    error,
    el("div", { class: "epf-actions" }, cancel, submit));
  const dialog = el("dialog", { class: "epf-dialog" }, form);
  document.body.append(dialog);

  return new Promise((resolve) => {
    const done = (value) => {
      dialog.close();
      dialog.remove();
      resolve(value);
    };
    cancel.addEventListener("click", () => done(null));
    dialog.addEventListener("cancel", (e) => {
      e.preventDefault();
      done(null);
    });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      error.textContent = "";
      const body = { url: url.value.trim(), description: desc.value, event_types: splitTypes(types.value) };
      if (!body.event_types.length) body.event_types = ["*"];
      // An emptied filter clears it on edit (null); on create it is left out.
      if (filter.value.trim()) body.filter = filter.value.trim();
      else if (ep && ep.filter) body.filter = null;
      // An emptied limit clears it on edit (null); on create it is simply left out.
      if (rate.value) body.rate_limit = Number(rate.value);
      else if (ep && ep.rate_limit) body.rate_limit = null;
      if (opts.withLimits) {
        if (cap.value) body.max_in_flight = Number(cap.value);
        else if (ep && ep.max_in_flight) body.max_in_flight = null;
      }
      if (opts.withApp && !ep && app.value.trim()) body.app = app.value.trim();
      submit.disabled = true;
      try {
        done(await opts.save(body));
      } catch (err) {
        const bad = err.body && err.body.error === "filter_invalid";
        error.textContent = bad ? `Filter: ${err.message}` : err.message;
        if (bad) filter.focus();
        submit.disabled = false;
      }
    });
    dialog.showModal();
    url.focus();
  });
}

