// skippy-trio web playground: chat, tools and a per-token uncertainty view over the server's own API.
//
// No build step: plain ES modules, served by the server itself (skippy/http/webui.py). Every request
// goes to the same origin with relative URLs. Model output reaches the page only as text nodes
// (textContent) or as markdown rendered by marked and then sanitized by DOMPurify.

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const LS_CONVERSATIONS = "skippy.conversations.v1";
const LS_CURRENT = "skippy.current.v1";
const LS_SETTINGS = "skippy.settings.v1";
const LS_DELETED = "skippy.deleted.v1"; // ids of deleted conversations (the last 500): no tab brings them back
const SS_KEY = "skippy.apiKey";
const POLL_MS = 3000;
const MAX_IMAGE = 1_000_000; // the largest image (data URL characters) kept in local storage
const SAVE_MS = 500; // a streaming reply is saved at most this often
const TOP_LOGPROBS = 5;
const SCALE_NATS = 5; // the tint scale: 0 nats (white) .. 5 nats and above (red)

const DEFAULT_TOOLS = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "City name, e.g. Paris" } },
      required: ["city"],
    },
  },
}];

const DEFAULTS = {
  model: "", temperature: 0.7, top_p: 1, max_tokens: 512, seed: "", toolsOn: false, tool_choice: "auto",
  tools: JSON.stringify(DEFAULT_TOOLS, null, 2), uncertainty: false, hooksOn: true, system: "",
  settingsOpen: true,
};

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k in node && k !== "list") node[k] = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) {
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

function store(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch (e) {
    console.warn("could not save to local storage", e);
    return false;
  }
}

// -- state -------------------------------------------------------------------------------------------

let conversations = load(LS_CONVERSATIONS, []);
if (!Array.isArray(conversations)) conversations = [];
// a reply still streaming when the page went (a reload, a closed tab) is kept as it was, stopped
for (const c of conversations) for (const m of c.messages || []) if (m.pending) { m.pending = false; m.stopped = true; }
let currentId = load(LS_CURRENT, null);
const settings = { ...DEFAULTS, ...load(LS_SETTINGS, {}) };
let props = null; // GET /props, once loaded
let busy = null; // {controller, conv, msg} while a reply streams
let leaving = false; // the page is being unloaded (pagehide)

const saveSettings = () => store(LS_SETTINGS, settings);

// Other tabs share the stored list: a save merges it by conversation id (the later change of one wins; a
// conversation another tab added is kept; one deleted anywhere stays deleted), and the `storage` event
// brings another tab's saves here.
function merged() {
  let stored = load(LS_CONVERSATIONS, []);
  if (!Array.isArray(stored)) stored = [];
  const gone = new Set(load(LS_DELETED, []));
  const mine = new Map(conversations.map((c) => [c.id, c]));
  const ids = new Set(stored.map((c) => c?.id));
  const out = conversations.filter((c) => !ids.has(c.id)); // new here: at the top, as new chats are
  for (const c of stored) {
    if (!c?.id) continue;
    const m = mine.get(c.id);
    out.push(m && (m === busy?.conv || (m.updated ?? 0) >= (c.updated ?? 0)) ? m : c);
  }
  return out.filter((c) => !gone.has(c.id));
}

// The stored copy of the list: images over `max` characters (data URLs) left out, counted in imagesDropped
// (the page shows a placeholder for them).
const slim = (list, max) => list.map((c) => ({ ...c, messages: c.messages.map((m) => {
  const big = (m.images || []).filter((u) => u.length > max).length;
  return big ? { ...m, images: m.images.filter((u) => u.length <= max), imagesDropped: (m.imagesDropped || 0) + big } : m;
}) }));
const noted = new WeakSet(); // messages whose images were said not to be kept

// Local storage holds about 5 MB: an image over MAX_IMAGE is not kept (the text is), all images go if the
// rest does not fit, and the page says so; saving goes on either way.
function saveConversations(changed) {
  if (changed) changed.updated = Date.now();
  conversations = merged();
  for (const max of [MAX_IMAGE, 0]) {
    const list = slim(conversations, max);
    if (!store(LS_CONVERSATIONS, list)) continue;
    const lost = conversations.flatMap((c) => c.messages).filter((m) => m.images?.some((u) => u.length > max)
      && !noted.has(m));
    lost.forEach((m) => noted.add(m));
    if (lost.length) notify("An image could not be kept in this browser's storage (too large, or the storage is full):"
      + " it is shown until the page is reloaded, then a placeholder. The text is kept.");
    return;
  }
  notify("Could not save the conversations: this browser's storage is full or turned off.");
}
const current = () => conversations.find((c) => c.id === currentId) || null;
const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function newConversation() {
  const conv = { id: newId(), title: "New chat", created: Date.now(), system: settings.system || "", messages: [] };
  conversations.unshift(conv);
  currentId = conv.id;
  store(LS_CURRENT, currentId);
  saveConversations(conv);
  return conv;
}

// a line above the composer, until dismissed or the next message
function notify(text) {
  $("notice-text").textContent = text;
  $("notice").hidden = !text;
}

// -- API ---------------------------------------------------------------------------------------------

let keyPrompt = null;
let reloadAfterKey = false; // the model list or /props failed for want of a key: loaded again once one is given

// The key dialog: resolves once a key is entered; rejects when it is closed without one (Escape), failing
// the requests that wait on it. The next request asks again.
function askKey(refused) {
  if (keyPrompt) return keyPrompt;
  const dialog = $("key-dialog");
  $("key-error").hidden = !refused;
  $("key-input").value = "";
  keyPrompt = new Promise((resolve, reject) => {
    const finish = () => {
      $("key-form").removeEventListener("submit", done);
      dialog.removeEventListener("close", dismissed);
      keyPrompt = null;
    };
    const done = (ev) => {
      ev.preventDefault();
      const key = $("key-input").value.trim();
      if (!key) return;
      sessionStorage.setItem(SS_KEY, key);
      finish();
      dialog.close();
      resolve();
      if (reloadAfterKey) {
        reloadAfterKey = false;
        loadModels();
        loadProps();
      }
    };
    const dismissed = () => {
      finish();
      reject(new Error("This server needs an API key: the key dialog was closed without one."));
    };
    $("key-form").addEventListener("submit", done);
    dialog.addEventListener("close", dismissed);
  });
  dialog.showModal();
  $("key-input").focus();
  return keyPrompt;
}

// the key, or the abort of the request that waits for it (Stop ends a generation even while the dialog is up)
function waitKey(refused, signal) {
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    if (signal?.aborted) return abort();
    signal?.addEventListener("abort", abort, { once: true });
    askKey(refused).then(resolve, reject).finally(() => signal?.removeEventListener("abort", abort));
  });
}

