// Web chat page: one WebSocket per tab, confirmation cards updated in place.
// Plain JS, no build step. User text is always inserted with textContent, never as HTML.
"use strict";

(function () {
  const NAME = /^[\p{L}\p{N}\p{M}_.@-]{1,64}$/u;
  // Every word the script writes comes from gateway/texts (the page carries them as JSON);
  // a card's words come with its record in each frame.
  const T = JSON.parse(document.getElementById("texts").textContent);
  const fmt = (text, values) => text.replace(/\{(\w+)\}/g, (m, k) => (k in values ? String(values[k]) : m));

  const $ = (id) => document.getElementById(id);
  const log = $("log");
  const state = {
    ws: null,
    user: "",
    session: "",
    lastSeq: 0,
    offsetMs: 0, // server clock minus browser clock
    maxText: 4000,
    retry: 0,
    wanted: false,
    cards: new Map(), // confirmation id -> {el, record}
  };

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function scrollDown() {
    log.scrollTop = log.scrollHeight;
  }

  // A new card shows its top: what it asks, the risk, the rows. Taller than the log (a
  // phone), scrolling to the bottom showed only its buttons; the person scrolls to those.
  function showCard(row) {
    if (row.offsetHeight <= log.clientHeight) {
      scrollDown();
      return;
    }
    const gap = parseFloat(getComputedStyle(log).paddingTop) || 0;
    log.scrollTop += row.getBoundingClientRect().top - log.getBoundingClientRect().top - gap;
  }

  function fold(joined) {
    $("bar").classList.toggle("joined", joined);
  }

  function fmtTime(seconds) {
    const d = new Date(seconds * 1000);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function setConn(on, text) {
    const c = $("conn");
    c.className = "conn " + (on ? "on" : "off");
    c.textContent = text;
  }

  function systemLine(text, cls) {
    const p = el("p", "system " + (cls || ""), text);
    log.appendChild(p);
    scrollDown();
  }

  // ---------------------------------------------------------------- messages

  function addText(msg) {
    const mine = msg.user && msg.user === state.user;
    const row = el("div", "msg " + (msg.user ? (mine ? "mine" : "theirs") : "bot"));
    const who = el("span", "who", msg.user ? msg.user : T.gateway);
    const at = el("span", "at", fmtTime(msg.at));
    const meta = el("div", "meta");
    meta.append(who, at);
    const body = el("div", "bubble", msg.text);
    row.append(meta, body);
    row.dataset.seq = String(msg.seq);
    log.appendChild(row);
    scrollDown();
  }

  function field(dl, label, value, mono) {
    if (value === undefined || value === null || value === "") return false;
    const dt = el("dt", null, label);
    const dd = el(mono ? "dd" : "dd", mono ? "mono" : null);
    if (mono) {
      dd.appendChild(el("pre", "statement", String(value)));
    } else {
      dd.textContent = String(value);
    }
    dl.append(dt, dd);
    return true;
  }

  // The rows the call would change (issue 24): per statement a caption, a small table that
  // scrolls sideways on a narrow screen, and notes (first 5 of N, columns that go).
  function renderEffects(box, label, effects) {
    box.replaceChildren();
    if (!effects.length) return;
    box.appendChild(el("p", "effects-label", label));
    for (const e of effects) {
      const part = el("section", "effect");
      part.appendChild(el("p", "effect-caption", e.caption));
      if (e.rows.length) {
        const table = el("table", "effect-rows");
        const head = el("tr");
        for (const c of e.columns) head.appendChild(el("th", null, c));
        table.appendChild(el("thead")).appendChild(head);
        const body = table.appendChild(el("tbody"));
        for (const row of e.rows) {
          const tr = body.appendChild(el("tr"));
          for (const cell of row) tr.appendChild(el("td", null, cell));
        }
        part.appendChild(el("div", "effect-scroll")).appendChild(table);
      }
      for (const note of e.notes) part.appendChild(el("p", "effect-note", note));
      box.appendChild(part);
    }
  }

  function renderCard(c, can, words) {
    let entry = state.cards.get(c.id);
    const arrived = !entry;
    if (!entry) {
      const node = $("card-template").content.firstElementChild.cloneNode(true);
      entry = { el: node, record: c, can: can || null, words: words };
      state.cards.set(c.id, entry);
      node.dataset.id = c.id;
      node.querySelector(".approve").addEventListener("click", () => decide(c.id, "approve"));
      node.querySelector(".approve-grant").addEventListener("click", () => decide(c.id, "approve", true));
      node.querySelector(".approve-shaped").addEventListener("click", () => decide(c.id, "approve", "shaped"));
      node.querySelector(".reject").addEventListener("click", () => decide(c.id, "reject"));
      node.querySelector(".again").addEventListener("click", () => askAgain(c.id));
      const wrap = el("div", "msg bot card-row");
      wrap.appendChild(node);
      log.appendChild(wrap);
    }
    entry.record = c;
    if (can) entry.can = can;
    if (words) entry.words = words;
    const w = entry.words;
    const node = entry.el;
    node.dataset.status = c.status;
    node.dataset.stage = w.stage;
    node.querySelector(".card-id").textContent = c.id;
    const risk = node.querySelector(".risk");
    risk.textContent = w.risk;
    risk.className = "risk risk-" + c.risk;
    node.querySelector(".summary").textContent = c.summary;
    const dl = node.querySelector(".fields");
    dl.replaceChildren();
    for (const f of w.fields) {
      const value = typeof f.value === "object" ? JSON.stringify(f.value, null, 2) : f.value;
      if (field(dl, f.label, value, f.mono)) dl.lastElementChild.classList.add("field-" + f.key);
    }
    renderEffects(node.querySelector(".effects"), w.effects_label, w.effects || []);
    updateCardState(entry);
    if (arrived) showCard(entry.el.parentElement);
    else scrollDown();
  }

  function updateCardState(entry) {
    const c = entry.record;
    const node = entry.el;
    const pending = c.status === "pending";
    const left = pending ? secondsLeft(c) : 0;
    const countdown = node.querySelector(".countdown");
    const outcome = node.querySelector(".outcome");
    const actions = node.querySelector(".actions");
    const why = node.querySelector(".why");
    const hint = node.querySelector(".reply-hint");
    const may = entry.can || {};
    // Only for people who may decide: for the others it would be a false promise.
    hint.hidden = !pending || !((may.approve || {}).allowed || (may.reject || {}).allowed);
    hint.textContent = entry.words.hint;
    if (!pending) {
      // The header no longer asks: it says the stage the call is at, in its word.
      const title = node.querySelector(".card-title");
      if (title) {
        title.textContent = entry.words.title || "";
      }
      countdown.hidden = true;
      outcome.hidden = false;
      outcome.textContent = entry.words.outcome || "";
      // Its stage (gateway/texts): approved while it runs, then done, failed or interrupted.
      outcome.className = "outcome outcome-" + entry.words.stage;
      actions.hidden = true;
      node.querySelector(".grant-shape").hidden = true;
      why.hidden = true;
      showAgain(entry);
      return;
    }
    node.querySelector(".again-row").hidden = true;
    node.querySelector(".went").hidden = true;
    countdown.hidden = false;
    const m = Math.floor(left / 60);
    const s = Math.floor(left % 60);
    countdown.textContent = fmt(T.time_left, { left: m + ":" + String(s).padStart(2, "0"), at: fmtTime(c.expires_at) });
    countdown.classList.toggle("urgent", left < 30);
    const can = entry.can || {};
    const approve = can.approve || { allowed: false, why: "" };
    const reject = can.reject || { allowed: false, why: "" };
    const expired = left <= 0;
    node.querySelector(".approve").disabled = expired || !approve.allowed || entry.busy === true;
    // Approve and skip asking for a while: drawn only for whoever may approve, and only
    // where a grant can apply (the server says which: never critical or four-eyes calls).
    const grant = can.grant || { allowed: false };
    const grantButton = node.querySelector(".approve-grant");
    grantButton.hidden = !grant.allowed;
    grantButton.disabled = expired || !grant.allowed || entry.busy === true;
    // The same offer in the reader's own shape: a length, or the next call only, and
    // pinned to the scope or the exact arguments (docs/grants.md).
    node.querySelector(".grant-shape").hidden = !grant.allowed;
    node.querySelector(".approve-shaped").disabled = expired || !grant.allowed || entry.busy === true;
    node.querySelector(".reject").disabled = expired || !reject.allowed || entry.busy === true;
    node.querySelector(".reason").disabled = expired || !reject.allowed;
    const reasons = [];
    if (!approve.allowed && approve.why) reasons.push(approve.why);
    if (!reject.allowed && reject.why && reject.why !== approve.why) reasons.push(reject.why);
    why.hidden = reasons.length === 0;
    why.textContent = reasons.join(T.reasons_joiner);
  }

  // The Ask again button on an ended card: shown when the server offers it (expired, or
  // cancelled by a shutdown, not asked again yet); only its requester may press it, the
  // others read why not. Once asked again, the card says where the call went.
  function showAgain(entry) {
    const node = entry.el;
    const again = (entry.can || {}).again || { offered: false };
    const row = node.querySelector(".again-row");
    row.hidden = !again.offered;
    const button = node.querySelector(".again");
    button.disabled = !again.allowed || entry.busy === true;
    const why = node.querySelector(".again-why");
    why.hidden = again.allowed || !again.why;
    why.textContent = again.why || "";
    const went = node.querySelector(".went");
    went.hidden = !again.went;
    went.textContent = again.went || "";
  }

  function secondsLeft(c) {
    const now = (Date.now() + state.offsetMs) / 1000;
    return Math.max(0, c.expires_at - now);
  }

  function tick() {
    for (const entry of state.cards.values()) {
      if (entry.record.status === "pending") updateCardState(entry);
    }
  }

  function onMessage(msg) {
    if (msg.seq <= state.lastSeq) return; // replayed after a reconnect
    state.lastSeq = msg.seq;
    if (msg.kind === "confirmation" && msg.confirmation) {
      renderCard(msg.confirmation, msg.can_decide, msg.card);
    } else if (msg.kind === "confirmation_update" && msg.confirmation) {
      const known = state.cards.get(msg.confirmation.id);
      if (known) known.busy = false;
      renderCard(msg.confirmation, msg.can_decide, msg.card);
    } else {
      addText(msg);
    }
  }

  // ---------------------------------------------------------------- actions

  function decide(id, decision, withGrant) {
    const entry = state.cards.get(id);
    if (!entry || !state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    const frame = { type: "decide", id: id, decision: decision };
    if (withGrant === "shaped" && entry.can && entry.can.grant) {
      const shape = entry.el.querySelector(".grant-shape");
      const length = shape.querySelector(".grant-length").value;
      const once = length === "once";
      frame.grant = {
        scope: "session",
        minutes: once ? 480 : Number(length), // a single-use grant lapses after 8 h unused
        pin: shape.querySelector(".grant-pin").value,
        single_use: once,
      };
    } else if (withGrant && entry.can && entry.can.grant) {
      frame.grant = { scope: entry.can.grant.scope, minutes: entry.can.grant.minutes };
    }
    if (decision === "reject") {
      const reason = entry.el.querySelector(".reason").value.trim();
      if (reason) frame.reason = reason;
    }
    entry.busy = true;
    updateCardState(entry);
    state.ws.send(JSON.stringify(frame));
  }

  function askAgain(id) {
    const entry = state.cards.get(id);
    if (!entry || !state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    entry.busy = true;
    updateCardState(entry);
    state.ws.send(JSON.stringify({ type: "again", id: id }));
  }

  function onDecision(frame) {
    const entry = state.cards.get(frame.id);
    if (!entry) return;
    entry.busy = false;
    const notice = entry.el.querySelector(".notice");
    if (frame.outcome !== "decided") {
      notice.hidden = false;
      notice.textContent = frame.message;
    } else {
      notice.hidden = true;
    }
    updateCardState(entry);
  }

  function send(ev) {
    ev.preventDefault();
    const box = $("text");
    const text = box.value.trim();
    if (!text || !state.ws || state.ws.readyState !== WebSocket.OPEN) return;
    if (text.length > state.maxText) {
      systemLine(fmt(T.too_long, { limit: state.maxText }), "error");
      return;
    }
    state.ws.send(JSON.stringify({ type: "message", text: text }));
    box.value = "";
  }

  // ---------------------------------------------------------------- connection

  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ session: state.session, user: state.user, after: String(state.lastSeq) });
    const ws = new WebSocket(proto + "//" + location.host + "/ws?" + q.toString());
    state.ws = ws;
    setConn(false, T.connecting);
    ws.onopen = () => {
      state.retry = 0;
    };
    ws.onmessage = (ev) => {
      let frame;
      try {
        frame = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (frame.type === "hello") {
        if (frame.last_seq < state.lastSeq) {
          // The gateway restarted (history lives in its memory): numbering starts again.
          systemLine(T.restarted);
          state.lastSeq = 0;
        }
        state.offsetMs = frame.now * 1000 - Date.now();
        state.maxText = frame.max_text_length;
        // A login proxy names the person (verified); otherwise names are typed by anyone.
        $("identity-banner").hidden = frame.identity === "verified";
        $("identity-remote").hidden = frame.identity !== "self-declared";
        if (frame.identity === "verified") {
          state.user = frame.user;
          $("user").value = frame.user;
          $("user").readOnly = true;
        }
        setConn(true, fmt(T.online, { session: frame.session, user: frame.user }));
        fold(true);
        $("text").disabled = false;
        $("send").disabled = false;
      } else if (frame.type === "message") {
        onMessage(frame);
      } else if (frame.type === "decision") {
        onDecision(frame);
      } else if (frame.type === "again") {
        // Asked again: the card's update says where it went; a refusal says why here.
        onDecision({ id: frame.id, outcome: frame.done ? "decided" : "refused", message: frame.message });
      } else if (frame.type === "error") {
        systemLine(frame.error, "error");
      }
    };
    ws.onclose = (ev) => {
      if (state.ws !== ws) return;
      $("text").disabled = true;
      $("send").disabled = true;
      setConn(false, ev.reason ? fmt(T.offline_because, { reason: ev.reason }) : T.offline);
      if (state.wanted) {
        const delay = Math.min(10000, 500 * 2 ** state.retry) * (0.5 + Math.random());
        state.retry += 1;
        setTimeout(() => {
          if (state.ws === ws && state.wanted) connect();
        }, delay);
      }
    };
  }

  function join(ev) {
    if (ev) ev.preventDefault();
    const user = $("user").value.trim();
    const session = $("session").value.trim();
    if (!NAME.test(user) || !NAME.test(session)) {
      systemLine(T.bad_name, "error");
      return;
    }
    const changed = session !== state.session || user !== state.user;
    if (!changed && state.ws && state.ws.readyState <= WebSocket.OPEN) {
      fold(state.ws.readyState === WebSocket.OPEN); // unfolded to change nothing
      return;
    }
    if (state.ws) {
      const old = state.ws;
      state.ws = null;
      old.close(1000, "leaving");
    }
    if (changed) {
      // Another room, or another name (whose buttons differ): read the history afresh.
      for (const node of log.querySelectorAll(".msg, .system")) node.remove();
      state.cards.clear();
      state.lastSeq = 0;
    }
    state.user = user;
    state.session = session;
    state.wanted = true;
    localStorage.setItem("gateway.user", user);
    const url = new URL(location.href);
    url.searchParams.set("session", session);
    url.searchParams.delete("user");
    history.replaceState(null, "", url.toString());
    $("share").href = url.toString();
    connect();
  }

  function init() {
    const params = new URLSearchParams(location.search);
    const stored = localStorage.getItem("gateway.user");
    $("user").value = params.get("user") || stored || "guest-" + Math.floor(1000 + Math.random() * 9000);
    $("session").value = params.get("session") || "lobby";
    $("join").addEventListener("submit", join);
    $("composer").addEventListener("submit", send);
    $("text").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) send(ev);
    });
    $("change").addEventListener("click", () => {
      fold(false);
      $("user").focus();
    });
    $("share").addEventListener("click", (ev) => {
      ev.preventDefault();
      const link = $("share").href;
      if (navigator.clipboard) navigator.clipboard.writeText(link).catch(() => {});
      systemLine(fmt(T.share_link, { link: link }));
    });
    setInterval(tick, 1000);
    join();
  }

  init();
})();
