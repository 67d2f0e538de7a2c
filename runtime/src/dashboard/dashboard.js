// Live updates of the server-rendered cards: `cards` events from /dashboard/events, each the
// whole fleet's cards, rendered with the same markup as the server's (dashboard.rs,
// render_card). The browser reconnects by itself after a dropped stream; after a refused one
// (a fleet restarting answers 503) it gives up, so the page opens a new stream a second later.
"use strict";

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const pct = (x) => `${Math.round(Math.min(Math.max(x, 0), 1) * 100)}%`;

function render(c) {
  const hover = [`objective: ${c.objective || "-"}`];
  if (c.preoccupations.length) hover.push(`preoccupations: ${c.preoccupations.join("; ")}`);
  if (c.last_decision) hover.push(`last decision: ${c.last_decision[0]}: ${c.last_decision[1]}`);
  const decision = c.last_decision ? `${esc(c.last_decision[0])}: ${esc(c.last_decision[1])}` : "";
  return `<article class="card" id="card-${esc(c.name)}" data-persona="${esc(c.name)}" data-status="${c.status}" tabindex="0" title="${esc(hover.join("\n"))}">`
    + `<header><h2>${esc(c.name)}</h2><span class="badge" style="--load:${c.load.toFixed(2)}">${c.status}</span></header>`
    + `<p class="role">${esc(c.role)}</p><dl>`
    + `<dt>focus</dt><dd class="focus">${esc(c.activity)} <meter min="0" max="1" value="${c.intensity.toFixed(2)}" title="intensity ${pct(c.intensity)}"></meter></dd>`
    + `<dt>load</dt><dd class="load">${pct(c.load)}</dd>`
    + `<dt>capacity</dt><dd class="capacity">${pct(c.capacity)}</dd>`
    + `<dt>inbox</dt><dd class="inbox">${c.inbox} / ${c.inbox_capacity}</dd>`
    + `<dt>budget used</dt><dd class="budget">${pct(c.budget_used)}</dd>`
    + `</dl><p class="decision">${decision}</p></article>`;
}

function apply(frame) {
  const main = document.getElementById("cards");
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.persona : null;
  const seen = new Set();
  frame.cards.forEach((c, i) => {
    seen.add(c.name);
    const html = render(c);
    const old = document.getElementById(`card-${c.name}`);
    if (old && old.outerHTML === html) return;
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    const card = tpl.content.firstElementChild;
    if (old) old.replaceWith(card);
    else main.insertBefore(card, main.children[i] || null);
    if (focused === c.name) card.focus();
  });
  for (const el of [...main.children]) if (!seen.has(el.dataset.persona)) el.remove();
  document.getElementById("at").textContent = frame.generated_at;
}

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

connect();