// fetch with the API key (asked when the server answers 401, kept in sessionStorage); with ask false a 401
// is returned as it is (the side panel's polling does not open the dialog)
async function api(path, opts = {}, ask = true) {
  for (;;) {
    const key = sessionStorage.getItem(SS_KEY);
    const headers = { ...(opts.headers || {}) };
    if (key) headers.Authorization = "Bearer " + key;
    const res = await fetch(path, { ...opts, headers });
    if (res.status !== 401 || !ask) return res;
    await res.body?.cancel();
    const now = sessionStorage.getItem(SS_KEY);
    if (now && now !== key) continue;  // a prompt for another request stored a new key meanwhile: try that one
    if (key) sessionStorage.removeItem(SS_KEY);  // the refused key, not one entered since
    await waitKey(Boolean(key), opts.signal);
  }
}

async function errorText(res) {
  try {
    const body = await res.json();
    if (body?.error?.message) return `${res.status}: ${body.error.message}`;
  } catch { /* not JSON */ }
  return `${res.status} ${res.statusText}`;
}

// Server-sent events of a fetch Response: each event's data parsed as JSON, until [DONE].
async function* sseEvents(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    for (let m = buf.match(/\r?\n\r?\n/); m; m = buf.match(/\r?\n\r?\n/)) {
      const raw = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = raw.split(/\r?\n/).filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue; // a comment (": ping") or an empty event
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

// -- markdown ----------------------------------------------------------------------------------------

// Raw HTML in model output is shown as text (escaped), never parsed: the page renders only the HTML
// that marked itself generates from markdown, and DOMPurify then cleans that too (javascript: links...).
const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
marked.use({ gfm: true, breaks: true, renderer: {
  html: ({ text, block }) => (block ? `<p class="raw-html">${escapeHtml(text.trim())}</p>\n` : escapeHtml(text)),
} });
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});
const PURIFY = {
  FORBID_TAGS: ["style", "img", "svg", "math", "form", "input", "button", "textarea", "select", "iframe", "video",
    "audio", "source", "object", "embed", "link", "meta", "base"],
  FORBID_ATTR: ["style", "srcset"],
};

function renderMarkdown(node, text) {
  node.innerHTML = DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
  for (const pre of node.querySelectorAll("pre")) {
    const copy = el("button", { class: "copy", type: "button", text: "copy" });
    copy.addEventListener("click", () => {
      navigator.clipboard?.writeText(pre.querySelector("code")?.textContent ?? pre.textContent);
      copy.textContent = "copied";
      setTimeout(() => { copy.textContent = "copy"; }, 1200);
    });
    pre.prepend(copy);
  }
}

// -- uncertainty helpers -----------------------------------------------------------------------------

function tint(entropy) {
  const x = Math.max(0, Math.min(entropy / SCALE_NATS, 1));
  return `hsla(${Math.round(52 - 52 * x)}, 95%, ${Math.round(62 - 12 * x)}%, ${(0.1 + 0.75 * x).toFixed(3)})`;
}

function barTint(entropy) {
  const x = Math.max(0, Math.min(entropy / SCALE_NATS, 1));
  return `hsl(${Math.round(52 - 52 * x)}, 90%, ${Math.round(70 - 20 * x)}%)`;
}

const threshold = () => props?.signals?.high_entropy_threshold ?? 2.0;
const fmt = (x, d = 4) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(d) : "n/a");
const shown = (s) => JSON.stringify(s ?? "");

// a logprobs.content entry -> what a message keeps per token
function tokenOf(entry, decoder) {
  const bytes = Array.isArray(entry.bytes) ? new Uint8Array(entry.bytes) : null;
  return {
    text: bytes ? decoder.decode(bytes, { stream: true }) : entry.token,
    token: entry.token,
    logprob: entry.logprob,
    entropy: entry.entropy ?? null,
    margin: entry.margin ?? null,
    top: (entry.top_logprobs || []).map((t) => ({ token: t.token, logprob: t.logprob })),
  };
}

// -- rendering ---------------------------------------------------------------------------------------

