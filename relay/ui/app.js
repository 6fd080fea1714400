// relay dashboard: vanilla JS, no build step, no third-party code.
//
// Safety rule: data from the API (payloads, errors, urls, anything) only ever reaches
// the page as text (textContent / text nodes / attribute values set one by one);
// innerHTML is never used. The token lives in sessionStorage, never in a URL.
"use strict";

(() => {
  const POLL_MS = 2500;
  const PAGE_SIZE = 25;
  const TOKEN_KEY = "relay.token";
  const ROOT = new URL("..", window.location.href); // relay's base, beside /ui/
  const { el, changed, coarse, now, setSkew, num, ago, iso, clock, duration, badge, renderChart } =
    window.relayKit;
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ state

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    view: "deliveries",
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

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(message, status, body) {
      super(message);
      this.status = status;
      this.body = body;
    }
  }

  async function api(method, path, params, body) {
    const url = new URL(path, ROOT);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
    }
    const headers = { Authorization: `Bearer ${state.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(url, {
      method,
      headers,
      cache: "no-store",
      credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) throw new AuthError("token rejected");
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) {
      throw new ApiError((data && data.message) || `HTTP ${res.status}`, res.status, data);
    }
    return data;
  }

  // ------------------------------------------------------------------ labels

  function endpointLabel(id) {
    const ep = state.endpoints.get(id);
    if (!ep) return id;
    try {
      const u = new URL(ep.url);
      return u.host + u.pathname;
    } catch {
      return ep.url;
    }
  }

  function lastResult(d) {
    if (d.last_status_code) {
      const ok = d.last_status_code >= 200 && d.last_status_code < 300;
      return el("span", { class: ok ? "" : "err-text" }, `HTTP ${d.last_status_code}`);
    }
    if (d.last_error) return el("span", { class: "err-text" }, d.last_error);
    return el("span", { class: "muted" }, "—");
  }
  // Why a pending or held delivery is not going out now (the API's `waiting`).
  const WAIT_TEXT = {
    endpoint_disabled: () => "held: endpoint disabled",
    endpoint_deleted: () => "endpoint deleted",
    breaker_open: (w) => `breaker open until ${clock(w.until)}`,
    breaker_probing: (w) => `breaker probing, next try ${ago(w.until)}`,
    in_flight_cap: (w) => `in-flight cap, next try ${ago(w.until)}`,
    rate_limited: (w) => `rate limited, next try ${ago(w.until)}`,
    ordering_lane: () => "queued in its ordered lane",
    retry_backoff: (w) => `retry ${ago(w.until)}`,
    scheduled: (w) => `due ${ago(w.until)}`,
    deliver_at: (w) => `scheduled, goes ${ago(w.until)}`,
    lane_blocked: () => "lane blocked: an earlier event of its key is dead",
  };
  function waitText(w, d) {
    // Ordered delivery: a lane stopped at a dead head says so (the read's lane_blocked).
    if (d && d.lane_blocked && (d.status === "pending" || d.status === "held")) return WAIT_TEXT.lane_blocked();
    const text = w && WAIT_TEXT[w.reason];
    return text ? text(w) : null;
  }
  function when(d) {
    const waiting = waitText(d.waiting, d);
    if (d.status === "held") return el("span", { class: "muted", title: d.held || "endpoint_disabled" }, waiting || "held: endpoint disabled");
    if (d.status === "pending") {
      const title = d.waiting ? `${d.waiting.reason}${d.waiting.until ? ` until ${iso(d.waiting.until)}` : ""}` : iso(d.next_attempt_at);
      return el("span", { title, class: d.waiting && d.waiting.reason.startsWith("breaker") ? "err-text" : "" },
        waiting || (d.attempts ? `retry ${ago(d.next_attempt_at)}` : `due ${ago(d.next_attempt_at)}`));
    }
    if (d.status === "scheduled") return el("span", { class: "muted", title: iso(d.deliver_at) }, waiting || `scheduled, goes ${ago(d.deliver_at)}`);
    if (d.status === "delivering") return el("span", { title: iso(d.updated_at) }, "sending now");
    if (d.status === "queued") return el("span", { class: "muted", title: d.lane || "" }, "behind its lane's head");
    if (d.blocking) return el("span", { class: "err-text", title: d.lane || "" }, "blocks its ordered lane");
    const at = d.finished_at || d.updated_at;
    return el("span", { title: iso(at) }, ago(at));
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

  // ------------------------------------------------------------------ overview

  function card(key, label, value, sub, cls, onclick) {
    return el(
      "div",
      { class: `card ${cls || ""} ${onclick ? "clickable" : ""}`, dataset: { key }, onclick, title: onclick ? `Show ${label.toLowerCase()} deliveries` : undefined },
      el("span", { class: "label" }, label),
      el("span", { class: "value" }, value),
      el("span", { class: "sub" }, sub || "\u00a0"),
    );
  }

  function renderCards(ov) {
    if (!changed("cards", ov.stats, ov.series)) return;
    const { counts, queue, reclaimed_total: reclaimed } = ov.stats;
    const s = ov.series;
    const ok30 = s.succeeded.reduce((a, b) => a + b, 0);
    const dead30 = s.dead.reduce((a, b) => a + b, 0);
    const rate = ok30 + dead30 ? `${((100 * ok30) / (ok30 + dead30)).toFixed(1).replace(/\.0$/, "")}%` : "—";
    const filterTo = (status) => () => {
      $("f-status").value = status;
      setView("deliveries");
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

  // ------------------------------------------------------------------ deliveries

  function deliveryParams() {
    const f = state.filters;
    return { status: f.status, endpoint_id: f.endpoint_id, type: f.type, limit: PAGE_SIZE, cursor: state.cursors[state.cursors.length - 1] };
  }

  let listSeq = 0;
  async function loadDeliveries() {
    // Answers can arrive out of order (a poll and a filter change): only the latest counts.
    const seq = ++listSeq;
    const page = await api("GET", "v1/ui/deliveries", deliveryParams());
    if (seq !== listSeq) return;
    state.nextCursor = page.next_cursor;
    renderDeliveries(page.data);
  }

  function renderDeliveries(rows) {
    if (!changed("deliveries", rows, state.filters, state.cursors.length, state.nextCursor, coarse(10e3))) return;
    const body = $("deliveries").tBodies[0];
    const out = rows.map((d) => {
      state.types.add(d.type);
      const replay = d.status === "dead"
        ? el("button", { type: "button", class: "btn small", title: "Send it again with a fresh attempt budget", onclick: (e) => { e.stopPropagation(); replay(d.id, e.currentTarget); } }, "Replay")
        : null;
      const skip = d.status === "dead" && d.blocking
        ? el("button", { type: "button", class: "btn small", title: "Skip this dead head: the next delivery of its ordered lane goes", onclick: (e) => { e.stopPropagation(); discard(d.id, e.currentTarget); } }, "Discard")
        : null;
      return el(
        "tr",
        { dataset: { id: d.id, status: d.status }, class: d.id === state.drawerId ? "selected" : "", onclick: () => openDrawer(d.id) },
        el("td", {}, badge(d.status)),
        el("td", { class: "mono id-cell", title: d.id }, d.id),
        el("td", { class: "ellipsis" }, d.type),
        el("td", { class: "ellipsis", title: d.endpoint_id }, endpointLabel(d.endpoint_id)),
        el("td", { class: "num" }, `${d.attempts} / ${d.max_attempts}`),
        el("td", { class: "ellipsis" }, lastResult(d)),
        el("td", { class: "when-cell" }, when(d)),
        el("td", {}, el("div", { class: "actions" }, replay, skip)),
      );
    });
    body.replaceChildren(...out);
    const empty = $("deliveries-empty");
    const filtered = Object.values(state.filters).some(Boolean);
    empty.hidden = rows.length > 0;
    empty.textContent = filtered ? "No deliveries match these filters." : "No deliveries yet.";
    const page = state.cursors.length;
    $("page-info").textContent = `Page ${page} · ${rows.length} shown${page === 1 ? " · refreshing live" : " · not refreshing (go to newest for live)"}`;
    $("page-prev").disabled = page === 1;
    $("page-first").disabled = page === 1;
    $("page-next").disabled = !state.nextCursor;
    const dl = $("known-types");
    dl.replaceChildren(...[...state.types].sort().slice(0, 200).map((t) => el("option", { value: t })));
  }

  function applyFilters() {
    state.filters = { status: $("f-status").value, endpoint_id: $("f-endpoint").value, type: $("f-type").value.trim() };
    state.cursors = [null];
    loadDeliveries().catch(handleError);
  }

  async function replay(id, button) {
    if (button) button.disabled = true;
    try {
      await api("POST", `v1/deliveries/${encodeURIComponent(id)}/replay`);
      toast(`Replaying ${id}`);
    } catch (e) {
      if (button) button.disabled = false;
      handleError(e);
      return;
    }
    await refresh();
  }

  async function discard(id, button) {
    if (button) button.disabled = true;
    try {
      await api("POST", `v1/deliveries/${encodeURIComponent(id)}/discard`);
      toast(`Discarded ${id}: its lane goes on`);
    } catch (e) {
      if (button) button.disabled = false;
      handleError(e);
      return;
    }
    await refresh();
  }

  // ------------------------------------------------------------------ drawer

  async function openDrawer(id) {
    state.drawerId = id;
    $("scrim").hidden = false;
    $("drawer").hidden = false;
    $("d-id").textContent = id;
    $("d-error").textContent = "";
    $("drawer").querySelector(".drawer-body").scrollTop = 0;
    for (const tr of $("deliveries").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === id);
    await loadDrawer().catch(handleError);
    $("drawer").focus();
  }

  function closeDrawer() {
    state.drawerId = null;
    $("drawer").hidden = true;
    $("scrim").hidden = true;
    for (const tr of $("deliveries").tBodies[0].rows) tr.classList.remove("selected");
  }

  async function loadDrawer() {
    const id = state.drawerId;
    if (!id) return;
    let view;
    try {
      view = await api("GET", `v1/ui/deliveries/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        $("d-error").textContent = `Delivery ${id} does not exist (or has expired).`;
        return;
      }
      throw e;
    }
    if (state.drawerId === id) renderDrawer(view);
  }

  function renderDrawer(view) {
    if (!changed("drawer", view, coarse(5e3))) return;
    const d = view.delivery;
    const ev = view.event;
    const ep = view.endpoint;
    $("d-id").textContent = d.id;
    $("d-status").replaceChildren(badge(d.status));
    const replayBtn = $("d-replay");
    replayBtn.disabled = !(d.status === "dead" || d.status === "succeeded");
    replayBtn.textContent = d.status === "succeeded" ? "Send again" : "Replay";
    replayBtn.title = replayBtn.disabled ? "Only dead or succeeded deliveries can be replayed" : "Back to pending with a fresh attempt budget";
    const discardBtn = $("d-discard");
    discardBtn.hidden = !(d.status === "dead" && d.blocking);
    discardBtn.disabled = discardBtn.hidden;

    const stamp = (ms) => (ms ? `${iso(ms)} · ${ago(ms)}` : "—");
    const rows = [
      ["Event", el("span", { class: "mono" }, d.event_id), true],
      ["Endpoint", ep ? el("span", {}, ep.url, el("span", { class: "sub-line mono" }, `  ${ep.id}`)) : el("span", { class: "mono" }, `${d.endpoint_id} (deleted)`), true],
      ["Event type", d.type],
      ["App", d.app],
      ["Attempts", `${d.attempts} of ${d.max_attempts}${d.replays ? ` · replayed ${d.replays}×` : ""}`],
      ["Last result", lastResult(d)],
      ["Created", stamp(d.created_at), true],
    ];
    if (d.status === "held") rows.push(["Held", "endpoint disabled: resumes when it is enabled again", true]);
    else if (d.status === "pending") rows.push(["Next attempt", stamp(d.next_attempt_at), true]);
    if (d.deliver_at) rows.push([d.status === "scheduled" ? "Scheduled for" : "Published for", stamp(d.deliver_at), true]);
    if (d.waiting && d.status === "pending") rows.push(["Waiting", `${waitText(d.waiting, d)}${d.waiting.until ? ` (${iso(d.waiting.until)})` : ""}`, true]);
    if (d.lane) rows.push(["Ordered lane", el("span", { class: "mono" }, d.lane), true]);
    if (d.status === "queued") rows.push(["Waiting", `queued behind ${d.lane_head || "the head"} in its lane${d.lane_blocked ? ": the lane is blocked by a dead head" : ""}`, true]);
    if (d.blocking) rows.push(["Blocks its lane", "Replay sends it again, still first; Discard lets the next one go", true]);
    if (d.finished_at) rows.push([d.status === "dead" ? "Died" : "Finished", stamp(d.finished_at), true]);
    if (d.status === "delivering" && d.worker) rows.push(["Worker", el("span", { class: "mono" }, d.worker), true]);
    $("d-summary").replaceChildren(...rows.flatMap(([k, v, wide]) => [el("dt", {}, k), el("dd", { class: wide ? "wide" : "" }, v)]));

    const log = d.attempt_log || [];
    $("d-log-count").textContent = log.length ? `${log.length} request${log.length > 1 ? "s" : ""}` : "";
    $("d-log-empty").hidden = log.length > 0;
    $("d-log").tBodies[0].replaceChildren(
      ...log.map((a) => {
        const code = a.status_code;
        const ok = code >= 200 && code < 300;
        const result = el("div", {},
          code ? el("span", { class: ok ? "strong" : "strong err-text" }, `HTTP ${code}`) : el("span", { class: "strong err-text" }, a.error || "no answer"),
          a.outcome ? el("span", { class: "muted" }, ` → ${a.outcome}`) : null,
          a.fenced ? el("span", {}, " ", badge("fenced", "fenced")) : null,
          a.detail ? el("div", { class: "sub-line", title: a.detail }, a.detail.length > 160 ? `${a.detail.slice(0, 160)}…` : a.detail) : null,
        );
        return el("tr", { dataset: { n: a.n } },
          el("td", { class: "num" }, a.n),
          el("td", { class: "num" }, a.attempt ?? "—"),
          el("td", { title: iso(a.at) }, clock(a.at)),
          el("td", { class: "num" }, a.duration_ms === null || a.duration_ms === undefined ? "—" : `${Math.round(a.duration_ms)} ms`),
          el("td", {}, result),
          el("td", { class: "mono" }, a.worker),
        );
      }),
    );

    $("d-headers").tBodies[0].replaceChildren(
      ...view.headers.map((h) => el("tr", { dataset: { header: h.name } }, el("td", {}, h.name), el("td", {}, h.value), el("td", {}, h.note || ""))),
    );

    const pre = $("d-payload");
    if (ev) {
      pre.textContent = JSON.stringify(ev.payload, null, 2);
      $("d-payload-note").textContent = `data of event ${ev.id}, as JSON`;
    } else {
      pre.textContent = "";
      $("d-payload-note").textContent = "event not found (expired by retention?)";
    }
  }

  // ------------------------------------------------------------------ endpoints

  async function loadEndpoints() {
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

  // ------------------------------------------------------------------ replay jobs

  function replayBody(dryRun) {
    const since = $("r-since").value, until = $("r-until").value;
    if (!since || !until) return null;
    const body = {
      since: new Date(since).toISOString(), until: new Date(until).toISOString(),
      status: $("r-status").value.split(","), dry_run: dryRun,
    };
    if ($("r-endpoint").value) body.endpoint_id = $("r-endpoint").value;
    if ($("r-type").value.trim()) body.type = $("r-type").value.trim();
    return body;
  }

  async function replayRange(dryRun) {
    const body = replayBody(dryRun);
    if (!body) return toast("Give both ends of the range", true);
    try {
      const res = await api("POST", "v1/replays", null, body);
      $("replay-note").textContent = dryRun
        ? `${num(res.matched)} deliver${res.matched === 1 ? "y matches" : "ies match"} now`
        : `${res.id} started: the workers replay it, paced per endpoint`;
    } catch (e) {
      handleError(e);
    }
    await loadReplays();
  }

  async function cancelReplay(id) {
    try {
      await api("POST", `v1/replays/${encodeURIComponent(id)}/cancel`, null, {});
      toast(`Replay ${id} cancelled`);
    } catch (e) {
      handleError(e);
    }
    await loadReplays();
  }

  async function loadReplays() {
    if (state.view !== "endpoints") return;
    const res = await api("GET", "v1/replays");
    const sel = $("r-endpoint");
    if (sel.options.length !== $("f-endpoint").options.length) {
      sel.replaceChildren(...[...$("f-endpoint").options].map((o) => el("option", { value: o.value }, o.textContent)));
    }
    const rows = res.data.map((j) => el("tr", { dataset: { id: j.id } },
      el("td", { class: "mono" }, j.id),
      el("td", { title: j.error || "" }, badge(j.state, j.state)),
      el("td", { class: "small" }, `${j.since} … ${j.until}`, j.type ? ` · ${j.type}` : "", j.endpoint_id ? ` · ${endpointLabel(j.endpoint_id)}` : ""),
      el("td", { class: "num" }, num(j.matched)), el("td", { class: "num" }, num(j.replayed)),
      el("td", { class: "num" }, num(j.skipped)), el("td", { class: "num" }, num(j.waiting)),
      el("td", {}, j.state === "running"
        ? el("button", { type: "button", class: "btn small ghost", onclick: () => cancelReplay(j.id) }, "Cancel")
        : null)));
    $("replays").tBodies[0].replaceChildren(...rows);
  }

  function breakerCell(ep) {
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

  function renderEndpoints() {
    if (!changed("endpoints", [...state.endpoints.values()], [...state.health.values()], state.armed, state.armedAction, state.shownSecret, coarse(10e3))) return;
    const rows = [...state.endpoints.values()].map((ep) => {
      const h = state.health.get(ep.id);
      const recover = state.armed === ep.id
        ? [el("button", { type: "button", class: "btn small danger", onclick: () => recoverDead(ep.id) }, "Recover all dead"),
           el("button", { type: "button", class: "btn small ghost", onclick: () => { state.armed = null; renderEndpoints(); } }, "Cancel")]
        : [el("button", { type: "button", class: "btn small", dataset: { recover: ep.id }, title: "Put every dead delivery of this endpoint back to pending", onclick: () => { state.armed = ep.id; renderEndpoints(); } }, "Recover dead…")];
      return el("tr", { dataset: { id: ep.id } },
        el("td", {},
          el("div", { class: "ellipsis strong", title: ep.url }, ep.url),
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

  async function editEndpoint(ep) {
    const saved = await window.relayEpForm.open({
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
    await refresh();
  }

  async function writeEndpoint(method, ep, body, done) {
    state.armedAction = null;
    try {
      await api(method, `v1/endpoints/${encodeURIComponent(ep.id)}`, null, body);
      toast(`${done} ${endpointLabel(ep.id)}`);
    } catch (e) {
      handleError(e);
    }
    await refresh();
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
    await refresh();
  }

  function showEndpointDeliveries(id) {
    $("f-endpoint").value = id;
    $("f-status").value = "";
    setView("deliveries");
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
    await refresh();
  }

  // ------------------------------------------------------------------ event types

  async function loadTypes() {
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

  function setLive(ok, text) {
    $("live").className = ok ? "live ok" : "live down";
    $("live-text").textContent = text;
  }

  function handleError(e) {
    if (e instanceof AuthError) {
      signOut("The token was rejected. Sign in again.");
    } else if (e instanceof ApiError) {
      toast(e.message, true);
    } else {
      setLive(false, "relay unreachable, retrying");
    }
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

  function setView(view) {
    state.view = ["endpoints", "types"].includes(view) ? view : "deliveries";
    if (window.location.hash !== `#/${state.view}`) window.location.hash = `#/${state.view}`;
    $("view-deliveries").hidden = state.view !== "deliveries";
    $("view-endpoints").hidden = state.view !== "endpoints";
    $("view-types").hidden = state.view !== "types";
    for (const a of document.querySelectorAll(".tabs a")) a.classList.toggle("active", a.dataset.view === state.view);
    $("toast").hidden = true;
    if (state.view === "endpoints") renderEndpoints();
    if (state.token) refresh();
  }

  function start() {
    $("signin").hidden = true;
    $("app").hidden = false;
    $("token").value = "";
    setView((window.location.hash || "").replace("#/", "")); // loads the data
    schedule();
  }

  // ------------------------------------------------------------------ wiring

  function wire() {
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
    $("f-find").addEventListener("keydown", async (e) => {
      if (e.key !== "Enter") return;
      e.preventDefault();
      const id = e.target.value.trim();
      if (id.startsWith("dlv_")) openDrawer(id);
      else if (id.startsWith("evt_")) {
        try {
          const ev = await api("GET", `v1/events/${encodeURIComponent(id)}`);
          if (ev.deliveries.length) openDrawer(ev.deliveries[0].id);
          else toast(`Event ${id} has no deliveries`);
        } catch (err) {
          handleError(err);
        }
      } else toast("Paste a delivery (dlv_…) or event (evt_…) id", true);
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
    });
    window.addEventListener("hashchange", () => {
      const view = window.location.hash.replace("#/", "");
      if (view !== state.view && state.token) setView(view);
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

  wire();
  if (state.token) {
    // A token from this tab's session: check it quietly, fall back to the form.
    signIn(state.token).catch((e) => showSignin(e.message));
  } else {
    showSignin("");
  }
})();
