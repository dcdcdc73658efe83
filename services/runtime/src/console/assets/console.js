// The toolplane console's script: routing between the views, fetching the server-rendered
// fragments with the bearer token kept in sessionStorage, following a run's timeline (Server-Sent
// Events read through fetch, so the token travels in a header), and the decide / answer POSTs.
// Every fragment is rendered and escaped by the server; this script never builds markup from data.
"use strict";

const TOKEN_KEY = "toolplane.token";
const main = document.getElementById("main");
let view = { stop() {} };

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h["authorization"] = "Bearer " + token();
  return h;
}

class Refused extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, init) {
  const r = await fetch(path, Object.assign({ cache: "no-store" }, init || {}, { headers: headers((init || {}).headers) }));
  if (r.status === 401) { showLogin(await reason(r)); throw new Refused(401, "unauthenticated"); }
  if (!r.ok) throw new Refused(r.status, await reason(r));
  return r;
}

async function reason(r) {
  const text = await r.text();
  try { const j = JSON.parse(text); return j.message || j.code || text; } catch (_) { return text || r.statusText; }
}

function showLogin(message) {
  view.stop();
  // Several requests of a view may be refused at once: the form is shown once, so nothing typed
  // into it is lost.
  let form = document.getElementById("login-form");
  const shown = !!form;
  if (!shown) {
    main.replaceChildren(document.getElementById("login").content.cloneNode(true));
    form = document.getElementById("login-form");
  }
  if (token() && message) { const e = form.querySelector(".error"); e.textContent = message; e.hidden = false; }
  if (shown) return;
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, form.token.value.trim());
    route();
  });
}

function fail(target, err) {
  if (err instanceof Refused && err.status === 401) return;
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = err.message;
  target.replaceChildren(p);
}

// Replaces only the top-level parts of `target` that changed, so a refresh leaves a card that
// did not change (and what is typed into it, and the button under the pointer) in place.
function swap(target, html) {
  const t = document.createElement("template");
  t.innerHTML = html;
  const next = Array.from(t.content.childNodes);
  const cur = Array.from(target.childNodes);
  if (next.length !== cur.length) { target.replaceChildren(...next); return; }
  next.forEach((n, i) => { if (!n.isEqualNode(cur[i])) target.replaceChild(n, cur[i]); });
}

async function load(target, path) {
  try {
    const r = await api(path);
    swap(target, await r.text());
    return true;
  } catch (err) { fail(target, err); return false; }
}

async function refreshCount() {
  try {
    const r = await api("/console/approvals");
    const html = await r.text();
    const n = (html.match(/data-approval=/g) || []).length;
    const c = document.getElementById("pending-count");
    c.textContent = String(n);
    c.hidden = n === 0;
  } catch (_) { /* the views say why */ }
}

function every(ms, f) {
  f();
  const id = setInterval(f, ms);
  return () => clearInterval(id);
}

function runsView() {
  const stop = every(3000, async () => { await load(main, "/console/runs"); refreshCount(); });
  return { stop };
}

function approvalsView() {
  const stop = every(2000, async () => {
    const box = document.createElement("div");
    if (!(await load(box, "/console/approvals"))) { main.replaceChildren(box); return; }
    if (main.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    swap(main, '<div class="bar"><h1>Waiting for a decision</h1></div>' +
      (box.innerHTML || '<p class="empty">Nothing is waiting.</p>'));
    refreshCount();
  });
  return { stop };
}

function runView(id) {
  main.innerHTML = '<div id="head"></div><h2>Timeline <span id="live" class="live off">connecting…</span></h2><ol class="timeline" id="timeline" data-testid="timeline"></ol>';
  const head = document.getElementById("head");
  const list = document.getElementById("timeline");
  const live = document.getElementById("live");
  const q = encodeURIComponent(id);
  let lastSeq = 0;
  let stopped = false;
  let ended = false;
  let controller = null;
  const refreshHead = async () => {
    if (head.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    await load(head, "/console/run?id=" + q);
    refreshCount();
  };
  const stopPoll = every(4000, refreshHead);

  const follow = async () => {
    while (!stopped) {
      controller = new AbortController();
      try {
        const r = await api("/console/events?run=" + q + "&from=" + (lastSeq + 1), { signal: controller.signal });
        live.textContent = "live"; live.className = "live";
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let at;
          while ((at = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, at);
            buffer = buffer.slice(at + 2);
            handle(block);
          }
        }
      } catch (err) {
        if (stopped) return;
        if (err instanceof Refused && err.status !== 503) { fail(list, err); return; }
      }
      if (ended) { live.textContent = "run ended"; live.className = "live off"; return; }
      live.textContent = "reconnecting…"; live.className = "live off";
      await new Promise((ok) => setTimeout(ok, 1000));
    }
  };
  const handle = (block) => {
    let event = "message", data = [], seq = 0;
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      else if (line.startsWith("id:")) seq = Number(line.slice(3).trim());
    }
    if (event !== "row") return;
    if (seq && seq <= lastSeq) return;
    if (seq) lastSeq = seq;
    list.insertAdjacentHTML("beforeend", data.join("\n"));
    const kind = list.lastElementChild && list.lastElementChild.dataset.kind;
    if (/^run_(completed|partial_success|failed|cancelled)$/.test(kind || "")) ended = true;
    if (/^(tool_call_awaiting_approval|tool_call_approved|tool_call_denied|question_answered|status_changed|run_)/.test(kind || "")) refreshHead();
  };
  follow();
  return {
    stop() { stopped = true; stopPoll(); if (controller) controller.abort(); },
    refresh: refreshHead,
  };
}

function route() {
  view.stop();
  const hash = location.hash || "#/";
  const run = hash.match(/^#\/run\/([A-Za-z0-9._:-]+)$/);
  if (run) view = runView(run[1]);
  else if (hash === "#/approvals") view = approvalsView();
  else view = runsView();
  document.getElementById("signout").hidden = !token();
}

async function post(path, body, card) {
  const error = card.querySelector(".error");
  card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try {
    await api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    card.classList.add("done");
    card.querySelector(".actions")?.remove();
    card.querySelector(".answer")?.remove();
    error.hidden = true;
    if (view.refresh) view.refresh();
    refreshCount();
  } catch (err) {
    error.textContent = err.message;
    error.hidden = false;
    card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
}

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  const card = b.closest("[data-approval]");
  if (b.dataset.decide && card) {
    const reason = card.querySelector("input[name=reason]");
    const remember = card.querySelector("input[name=remember]");
    post("/console/decide", {
      approvalId: b.dataset.decide,
      approve: b.dataset.approve === "true",
      reason: reason ? reason.value : "",
      rememberForRun: !!(remember && remember.checked),
    }, card);
  } else if (b.dataset.answer && card) {
    post("/console/answer", { approvalId: b.dataset.answer, answer: b.dataset.value }, card);
  } else if (b.id === "signout") {
    sessionStorage.removeItem(TOKEN_KEY);
    route();
  }
});

document.addEventListener("submit", (ev) => {
  const form = ev.target.closest("[data-answer-form]");
  if (!form) return;
  ev.preventDefault();
  const card = form.closest("[data-approval]");
  post("/console/answer", { approvalId: form.dataset.answerForm, answer: form.answer.value }, card);
});

window.addEventListener("hashchange", route);
route();