function renderConversations() {
  const nav = $("conversations");
  nav.replaceChildren();
  for (const conv of conversations) {
    const item = el("div", { class: "conv" + (conv.id === currentId ? " active" : ""), "data-id": conv.id });
    const title = el("button", { class: "conv-title", type: "button", dir: "auto", text: conv.title || "Untitled",
      title: conv.title || "Untitled" });
    title.addEventListener("click", () => select(conv.id));
    const rename = el("button", { class: "icon", type: "button", title: "Rename", "aria-label": "Rename",
      text: "✎" });
    rename.addEventListener("click", () => startRename(item, conv));
    const del = el("button", { class: "icon", type: "button", title: "Delete", "aria-label": "Delete", text: "×" });
    del.addEventListener("click", () => {
      if (del.dataset.armed) return removeConversation(conv.id);
      del.dataset.armed = "1";
      del.textContent = "delete?";
      del.classList.add("armed");
      setTimeout(() => { if (del.isConnected) { delete del.dataset.armed; del.textContent = "×"; del.classList.remove("armed"); } },
        3000);
    });
    item.append(title, rename, del);
    nav.append(item);
  }
}

function startRename(item, conv) {
  const input = el("input", { class: "conv-rename", value: conv.title, "aria-label": "Conversation name" });
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    if (keep && input.value.trim()) conv.title = input.value.trim().slice(0, 120);
    saveConversations(conv);
    renderConversations();
  };
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") finish(true);
    if (ev.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  item.replaceChildren(input);
  input.focus();
  input.select();
}

function removeConversation(id) {
  if (busy && busy.conv.id === id) busy.controller.abort();
  store(LS_DELETED, [...load(LS_DELETED, []), id].slice(-500));
  conversations = conversations.filter((c) => c.id !== id);
  if (currentId === id) currentId = conversations[0]?.id ?? null;
  store(LS_CURRENT, currentId);
  saveConversations();
  renderAll();
}

function select(id) {
  currentId = id;
  sidebarOpen = false; // on a narrow screen: back to the chat
  store(LS_CURRENT, currentId);
  renderAll();
}

function toolResults(conv, index) {
  // tool messages answering the assistant message at ``index``: tool_call_id -> message
  const out = new Map();
  for (let i = index + 1; i < conv.messages.length && conv.messages[i].role === "tool"; i++) {
    out.set(conv.messages[i].tool_call_id, conv.messages[i]);
  }
  return out;
}

function renderMessages() {
  const box = $("messages");
  const conv = current();
  box.replaceChildren();
  if (!conv || !conv.messages.length) {
    box.append(emptyState());
    return;
  }
  conv.messages.forEach((msg, i) => {
    if (msg.role === "tool") return; // shown in its call's card
    box.append(messageNode(conv, msg, i));
  });
  box.scrollTop = box.scrollHeight;
}

function emptyState() {
  return el("div", { id: "empty", class: "empty" },
    el("h1", { text: "Talk to the model" }),
    el("p", {}, "Type a message below. Turn on the ", el("b", { text: "Uncertainty view" }),
      " to see, token by token, where the model was unsure: redder means higher entropy; hover a token for its",
      " probability and the alternatives it considered."));
}

function messageNode(conv, msg, index) {
  const node = el("article", { class: `msg ${msg.role}`, "data-index": index });
  fillMessage(node, conv, msg, index);
  return node;
}

function fillMessage(node, conv, msg, index) {
  node.replaceChildren();
  if (msg.role === "user") {
    const bubble = el("div", { class: "bubble", dir: "auto", text: msg.content });
    if (msg.images?.length || msg.imagesDropped) {
      const strip = el("div", { class: "msg-images" });
      for (const url of msg.images || []) strip.append(el("img", { src: url, alt: "attached image", class: "thumb" }));
      for (let i = 0; i < (msg.imagesDropped || 0); i++) {
        strip.append(el("span", { class: "thumb dropped", text: "image not kept (too large to store)" }));
      }
      bubble.prepend(strip);
    }
    node.append(bubble);
    return;
  }
  const head = el("div", { class: "meta" }, el("span", { class: "who", text: "assistant" }));
  if (msg.model) head.append(el("span", { text: msg.model }));
  if (msg.pending) head.append(el("span", { class: "live", text: "generating…" }));
  if (msg.stopped) head.append(el("span", { class: "badge warn", text: "stopped" }));
  if (msg.finish && !msg.pending) head.append(el("span", { class: "finish", text: `finish: ${msg.finish}` }));
  if (msg.usage) head.append(el("span", { text: `${msg.usage.completion_tokens} tokens` }));
  if (msg.timings?.predicted_per_second) head.append(el("span", { text: `${msg.timings.predicted_per_second.toFixed(1)} tok/s` }));
  node.append(head);

  if (msg.reasoning) {
    const details = el("details", { class: "reasoning", open: Boolean(msg.pending && !msg.content) });
    const body = el("div", { class: "md", dir: "auto" });
    renderMarkdown(body, msg.reasoning);
    details.append(el("summary", { text: "Reasoning" }), body);
    node.append(details);
  }

  const view = settings.uncertainty;
  if (view && msg.tokens?.length) {
    node.append(tokenView(msg));
  } else if (msg.content || (!msg.tool_calls?.length && !msg.error)) {
    const body = el("div", { class: "body md", dir: "auto" });
    renderMarkdown(body, msg.content);
    node.append(body);
  }

  if (msg.tool_calls?.length) node.append(toolCards(conv, msg, index));
  if (msg.error) node.append(el("div", { class: "msg-error", text: msg.error }));
  if (!view && msg.hooks?.length) {
    node.append(el("div", { class: "hook-summary",
      text: "hook policy: " + msg.hooks.map((h) => `${h.event} ${h.action === "none" ? "(no action)" : h.action}`
        + (h.consult ? ` (${consultLabel(h.consult)})` : "")).join(", ")
        + " — turn on the uncertainty view to see where" }));
  }
  if (view) {
    if (msg.tokens?.length) node.append(uncertaintyPanel(msg));
    else if (!msg.pending) node.append(el("div", { class: "hint", text: "No per-token data for this message." }));
  }
}

