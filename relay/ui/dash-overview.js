// The overview: the count cards above every view.
import { el, changed, num, duration } from "./kit.js";
import { $, hooks } from "./dash-ctx.js";
import { applyFilters } from "./dash-deliveries.js";

function card(key, label, value, sub, cls, onclick) {
  return el(
    "div",
    { class: `card ${cls || ""} ${onclick ? "clickable" : ""}`, dataset: { key }, onclick, title: onclick ? `Show ${label.toLowerCase()} deliveries` : undefined },
    el("span", { class: "label" }, label),
    el("span", { class: "value" }, value),
    el("span", { class: "sub" }, sub || "\u00a0"),
  );
}

export function renderCards(ov) {
  if (!changed("cards", ov.stats, ov.series)) return;
  const { counts, queue, reclaimed_total: reclaimed } = ov.stats;
  const s = ov.series;
  const ok30 = s.succeeded.reduce((a, b) => a + b, 0);
  const dead30 = s.dead.reduce((a, b) => a + b, 0);
  const rate = ok30 + dead30 ? `${((100 * ok30) / (ok30 + dead30)).toFixed(1).replace(/\.0$/, "")}%` : "—";
  const filterTo = (status) => () => {
    $("f-status").value = status;
    hooks.setView("deliveries");
    applyFilters();
  };
  $("cards").replaceChildren(
    card("due", "Due now", num(queue.due), `${num(queue.scheduled)} scheduled later`, queue.due > 0 ? "warn" : "", filterTo("pending")),
    card("oldest", "Oldest due", queue.due > 0 ? duration(queue.oldest_due_age_seconds) : "—", "longest wait now", queue.oldest_due_age_seconds > 60 ? "bad" : ""),
    card("delivering", "Delivering", num(counts.delivering), "claimed by workers", "", filterTo("delivering")),
    card("dead", "Dead", num(counts.dead), ov.stats.blocked_lanes ? `${num(ov.stats.blocked_lanes)} ordered lane${ov.stats.blocked_lanes > 1 ? "s" : ""} blocked` : "need an operator", counts.dead > 0 ? "bad" : "", filterTo("dead")),
    card("succeeded", "Succeeded", num(counts.succeeded), "kept until retention", "", filterTo("succeeded")),
    card("pending", "Pending", num(counts.pending), counts.queued ? `due + retrying · ${num(counts.queued)} queued in lanes` : "due + retrying", "", filterTo("pending")),
    card("held", "Held", num(counts.held || 0), "endpoint disabled", counts.held > 0 ? "warn" : "", filterTo("held")),
    card("scheduled", "Scheduled", num(counts.scheduled || 0), "deliver_at ahead", "", filterTo("scheduled")),
    card("rate", "Success, 30 min", rate, `${num(ok30)} ok · ${num(dead30)} dead`, dead30 > 0 && ok30 === 0 ? "bad" : ""),
    card("reclaimed", "Reclaimed", num(reclaimed), "expired leases"),
  );
}
