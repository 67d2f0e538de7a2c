// Live updates and controls for the server-rendered page (dashboard.rs). `cards` events from
// /dashboard/events carry the cards, the fleet view and the rooms that changed, as the server
// renders them; the script swaps them in. The browser reconnects by itself after a dropped stream;
// after a refused one (a fleet restarting answers 503) it gives up, so the page opens a new
// stream a second later. The forms go to the admin API: POST /events and POST /ai/state; the
// approval buttons to POST /ai/approvals/{id}.
"use strict";

function swap(old, html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  const fresh = tpl.content.firstElementChild;
  old.replaceWith(fresh);
  return fresh;
}

// The html each card was last given, by persona.
const shown = new Map();

// An update holds the cards that changed (all of them in a stream's first), the order of every
// card when one came or went, and the rooms and the fleet view when they changed.
function apply(update) {
  const list = document.getElementById("cards");
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.persona : null;
  for (const c of update.cards) {
    if (shown.get(c.name) === c.html) continue;
    const old = document.getElementById(`card-${c.name}`);
    let card;
    if (old) {
      card = swap(old, c.html);
    } else {
      const tpl = document.createElement("template");
      tpl.innerHTML = c.html;
      card = list.appendChild(tpl.content.firstElementChild);
    }
    shown.set(c.name, c.html);
    if (focused === c.name) card.focus();
    if (panel.open && panel.dataset.persona === c.name) openPanel(c.name);
  }
  if (update.order) {
    const keep = new Set(update.order);
    for (const el of [...list.children]) {
      if (!keep.has(el.dataset.persona)) {
        el.remove();
        shown.delete(el.dataset.persona);
      }
    }
    const now = [...list.children].map((el) => el.dataset.persona);
    if (now.join("\n") !== update.order.join("\n")) {
      for (const name of update.order) {
        const el = document.getElementById(`card-${name}`);
        if (el) list.appendChild(el);
      }
      const again = focused && document.getElementById(`card-${focused}`);
      if (again) again.focus();
    }
  }
  if (update.rooms_html) swap(document.getElementById("rooms"), update.rooms_html);
  if (update.fleet_html) {
    const fleet = document.getElementById("fleet");
    const open = fleet.querySelector("details").open;
    swap(fleet, update.fleet_html).querySelector("details").open = open;
  }
  document.getElementById("at").textContent = update.generated_at;
}

// The introspection panel: a card clicked, or Enter on a focused one; Escape closes it.
const panel = document.getElementById("panel");

// Reopened on each change of its persona's card, the panel keeps the lists paged away from
// their first page.
async function openPanel(name) {
  const body = document.getElementById("panel-body");
  const same = panel.open && panel.dataset.persona === name;
  if (!same) closeCursors();
  panel.dataset.persona = name;
  const r = await fetch(`/dashboard/persona/${encodeURIComponent(name)}`);
  const html = r.ok ? await r.text() : `<p class="empty">${r.status}: not available</p>`;
  const paged = same ? [...body.querySelectorAll("section.paged")].filter((s) => s.dataset.handle) : [];
  body.innerHTML = html;
  for (const old of paged) {
    const fresh = body.querySelector(`section.paged[data-list="${old.dataset.list}"]`);
    if (fresh) fresh.replaceWith(old);
  }
  if (!panel.open) panel.showModal();
}

// The panel's long lists page through a cursor (the same as `ai decisions --page-size`),
// opened when the first page is left.
document.getElementById("panel-body").addEventListener("click", async (e) => {
  const button = e.target.closest("button[data-page]");
  if (!button) return;
  const section = button.closest("section.paged");
  const q = new URLSearchParams({ direction: button.dataset.page });
  if (section.dataset.handle) q.set("handle", section.dataset.handle);
  const path = `/dashboard/persona/${encodeURIComponent(section.dataset.persona)}/${section.dataset.list}?${q}`;
  const r = await fetch(path);
  const text = r.ok ? await r.text() : null;
  // The panel may have been refreshed meanwhile: the list's section as it is now.
  const current = document.querySelector(`#panel-body section.paged[data-list="${section.dataset.list}"]`) || section;
  if (text === null) {
    current.querySelector("nav").textContent = `${r.status}: ${(await r.json()).error}`;
    return;
  }
  const fresh = swap(current, text);
  const again = fresh.querySelector(`button[data-page="${button.dataset.page}"]:not([disabled])`);
  (again || fresh.querySelector("button[data-page]:not([disabled])") || fresh).focus();
});

// The panel's cursors are closed with it rather than left to expire.
function closeCursors() {
  for (const s of document.querySelectorAll("#panel-body section.paged")) {
    if (!s.dataset.handle) continue;
    fetch("/rag/close", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ handle: s.dataset.handle }) });
    s.dataset.handle = "";
  }
}

document.getElementById("cards").addEventListener("click", (e) => {
  const card = e.target.closest(".card");
  if (card) openPanel(card.dataset.persona);
});
document.getElementById("cards").addEventListener("keydown", (e) => {
  const card = e.target.closest(".card");
  if (card && (e.key === "Enter" || e.key === " ")) {
    e.preventDefault();
    openPanel(card.dataset.persona);
  }
});
panel.addEventListener("close", () => {
  closeCursors();
  const card = document.getElementById(`card-${panel.dataset.persona}`);
  if (card) card.focus();
});

function connect() {
  const live = document.getElementById("live");
  const source = new EventSource("/dashboard/events");
  source.addEventListener("open", () => { live.dataset.state = "live"; });
  source.addEventListener("cards", (e) => apply(JSON.parse(e.data)));
  source.addEventListener("error", () => {
    live.dataset.state = "reconnecting";
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 1000);
  });
}

// Sends `body` to `path`, and says in the form's output what came of it.
async function send(form, path, body) {
  const out = form.elements.result;
  out.value = "sending…";
  try {
    const r = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const v = await r.json();
    out.value = r.ok ? (v.event_id ? `sent ${v.event_id} to ${v.personas.join(", ")}` : "done") : `refused: ${v.error}`;
    out.dataset.ok = r.ok;
  } catch (e) {
    out.value = `not sent: ${e}`;
    out.dataset.ok = false;
  }
}

document.getElementById("inject").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = e.target.elements;
  const mentions = f.mentions.value.split(/[\s,]+/).filter((m) => m);
  send(e.target, "/events", { domain: "chat", room: f.room.value, from: f.from.value, text: f.text.value, mentions });
});

document.getElementById("state").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = e.target.elements;
  const change = f.change.value === "focus"
    ? { focus: { objective: f.objective.value, intensity: Number(f.intensity.value) } }
    : f.change.value;
  send(e.target, "/ai/state", { persona: f.persona.value, change });
});

// A person's answer to a tool call that waits (the buttons of "waiting for approval").
document.addEventListener("click", async (e) => {
  const b = e.target.closest("button[data-approve], button[data-deny]");
  if (!b) return;
  const approve = b.dataset.approve !== undefined;
  const id = approve ? b.dataset.approve : b.dataset.deny;
  const reason = approve ? "" : (window.prompt("Why deny it?") ?? "");
  b.disabled = true;
  const r = await fetch(`/ai/approvals/${encodeURIComponent(id)}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ decision: approve ? "approve" : "deny", reason, by: "dashboard" }),
  });
  b.closest("li").dataset.answered = r.ok ? (approve ? "approved" : "denied") : "refused";
});

connect();