// a consultation of another model (--consult): who was asked, what came of it, how long it took
function consultLabel(c) {
  const parts = [`asked ${c.peer}${c.model && c.model !== c.peer ? ` (${c.model})` : ""}: ${c.outcome}`];
  if (c.latency_ms != null) parts.push(`${Math.round(c.latency_ms)} ms`);
  if (c.chars != null) parts.push(`${c.chars} characters injected`);
  if (c.error) parts.push(c.error);
  return parts.join(", ");
}

function hookLabel(h) {
  if (h.consult) return `hook ${h.event}: ${consultLabel(h.consult)}`;
  if (h.action === "inject") return `hook ${h.event}: injected`;
  if (h.action === "stop") return `hook ${h.event}: stop (${h.reason ?? ""})`;
  return `hook ${h.event}: no action`;
}

function hookNode(h) {
  const node = el("span", { class: `hook hook-${h.action}`, "data-position": h.position,
    title: `${hookLabel(h)} at token ${h.position}` + (h.entropy != null ? ` (entropy ${fmt(h.entropy, 3)} nats)` : "") });
  const tag = { inject: "⚑ injected by hook", stop: "■ hook stop" }[h.action] ?? `⚐ ${h.event}`;
  node.append(el("span", { class: "hook-tag", text: tag }));
  if (h.action === "none") node.append(el("span", { class: "hook-text", text: "no action" }));
  if (h.action === "inject" && h.text) node.append(el("span", { class: "hook-text", text: h.text }));
  if (h.consult) node.append(el("span", { class: "hook-consult", text: consultLabel(h.consult) }));
  return node;
}

function tokenView(msg) {
  const body = el("div", { class: "body tokens", dir: "auto" });
  const hooks = [...(msg.hooks || [])].sort((a, b) => a.position - b.position);
  let h = 0;
  msg.tokens.forEach((t, i) => {
    while (h < hooks.length && hooks[h].position <= i) body.append(hookNode(hooks[h++]));
    const span = el("span", { class: "tok", "data-i": i, text: t.text });
    if (t.entropy != null) span.style.backgroundColor = tint(t.entropy);
    if (t.entropy != null && t.entropy > threshold()) span.classList.add("high");
    body.append(span);
  });
  while (h < hooks.length) body.append(hookNode(hooks[h++]));
  return body;
}

function uncertaintyPanel(msg) {
  const panel = el("div", { class: "unc" });
  const ent = msg.tokens.map((t) => t.entropy).filter((e) => e != null);
  const thr = threshold();
  const high = ent.filter((e) => e > thr).length;
  const mean = ent.length ? ent.reduce((a, b) => a + b, 0) / ent.length : 0;
  const stats = el("div", { class: "unc-stats" },
    el("span", { text: `${msg.tokens.length} tokens` }),
    el("span", { text: `mean entropy ${mean.toFixed(2)} nats` }),
    el("span", { class: high ? "hot" : "", text: `${high} above the hook threshold (${thr} nats)` }));
  if (msg.hooks?.length) stats.append(el("span", { text: `${msg.hooks.length} hook decision${msg.hooks.length > 1 ? "s" : ""}` }));
  panel.append(legend(thr), chart(msg, thr), stats);
  return panel;
}

function legend(thr) {
  const bar = el("div", { class: "legend-bar" });
  const stops = [];
  for (let i = 0; i <= 10; i++) stops.push(`${tint((SCALE_NATS * i) / 10)} ${i * 10}%`);
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  const mark = el("span", { class: "legend-thr", title: `hook threshold ${thr} nats` });
  mark.style.left = `${Math.min(thr / SCALE_NATS, 1) * 100}%`;
  bar.append(mark);
  const ticks = el("div", { class: "legend-ticks" });
  for (let i = 0; i <= SCALE_NATS; i++) ticks.append(el("span", { text: i === SCALE_NATS ? `${i}+` : String(i) }));
  return el("div", { class: "legend" }, el("span", { class: "legend-title", text: "entropy (nats)" }),
    el("div", { class: "legend-scale" }, bar, ticks));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function chart(msg, thr) {
  const n = msg.tokens.length;
  const W = 1000, H = 120, pad = 4;
  const maxE = Math.max(thr * 1.25, 1, ...msg.tokens.map((t) => t.entropy ?? 0));
  const y = (e) => H - pad - (e / maxE) * (H - 2 * pad);
  const bw = W / Math.max(n, 1);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", class: "chart",
    role: "img", "aria-label": "entropy of each generated token" });
  msg.tokens.forEach((t, i) => {
    const e = t.entropy ?? 0;
    const r = svg("rect", { x: i * bw, y: y(e), width: Math.max(bw * 0.85, 0.5), height: H - pad - y(e),
      fill: barTint(e), "data-i": i, class: "bar" });
    root.append(r);
  });
  root.append(svg("line", { x1: 0, x2: W, y1: y(thr), y2: y(thr), class: "thr", "vector-effect": "non-scaling-stroke" }));
  for (const h of msg.hooks || []) {
    const x = Math.min(h.position, n) * bw;
    const line = svg("line", { x1: x, x2: x, y1: 0, y2: H, class: `hookline hook-${h.action}`,
      "vector-effect": "non-scaling-stroke" });
    const title = svg("title");
    title.textContent = `${hookLabel(h)} at token ${h.position}${h.text ? `: ${h.text}` : ""}`;
    line.append(title);
    root.append(line);
  }
  const wrap = el("div", { class: "chart-wrap" }, root,
    el("span", { class: "chart-max", text: `${maxE.toFixed(1)} nats` }),
    el("span", { class: "chart-thr", text: `threshold ${thr}` }));
  const thrLabel = wrap.querySelector(".chart-thr");
  thrLabel.style.top = `${(y(thr) / H) * 100}%`;
  return wrap;
}

