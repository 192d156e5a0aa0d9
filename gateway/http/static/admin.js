// The admin page's script: live updates over /api/events, and the buttons and forms.
// The server renders every part (GET /admin/part/NAME) and the testers' readings (POST
// /admin/tester/NAME); this only fetches and swaps them.
"use strict";

// Sent with every change: the server refuses cookie-authenticated changes without it (CSRF).
const HEADERS = { "Content-Type": "application/json", "X-Requested-With": "gateway-admin" };

const $ = (sel, root = document) => root.querySelector(sel);
// The words this script writes (gateway/texts/admin.py), as [Chinese, English].
const TEXTS = JSON.parse($("#texts").textContent);
const line = (key) => TEXTS[key].join(" / ");

// The banner speaks of the call just decided (id) until another notice replaces it, and
// follows it as the events tell: approved and running, then done, failed or interrupted.
let noticeId = null;
// The latest words heard for each call (a fast call can end before the decision's answer).
const heard = new Map();
const HEARD_KEPT = 200;
const BAD_STAGES = ["failed", "interrupted"];

function notice(text, bad, id) {
  const box = $("#notice");
  if (!box) return;
  noticeId = id || null;
  const latest = noticeId ? heard.get(noticeId) : null;
  box.textContent = latest ? latest.outcome : text;
  box.className = bad || (latest && BAD_STAGES.includes(latest.stage)) ? "notice bad" : "notice";
  box.dataset.stage = latest ? latest.stage : "";
  box.hidden = false;
}

// A record's own page, drawn before its event stream opened: read it again if the record
// changed in between (the events of that moment were not heard).
async function recheckDetail() {
  const detail = $(".detail[data-id]");
  if (!detail) return;
  const { ok, data } = await send("GET", `/api/confirmations/${encodeURIComponent(detail.dataset.id)}`);
  const c = ok && data ? data.confirmation : null;
  const now = c ? `${c.status}/${(c.execution || {}).state}` : null;
  if (now && now !== detail.dataset.state) window.location.reload();
}

function follow(event) {
  let data;
  try {
    data = JSON.parse(event.data);
  } catch (_) {
    return;
  }
  if (!data || !data.id || !data.outcome) return;
  heard.delete(data.id);
  heard.set(data.id, { outcome: data.outcome, stage: data.stage });
  if (heard.size > HEARD_KEPT) heard.delete(heard.keys().next().value);
  if (data.id === noticeId) notice(data.outcome, false, data.id);
  // A record's own page shows its stage: read it again when the stage moved on.
  const detail = $(".detail[data-id]");
  if (detail && detail.dataset.id === data.id && detail.dataset.stage !== data.stage) {
    window.location.reload();
  }
}

