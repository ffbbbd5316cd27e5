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
    } finally {
      setTimeout(refresh, every);
    }
  }
  setTimeout(refresh, every);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live-url]").forEach(startLive);
});