function toolCards(conv, msg, index) {
  const answers = toolResults(conv, index);
  const box = el("div", { class: "toolcalls" });
  for (const call of msg.tool_calls) {
    const card = el("div", { class: "toolcard", "data-call-id": call.id });
    let args = call.function?.arguments ?? "";
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* partial or not JSON: as sent */ }
    card.append(el("div", { class: "tc-head" }, el("span", { class: "tc-icon", text: "tool call" }),
      el("span", { class: "tc-name", text: call.function?.name ?? "?" }), el("span", { class: "tc-id", text: call.id })),
    el("pre", { class: "tc-args", text: args }));
    const answer = answers.get(call.id);
    if (answer) {
      card.classList.add("answered");
      card.append(el("div", { class: "tc-result" }, el("span", { class: "tc-label", text: "result" }),
        el("pre", { text: answer.content })));
    } else if (!msg.pending) {
      const input = el("textarea", { class: "tc-input mono", rows: 2, placeholder: 'Tool result, e.g. {"temperature": 21}',
        "aria-label": `Result of ${call.function?.name}` });
      const send = el("button", { class: "primary tc-send", type: "button", text: "Send result" });
      send.addEventListener("click", () => answerTool(conv, index, call, input.value));
      input.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); send.click(); }
      });
      card.append(el("div", { class: "tc-answer" }, input, send));
    }
    box.append(card);
  }
  return box;
}

function answerTool(conv, index, call, content) {
  if (busy) return;
  const answers = toolResults(conv, index);
  if (answers.has(call.id)) return;
  let at = index + 1;
  while (at < conv.messages.length && conv.messages[at].role === "tool") at++;
  conv.messages.splice(at, 0, { role: "tool", tool_call_id: call.id, name: call.function?.name, content: content || "" });
  saveConversations(conv);
  const msg = conv.messages[index];
  if (msg.tool_calls.every((c) => toolResults(conv, index).has(c.id)) && at === conv.messages.length - 1) {
    generate(conv, false);
  } else {
    renderMessages();
  }
}

let pendingFrame = 0;
function renderLive(conv, msg) {
  if (pendingFrame) return;
  pendingFrame = requestAnimationFrame(() => {
    pendingFrame = 0;
    if (current() !== conv) return;
    const box = $("messages");
    const index = conv.messages.indexOf(msg);
    const node = box.querySelector(`article.msg[data-index="${index}"]`);
    const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    if (node) fillMessage(node, conv, msg, index);
    else renderMessages();
    if (stick) box.scrollTop = box.scrollHeight;
  });
}

// Phone-width screens (the CSS's max-width: 900px): the settings are a drawer over the chat, closed
// until the Settings button opens it (not kept: a wide screen's open panel must not cover a phone's chat).
const narrow = window.matchMedia("(max-width: 900px)");
let drawerOpen = false;
let sidebarOpen = false; // the same for the conversations (the sidebar), from the left: the Chats button

function settingsShown() { return narrow.matches ? drawerOpen : settings.settingsOpen; }

function renderDrawer() {
  const open = settingsShown();
  document.body.classList.toggle("settings-closed", !open);
  document.body.classList.toggle("drawer-open", narrow.matches && open);
  const side = narrow.matches && sidebarOpen;
  document.body.classList.toggle("sidebar-open", side);
  $("drawer-backdrop").hidden = !(narrow.matches && (open || side));
  $("toggle-settings").setAttribute("aria-expanded", String(open));
  $("toggle-sidebar").setAttribute("aria-expanded", String(side));
}

function closeDrawer() {
  if (!narrow.matches || !(drawerOpen || sidebarOpen)) return;
  const button = sidebarOpen ? "toggle-sidebar" : "toggle-settings";
  drawerOpen = sidebarOpen = false;
  renderDrawer();
  $(button).focus();
}

function renderSettings() {
  const conv = current();
  $("system").value = conv ? conv.system : settings.system;
  for (const k of ["temperature", "top_p", "max_tokens", "seed", "tools", "tool_choice"]) $(k).value = settings[k];
  $("tools-on").checked = settings.toolsOn;
  $("hooks-on").checked = settings.hooksOn;
  $("uncertainty").checked = settings.uncertainty;
  renderDrawer();
  checkTools();
}

function renderAll() {
  renderConversations();
  renderMessages();
  renderSettings();
}

function setBusy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
}

// -- chat --------------------------------------------------------------------------------------------

function parsedTools() {
  try {
    const tools = JSON.parse(settings.tools);
    if (!Array.isArray(tools)) throw new Error("the definitions must be a JSON array of tools");
    for (const t of tools) {
      if (t?.type !== "function" || typeof t.function?.name !== "string") {
        throw new Error('each tool needs "type": "function" and a "function" with a "name"');
      }
    }
    return { tools };
  } catch (e) {
    return { error: e.message };
  }
}