async function send(method, url, body) {
  const resp = await fetch(url, {
    method,
    headers: HEADERS,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = {};
  try {
    data = await resp.json();
  } catch (_) {
    data = { error: `HTTP ${resp.status}` };
  }
  return { ok: resp.ok, status: resp.status, data };
}

// Refreshes of one part can overlap (an event burst while a fetch is in flight): a
// response older than the one already shown is dropped, never drawn over a newer one.
const asked = new Map();
const shown = new Map();

async function refresh(name, target) {
  const box = $(target);
  if (!box) return;
  const turn = (asked.get(target) || 0) + 1;
  asked.set(target, turn);
  const query = name === "history" ? window.location.search : "";
  const resp = await fetch(`/admin/part/${name}${query}`, { credentials: "same-origin" });
  if (resp.status === 401 || resp.redirected) {
    window.location.assign("/admin/login");
    return;
  }
  if (!resp.ok) return;
  const html = await resp.text(); // server-rendered and escaped
  if (turn < (shown.get(target) || 0)) return;
  shown.set(target, turn);
  // What was typed is read at the moment of the swap, not before the body arrived:
  // keys pressed while the response was read stay.
  const typed = typedIn(box);
  box.innerHTML = html;
  restoreTyped(box, typed);
}

// What a person is typing or choosing in a pending card (an argument edit, a reason, a
// grant's shape) survives the refresh that another call's event triggers meanwhile.
function typedIn(box) {
  const found = new Map();
  for (const card of box.querySelectorAll(".card[data-id]")) {
    const editor = $("details.edit", card);
    const shape = $("details.grant-shape", card);
    found.set(card.dataset.id, {
      open: editor ? editor.open : false,
      args: editor ? $(".edit-args", editor).value : null,
      error: editor ? $(".edit-error", editor).textContent : "",
      reason: $(".reason", card) ? $(".reason", card).value : "",
      shape: shape && shape.open
        ? { length: $(".grant-length", shape).value, pin: $(".grant-pin", shape).value }
        : null,
    });
  }
  return found;
}

function restoreTyped(box, typed) {
  for (const card of box.querySelectorAll(".card[data-id]")) {
    const was = typed.get(card.dataset.id);
    if (!was) continue;
    const editor = $("details.edit", card);
    if (editor && was.open) {
      editor.open = true;
      $(".edit-args", editor).value = was.args;
      showEditError(editor, was.error);
    }
    if ($(".reason", card)) $(".reason", card).value = was.reason;
    const shape = $("details.grant-shape", card);
    if (shape && was.shape) {
      shape.open = true;
      $(".grant-length", shape).value = was.shape.length;
      $(".grant-pin", shape).value = was.shape.pin;
    }
  }
}

function showEditError(editor, text) {
  const box = $(".edit-error", editor);
  box.textContent = text || "";
  box.hidden = !text;
}

let pendingRefresh = null;
function refreshRecords() {
  // Events come in bursts (requested, resolved): one refresh per burst.
  if (pendingRefresh) return;
  pendingRefresh = setTimeout(async () => {
    pendingRefresh = null;
    await Promise.all([
      refresh("pending", "#pending-list"),
      refresh("history", "#history-list"),
      refresh("grants", "#grants-list"),
      refresh("health", "#health-body"),
    ]);
  }, 50);
}

// Instances die and come back without an event of their own (a heartbeat is not one):
// the health panel is re-read every few seconds as well. It holds nothing to type in.
const HEALTH_EVERY_MS = 5000;
function refreshHealth() {
  if (document.visibilityState === "hidden") return;
  refresh("health", "#health-body");
}

function connect() {
  const live = $("#live");
  const source = new EventSource("/api/events");
  const show = (on) => {
    if (!live) return;
    live.className = on ? "live on" : "live off";
    const [zh, en] = TEXTS[on ? "live" : "offline"];
    const english = document.createElement("span");
    english.className = "en";
    english.textContent = en;
    live.replaceChildren(`${zh} `, english);
  };
  source.onopen = () => {
    show(true);
    refreshRecords(); // whatever happened while disconnected
    recheckDetail();
  };
  source.onerror = () => show(false); // EventSource reconnects by itself
  // voted: an approval counted on a call that needs several (the tally on its card).
  for (const kind of ["requested", "resolved", "executed", "voted"]) {
    source.addEventListener(`confirmation.${kind}`, (event) => {
      follow(event);
      refreshRecords();
    });
  }
  source.onmessage = refreshRecords;
}

async function decide(button, decision) {
  const card = button.closest(".card");
  const id = button.dataset.id;
  const reasonBox = card ? $(".reason", card) : null;
  const body = { decision };
  if (button.dataset.scope) {
    body.grant = { scope: button.dataset.scope, minutes: Number(button.dataset.minutes) };
  } else if (button.classList.contains("approve-shaped")) {
    // A grant of the approver's shape: 5 min to 8 h, or the next call only (valid 8 h).
    const shape = button.closest("details.grant-shape");
    const length = $(".grant-length", shape).value;
    const once = length === "once";
    body.grant = {
      scope: "session",
      minutes: once ? 480 : Number(length),
      pin: $(".grant-pin", shape).value,
      single_use: once,
    };
  }
  if (reasonBox && reasonBox.value.trim()) body.reason = reasonBox.value.trim();
  for (const b of card ? card.querySelectorAll("button") : [button]) b.disabled = true;
  const { ok, data } = await send("POST", `/api/confirmations/${encodeURIComponent(id)}/decision`, body);
  notice(data.message || data.error || "", !ok, ok ? id : null);
  refreshRecords();
  if (document.querySelector(".detail")) window.location.reload();
}

// Edit arguments, then approve: the server checks them (schema, policy); its answer shows
// next to the editor, and the call stays pending when it refuses.
async function approveEdited(button) {
  const card = button.closest(".card");
  const editor = button.closest("details.edit");
  let args;
  try {
    args = JSON.parse($(".edit-args", editor).value);
  } catch (exc) {
    showEditError(editor, `${line("bad_json")}: ${exc.message}`);
    return;
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    showEditError(editor, line("not_an_object"));
    return;
  }
  showEditError(editor, "");
  const body = { decision: "approve", arguments: args };
  const reasonBox = card ? $(".reason", card) : null;
  if (reasonBox && reasonBox.value.trim()) body.reason = reasonBox.value.trim();
  const buttons = card ? card.querySelectorAll("button") : [button];
  for (const b of buttons) b.disabled = true;
  const url = `/api/confirmations/${encodeURIComponent(button.dataset.id)}/decision`;
  const { ok, status, data } = await send("POST", url, body);
  if (!ok && (status === 400 || status === 403 || status === 422)) {
    // Refused, nothing changed: the call still waits; say why beside the editor.
    const where = data.field ? ` (${data.field})` : "";
    showEditError(editor, `${data.error || data.message || `HTTP ${status}`}${where}`);
    for (const b of buttons) b.disabled = false;
    return;
  }
  notice(data.message || data.error || "", !ok, ok ? button.dataset.id : null);
  refreshRecords();
  if (document.querySelector(".detail")) window.location.reload();
}

async function revoke(button) {
  button.disabled = true;
  const id = encodeURIComponent(button.dataset.id);
  const { ok, data } = await send("POST", `/api/grants/${id}/revoke`, {});
  notice(ok ? `revoked ${button.dataset.id}` : data.error || "cannot revoke", !ok);
  refreshRecords();
}

async function changeWord(list, word, add) {
  if (add) {
    // One word added in place: the file keeps its comments and order.
    const added = await send("POST", `/api/keywords/${encodeURIComponent(list)}`, { word });
    if (!added.ok) notice(added.data.error || "cannot add the word", true);
    return refresh("keywords", "#keywords-lists");
  }
  const got = await send("GET", "/api/keywords");
  if (!got.ok) return notice(got.data.error || "cannot read keywords", true);
  const words = { confirm: got.data.confirm, cancel: got.data.cancel };
  words[list] = words[list].filter((w) => w !== word);
  const put = await send("PUT", "/api/keywords", words);
  if (!put.ok) notice(put.data.error || "cannot save keywords", true);
  await refresh("keywords", "#keywords-lists");
}

// A tester's answer, read by the server (a reading, the JSON behind a toggle), shown as sent.
async function showReading(url, body, target) {
  const box = $(target);
  if (!box) return;
  const resp = await fetch(url, {
    method: "POST",
    headers: HEADERS,
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  if (resp.status === 401) {
    window.location.assign("/admin/login");
    return;
  }
  const text = await resp.text();
  if ((resp.headers.get("Content-Type") || "").startsWith("text/html")) {
    box.innerHTML = text; // server-rendered and escaped
  } else {
    box.textContent = text || `HTTP ${resp.status}`; // an error from before the tester
  }
  box.hidden = false;
}

function showProblem(target, text) {
  const box = $(target);
  box.textContent = text;
  box.hidden = false;
}

function countdowns() {
  const now = Date.now() / 1000;
  for (const dd of document.querySelectorAll(".left[data-expires]")) {
    const left = Math.max(0, Math.floor(Number(dd.dataset.expires) - now));
    dd.textContent = `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`;
  }
}

document.addEventListener("click", (event) => {
  const target = event.target instanceof Element ? event.target.closest("button") : null;
  if (!target) return;
  if (target.classList.contains("approve")) decide(target, "approve");
  else if (target.classList.contains("approve-grant")) decide(target, "approve");
  else if (target.classList.contains("approve-shaped")) decide(target, "approve");
  else if (target.classList.contains("approve-edited")) approveEdited(target);
  else if (target.classList.contains("reject")) decide(target, "reject");
  else if (target.classList.contains("revoke-grant")) revoke(target);
  else if (target.classList.contains("remove-word")) {
    changeWord(target.dataset.list, target.dataset.word, false);
  }
});

function onSubmit(id, handler) {
  const form = document.getElementById(id);
  if (!form) return;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    handler(new FormData(form), form);
  });
}

onSubmit("add-word", async (data, form) => {
  await changeWord(String(data.get("list")), String(data.get("word")).trim(), true);
  form.reset();
});

onSubmit("reply-test", (data) =>
  showReading("/admin/tester/reply", { text: String(data.get("text")) }, "#reply-result"),
);

onSubmit("policy-test", async (data) => {
  let args;
  try {
    args = JSON.parse(String(data.get("args") || "{}"));
  } catch (exc) {
    showProblem("#policy-result", `${line("bad_json")}: ${exc.message}`);
    return;
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    showProblem("#policy-result", line("not_an_object"));
    return;
  }
  await showReading("/admin/tester/policy", { tool: String(data.get("tool")), args }, "#policy-result");
});

if (!$(".login")) connect(); // the login form has nothing live to show
if ($("#health-body")) setInterval(refreshHealth, HEALTH_EVERY_MS);
setInterval(countdowns, 1000);
