// Live regions: every element with data-live-url is re-fetched every data-live-ms
// milliseconds and its HTML replaced when it changed. The server renders the fragment
// with the same template as the page, so this file knows nothing about work units.
"use strict";

function startLive(region) {
  const url = region.dataset.liveUrl;
  const every = Number(region.dataset.liveMs) || 2000;
  const banner = document.querySelector(".live-error");
  let last = region.innerHTML;

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
        region.innerHTML = body;
        last = body;
      }
      if (banner) { banner.hidden = true; }
      region.dataset.liveUpdated = String(Date.now());
    } catch (error) {
      if (banner) {
        banner.textContent = "Live updates failed: " + error.message;
        banner.hidden = false;
      }
    } finally {
      setTimeout(refresh, every);
    }
  }
  setTimeout(refresh, every);
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