function checkTools() {
  const { error } = parsedTools();
  $("tools-error").hidden = !error || !settings.toolsOn;
  $("tools-error").textContent = error ? `Tools not sent: ${error}` : "";
}

function requestBody(conv, afterUser) {
  const messages = [];
  if (conv.system.trim()) messages.push({ role: "system", content: conv.system });
  for (const m of conv.messages) {
    if (m.pending) continue;
    if (m.role === "user") {
      const images = (m.images || []).map((url) => ({ type: "image_url", image_url: { url } }));
      messages.push({ role: "user", content: images.length ? [...images, { type: "text", text: m.content }] : m.content });
    }
    else if (m.role === "tool") messages.push({ role: "tool", tool_call_id: m.tool_call_id, content: m.content });
    else if (m.role === "assistant") {
      if (!m.content && !m.tool_calls?.length) continue; // an error or a reply stopped before its first token
      const out = { role: "assistant", content: m.content || (m.tool_calls?.length ? null : "") };
      if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
      messages.push(out);
    }
  }
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    logprobs: true, top_logprobs: TOP_LOGPROBS, return_signals: true,
  };
  if (settings.model) body.model = settings.model;
  for (const k of ["temperature", "top_p", "max_tokens"]) {
    const v = Number(settings[k]);
    if (settings[k] !== "" && Number.isFinite(v)) body[k] = v;
  }
  if (settings.seed !== "" && settings.seed !== null && Number.isFinite(Number(settings.seed))) body.seed = Number(settings.seed);
  if (settings.toolsOn) {
    const { tools } = parsedTools();
    if (tools?.length) {
      body.tools = tools;
      // "required" forces a call on the user's message; after tool results the model answers freely
      body.tool_choice = afterUser || settings.tool_choice === "none" ? settings.tool_choice : "auto";
    }
  }
  if (props?.hooks) {
    body.mesh_hooks = Boolean(settings.hooksOn); // false too: it keeps the message out under --hooks-default-on
    if (settings.hooksOn) body.return_hook_events = true;
  }
  return body;
}

async function generate(conv, afterUser) {
  const msg = { role: "assistant", content: "", reasoning: "", tool_calls: [], tokens: [], hooks: [],
    model: settings.model, pending: true };
  const body = requestBody(conv, afterUser);
  conv.messages.push(msg);
  const controller = new AbortController();
  busy = { controller, conv, msg };
  setBusy(true);
  renderMessages();
  const decoder = new TextDecoder();
  let savedAt = Date.now();
  let refused = false; // an error before any of the reply: the message was refused
  let early = false; // Stop before any of the reply: the message goes back to the box too
  try {
    const res = await api("v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw new Error(await errorText(res));
    for await (const chunk of sseEvents(res)) {
      if (chunk.error) throw new Error(chunk.error.message || "the server ended the stream with an error");
      for (const c of chunk.choices || []) {
        const d = c.delta || {};
        if (d.content) msg.content += d.content;
        if (d.reasoning_content) msg.reasoning += d.reasoning_content;
        for (const tc of d.tool_calls || []) {
          const slot = msg.tool_calls[tc.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.function.name = tc.function.name;
          if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
        }
        for (const entry of c.logprobs?.content || []) msg.tokens.push(tokenOf(entry, decoder));
        for (const h of c.hook_events || []) msg.hooks.push(h);
        if (c.finish_reason) msg.finish = c.finish_reason;
      }
      if (chunk.usage) msg.usage = chunk.usage;
      if (chunk.timings) msg.timings = chunk.timings;
      if (chunk.model) msg.model = chunk.model;
      renderLive(conv, msg);
      if (Date.now() - savedAt >= SAVE_MS) { savedAt = Date.now(); saveConversations(conv); } // a reload keeps it
    }
  } catch (e) {
    const nothing = !msg.content && !msg.reasoning && !msg.tool_calls.some(Boolean);
    if (e.name === "AbortError" || leaving) { // Stop, or the page going (a network error)
      msg.stopped = true;
      early = nothing && !leaving;
    } else {
      msg.error = String(e.message || e);
      refused = nothing;
    }
  } finally {
    msg.tool_calls = msg.tool_calls.filter(Boolean);
    msg.pending = false;
    busy = null;
    setBusy(false);
    if (refused && afterUser) takeBack(conv, msg, `Not sent: ${msg.error}`);
    else if (early && afterUser) takeBack(conv, msg, "Stopped before the reply: the message is back in the box");
    saveConversations(conv);
    if (current() === conv) renderMessages();
  }
}

// A refused message (too long for the context, an image for a text-only model, no API key) leaves the
// conversation, as `skippy run` drops it: else it would be sent again, and refused again, with every later
// message. So does one stopped before any of its reply (else the next message went out as a second user turn
// in a row). Its text goes back into the input box, the note above it.
function takeBack(conv, msg, note) {
  const at = conv.messages.indexOf(msg);
  const user = conv.messages[at - 1];
  if (user?.role !== "user") return;
  conv.messages.splice(at - 1, 2);
  if (!conv.messages.length) conv.title = "New chat";
  const input = $("input");
  input.value = user.content + (input.value ? "\n" + input.value : "");
  notify(note + (user.images?.length ? " (the image is not kept: attach it again to retry)" : ""));
  renderConversations();
}

// -- attached images: data URLs sent as OpenAI image_url parts (the server needs --mmproj) ----------------

let attached = [];

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  box.hidden = !attached.length;
  attached.forEach((url, i) => {
    const remove = el("button", { type: "button", class: "remove", text: "×", "aria-label": "Remove the image" });
    remove.addEventListener("click", () => { attached.splice(i, 1); renderAttachments(); });
    box.append(el("span", { class: "attachment" }, el("img", { src: url, alt: "image to send", class: "thumb" }),
      remove));
  });
}

function attachFiles(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    const reader = new FileReader();
    reader.addEventListener("load", () => { attached.push(reader.result); renderAttachments(); });
    reader.readAsDataURL(file);
  }
}

