// Live regions: every element with data-live-url is re-fetched and its HTML replaced when
// it changed. The server renders the fragment with the same template as the page, so this
// file knows nothing about work units.
//
// When the element also has data-watch-url (the push API's Server-Sent Events, docs/watch.md)
// and the browser has EventSource, the region is re-fetched when a change is pushed (at
// most one fetch per MIN_GAP_MS) instead of every data-live-ms, and every QUIET_MS
// regardless: the durations a page shows (runtime, time in state) tick without any change. data-watch-unit narrows the changes that count to one work unit's. While
// the stream is down (EventSource reconnects by itself, resuming from Last-Event-ID), the
// region polls every data-live-ms as it always did.
"use strict";

const MIN_GAP_MS = 300;
const QUIET_MS = 10000;
const PUSHED = ["state_change", "message", "experiment_change"];

function concerns(unit, kind, data) {
  if (!unit) { return true; }
  try {
    const event = JSON.parse(data);
    if (kind === "state_change") { return event.stateChange.workUnit === unit; }
    if (kind === "message") { return event.message.name.startsWith(unit + "/"); }
  } catch (_) { return true; /* unreadable: refresh to be safe */ }
  return true;
}

function startLive(region) {
  const url = region.dataset.liveUrl;
  const every = Number(region.dataset.liveMs) || 2000;
  const banner = document.querySelector(".live-error");
  let last = region.innerHTML;
  let pushed = false;
  let timer = null;
  let lastFetch = Date.now();

  async function refresh() {
    try {
      const response = await fetch(url, { headers: { Accept: "text/html" }, cache: "no-store" });
      const body = await response.text();
      if (!response.ok) {
        let message = body;
        try { message = JSON.parse(body).error.message; } catch (_) { /* not JSON */ }
        throw new Error(message);
      }
      if (body !== last) {
        // Ticked rows stay ticked: the selection a Stop / Restart acts on survives a poll.
        const ticked = new Set(Array.from(region.querySelectorAll("input[type=checkbox]:checked"), (box) => box.value));
        region.innerHTML = body;
        region.querySelectorAll("input[type=checkbox]").forEach((box) => { box.checked = ticked.has(box.value); });
        last = body;
      }
      if (banner) { banner.hidden = true; }
      region.dataset.liveUpdated = String(Date.now());
    } catch (error) {
      if (banner) {
        banner.textContent = "Live updates failed: " + error.message;
        banner.hidden = false;
      }
    }
  }

  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(tick, Math.max(0, delay));
  }

  async function tick() {
    timer = null;
    lastFetch = Date.now();
    await refresh();
    if (timer === null) { schedule(pushed ? QUIET_MS : every); }
  }

  function changed() { schedule(lastFetch + MIN_GAP_MS - Date.now()); }

  if (region.dataset.watchUrl && window.EventSource) {
    const unit = region.dataset.watchUnit || "";
    const source = new EventSource(region.dataset.watchUrl);
    source.addEventListener("sync", () => {
      if (!pushed) {
        // The stream is open: what changed before it opened is read once, then only news.
        pushed = true;
        region.dataset.liveMode = "push";
        changed();
      }
    });
    PUSHED.forEach((kind) => source.addEventListener(kind, (event) => {
      if (concerns(unit, kind, event.data)) { changed(); }
    }));
    source.addEventListener("error", () => {
      if (pushed) {
        pushed = false;
        region.dataset.liveMode = "poll";
        schedule(every);
      }
    });
  }
  region.dataset.liveMode = "poll";
  schedule(every);
}

// Live tail: a button with data-follow-url streams that text/plain answer into the element
// named by data-follow-target, replacing what the page showed (the stream starts with the
// kept part). The server already shows control characters as symbols; the text goes in
// as textContent, so nothing in a log is ever parsed as HTML.
function startFollow(button) {
  const target = document.getElementById(button.dataset.followTarget);
  const status = button.parentElement.querySelector(".follow-state");
  let controller = null;

  function say(text) { if (status) { status.textContent = text; } }

  async function follow() {
    controller = new AbortController();
    button.textContent = "Stop tail";
    say("following…");
    target.textContent = "";
    const decoder = new TextDecoder();
    try {
      const response = await fetch(button.dataset.followUrl,
        { signal: controller.signal, cache: "no-store" });
      if (!response.ok) { throw new Error(await response.text()); }
      const reader = response.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) { break; }
        const atEnd = target.scrollTop + target.clientHeight >= target.scrollHeight - 4;
        target.append(decoder.decode(value, { stream: true }));
        if (atEnd) { target.scrollTop = target.scrollHeight; }
        target.dataset.followUpdated = String(Date.now());
      }
      say("ended: the execution is over");
    } catch (error) {
      say(error.name === "AbortError" ? "stopped" : "tail failed: " + error.message);
    } finally {
      controller = null;
      button.textContent = "Live tail";
      target.dataset.followEnded = "true";
    }
  }

  button.addEventListener("click", () => {
    if (controller) { controller.abort(); } else { follow(); }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live-url]").forEach(startLive);
  document.querySelectorAll("[data-follow-url]").forEach(startFollow);
});
