// Live updates and controls for the server-rendered page (dashboard.rs). `cards` events from
// /dashboard/events carry each card, the fleet view and the rooms as the server renders them;
// the script swaps in what changed. The browser reconnects by itself after a dropped stream;
// after a refused one (a fleet restarting answers 503) it gives up, so the page opens a new
// stream a second later. The forms go to the admin API: POST /events and POST /ai/state.
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

function apply(frame) {
  const list = document.getElementById("cards");
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.persona : null;
  const seen = new Set();
  frame.cards.forEach((c, i) => {
    seen.add(c.name);
    const old = document.getElementById(`card-${c.name}`);
    let card;
    if (old) {
      if (shown.get(c.name) === c.html) return;
      card = swap(old, c.html);
    } else {
      const tpl = document.createElement("template");
      tpl.innerHTML = c.html;
      card = tpl.content.firstElementChild;
      list.insertBefore(card, list.children[i] || null);
    }
    shown.set(c.name, c.html);
    if (focused === c.name) card.focus();
    if (panel.open && panel.dataset.persona === c.name) openPanel(c.name);
  });
  for (const el of [...list.children]) if (!seen.has(el.dataset.persona)) el.remove();
  swap(document.getElementById("rooms"), frame.rooms_html);
  const fleet = document.getElementById("fleet");
  const open = fleet.querySelector("details").open;
  swap(fleet, frame.fleet_html).querySelector("details").open = open;
  document.getElementById("at").textContent = frame.generated_at;
}

// The introspection panel: a card clicked, or Enter on a focused one; Escape closes it.
const panel = document.getElementById("panel");

async function openPanel(name) {
  const body = document.getElementById("panel-body");
  panel.dataset.persona = name;
  const r = await fetch(`/dashboard/persona/${encodeURIComponent(name)}`);
  body.innerHTML = r.ok ? await r.text() : `<p class="empty">${r.status}: not available</p>`;
  if (!panel.open) panel.showModal();
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

connect();