function send(text) {
  if (busy) return;
  notify("");
  let conv = current();
  if (!conv) conv = newConversation();
  const images = attached;
  attached = [];
  renderAttachments();
  conv.messages.push(images.length ? { role: "user", content: text, images } : { role: "user", content: text });
  if (conv.title === "New chat") conv.title = text.replace(/\s+/g, " ").trim().slice(0, 48) || "New chat";
  saveConversations(conv);
  renderConversations();
  generate(conv, true);
}

// -- tooltip -----------------------------------------------------------------------------------------

function row(label, value, field, unit = "") {
  return el("tr", {}, el("th", { text: label }),
    el("td", { "data-field": field, "data-value": value ?? "", text: value == null ? "n/a" : fmt(value) + unit }));
}

function showTooltip(target, msg, i) {
  const t = msg.tokens[i];
  if (!t) return;
  const tip = $("tooltip");
  const alts = el("table", { class: "alts" });
  for (const a of t.top) {
    const bar = el("span", { class: "pbar" });
    bar.style.width = `${Math.round(Math.exp(a.logprob) * 100)}%`;
    alts.append(el("tr", { class: a.token === t.token ? "chosen" : "", "data-alt": "" },
      el("td", { class: "alt-tok", text: shown(a.token) }),
      el("td", { class: "alt-lp", "data-field": "alt-logprob", "data-value": a.logprob, text: fmt(a.logprob) }),
      el("td", { class: "alt-p" }, el("span", { class: "pbar-track" }, bar),
        el("span", { text: `${(Math.exp(a.logprob) * 100).toFixed(1)}%` }))));
  }
  tip.replaceChildren(
    el("div", { class: "tt-token" }, el("span", { class: "tt-index", text: `token ${i}` }),
      el("code", { "data-field": "token", text: shown(t.token) })),
    el("table", { class: "tt-values" },
      row("logprob", t.logprob, "logprob"),
      el("tr", {}, el("th", { text: "probability" }), el("td", { "data-field": "prob",
        text: `${(Math.exp(t.logprob) * 100).toFixed(2)}%` })),
      row("entropy", t.entropy, "entropy", " nats"),
      row("margin", t.margin, "margin", " nats")),
    t.top.length ? el("div", { class: "tt-sub", text: "top alternatives" }) : null,
    t.top.length ? alts : null);
  tip.hidden = false;
  const r = target.getBoundingClientRect();
  const tw = tip.offsetWidth, th = tip.offsetHeight;
  let left = Math.min(Math.max(8, r.left), window.innerWidth - tw - 8);
  let top = r.bottom + 6;
  if (top + th > window.innerHeight - 8) top = Math.max(8, r.top - th - 6);
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

function hideTooltip() {
  $("tooltip").hidden = true;
  for (const n of document.querySelectorAll(".tok.hover")) n.classList.remove("hover");
}

function tokenTarget(ev) {
  const node = ev.target.closest?.(".tok, rect.bar");
  if (!node) return null;
  const article = node.closest("article.msg");
  const conv = current();
  const msg = conv?.messages[Number(article?.dataset.index)];
  if (!msg?.tokens) return null;
  const i = Number(node.dataset.i ?? node.getAttribute("data-i"));
  const span = article.querySelector(`.tok[data-i="${i}"]`);
  return { node, span, msg, i };
}

// -- server panel ------------------------------------------------------------------------------------

let lastPredicted = null;

function metricValue(text, name) {
  const m = text.match(new RegExp(`^${name.replace(/[:.]/g, "\\$&")}(?:\\{[^}]*\\})? ([-+0-9.eE]+|NaN)$`, "m"));
  return m ? Number(m[1]) : null;
}

async function pollServer() {
  try {
    const res = await fetch("health");
    if (res.ok) {
      const h = await res.json();
      $("srv-status").textContent = "ready";
      $("srv-status").className = "ok";
      $("srv-slots").textContent = `${h.slots_processing} / ${h.slots_processing + h.slots_idle}`;
      $("srv-queue").textContent = String(h.requests_waiting);
    } else {
      $("srv-status").textContent = res.status === 503 ? "loading…" : `HTTP ${res.status}`;
      $("srv-status").className = "warn";
    }
    const m = await api("metrics", {}, false);
    if (m.ok) {
      const text = await m.text();
      const hits = metricValue(text, "skippy:prefix_cache_hits_total");
      const queries = metricValue(text, "skippy:prefix_cache_queries_total");
      const cached = metricValue(text, "llamacpp:prompt_tokens_cached_total");
      $("srv-cache").textContent = queries ? `${hits} / ${queries} hits` + (cached != null ? ` · ${cached} tok` : "")
        : "no lookups yet";
      const predicted = metricValue(text, "llamacpp:tokens_predicted_total");
      const now = performance.now();
      if (predicted != null && lastPredicted) {
        const rate = (predicted - lastPredicted.n) / ((now - lastPredicted.t) / 1000);
        $("srv-toks").textContent = rate > 0 ? `${rate.toFixed(1)} tok/s` : "idle";
      }
      if (predicted != null) lastPredicted = { n: predicted, t: now };
    } else {
      $("srv-cache").textContent = $("srv-toks").textContent = { 501: "metrics off", 401: "needs the API key" }[m.status]
        ?? `HTTP ${m.status}`;
      await m.body?.cancel();
    }
  } catch {
    $("srv-status").textContent = "unreachable";
    $("srv-status").className = "warn";
  } finally {
    setTimeout(pollServer, POLL_MS);
  }
}

// -- start -------------------------------------------------------------------------------------------

async function loadModels() {
  const select = $("model");
  try {
    const res = await api("v1/models");
    if (!res.ok) throw new Error(await errorText(res));
    const { data } = await res.json();
    select.replaceChildren(...data.map((m) => el("option", { value: m.id, text: m.id })));
    if (!data.some((m) => m.id === settings.model)) settings.model = data[0]?.id ?? "";
    select.value = settings.model;
    saveSettings();
  } catch (e) {
    select.replaceChildren(el("option", { value: "", text: "(models unavailable)" }));
    if (!sessionStorage.getItem(SS_KEY)) reloadAfterKey = true;
    console.warn("GET /v1/models failed", e);
  }
}

async function loadProps() {
  try {
    const res = await api("props");
    if (res.ok) props = await res.json();
  } catch (e) {
    if (!sessionStorage.getItem(SS_KEY)) reloadAfterKey = true;
    console.warn("GET /props failed", e);
  }
  $("hooks-box").hidden = !props?.hooks;
  if (settings.uncertainty) renderMessages();
}

function bind() {
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("input").value;
    if ((!text.trim() && !attached.length) || busy) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("attach").addEventListener("click", () => $("attach-file").click());
  $("attach-file").addEventListener("change", (ev) => { attachFiles(ev.target.files); ev.target.value = ""; });
  $("input").addEventListener("paste", (ev) => {
    const files = [...(ev.clipboardData?.files || [])].filter((f) => f.type.startsWith("image/"));
    if (files.length) {
      ev.preventDefault();
      attachFiles(files);
    }
  });
  $("stop").addEventListener("click", () => busy?.controller.abort());
  $("notice-close").addEventListener("click", () => notify(""));
  $("new-chat").addEventListener("click", () => {
    if (busy) return;
    newConversation();
    sidebarOpen = false;
    renderAll();
    $("input").focus();
  });
  $("model").addEventListener("change", () => { settings.model = $("model").value; saveSettings(); });
  $("uncertainty").addEventListener("change", () => {
    settings.uncertainty = $("uncertainty").checked;
    saveSettings();
    hideTooltip();
    renderMessages();
  });
  $("toggle-settings").addEventListener("click", () => {
    if (narrow.matches) {
      drawerOpen = !drawerOpen;
      sidebarOpen = false;
    } else {
      settings.settingsOpen = !settings.settingsOpen;
      saveSettings();
    }
    renderDrawer();
  });
  $("toggle-sidebar").addEventListener("click", () => {
    sidebarOpen = !sidebarOpen;
    drawerOpen = false;
    renderDrawer();
  });
  $("close-settings").addEventListener("click", closeDrawer);
  $("drawer-backdrop").addEventListener("click", closeDrawer);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") closeDrawer(); });
  narrow.addEventListener("change", renderDrawer);
  // a reload or a closed tab ends a streaming reply as Stop does: the reply so far is kept, stopped
  window.addEventListener("pagehide", () => {
    leaving = true;
    if (busy) { busy.msg.stopped = true; saveConversations(busy.conv); }
  });
  window.addEventListener("pageshow", () => { leaving = false; });
  window.addEventListener("storage", (ev) => {
    if (ev.key !== LS_CONVERSATIONS && ev.key !== LS_DELETED) return;
    const shown = current();
    conversations = merged();
    if (currentId && !current()) currentId = conversations[0]?.id ?? null; // deleted there
    renderConversations();
    if (current() !== shown) renderAll();
  });
  $("system").addEventListener("input", () => {
    settings.system = $("system").value;
    const conv = current();
    if (conv) { conv.system = settings.system; saveConversations(conv); }
    saveSettings();
  });
  for (const k of ["temperature", "top_p", "max_tokens", "seed", "tool_choice"]) {
    $(k).addEventListener("change", () => { settings[k] = $(k).value; saveSettings(); });
  }
  $("tools").addEventListener("input", () => { settings.tools = $("tools").value; saveSettings(); checkTools(); });
  $("tools-on").addEventListener("change", () => { settings.toolsOn = $("tools-on").checked; saveSettings(); checkTools(); });
  $("hooks-on").addEventListener("change", () => { settings.hooksOn = $("hooks-on").checked; saveSettings(); });

  const box = $("messages");
  box.addEventListener("mouseover", (ev) => {
    const hit = tokenTarget(ev);
    if (!hit) return;
    hideTooltip();
    hit.span?.classList.add("hover");
    showTooltip(hit.node, hit.msg, hit.i);
  });
  box.addEventListener("mouseout", (ev) => {
    if (tokenTarget(ev) && !ev.relatedTarget?.closest?.(".tok, rect.bar")) hideTooltip();
  });
  box.addEventListener("scroll", hideTooltip, { passive: true });
}

function start() {
  if (!current() && conversations.length) currentId = conversations[0].id;
  bind();
  renderAll();
  setBusy(false);
  loadModels();
  loadProps();
  pollServer();
  $("input").focus();
}

start();
