// countersign console behaviour. No inline scripts: the Content-Security-
// Policy forbids them. Everything here is progressive: pages work without it.
(function () {
  "use strict";

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  // Every htmx request carries the CSRF token as a header.
  document.addEventListener("htmx:configRequest", function (ev) {
    var t = csrfToken();
    if (t) ev.detail.headers["X-CSRF-Token"] = t;
  });

  // Countdowns: the server's time is the truth. The page states the server
  // time it was rendered at and the expiry; the browser only counts down
  // the difference and never decides anything.
  function tick() {
    document.querySelectorAll("[data-expires-at]").forEach(function (el) {
      var server = Date.parse(el.getAttribute("data-server-now"));
      var expires = Date.parse(el.getAttribute("data-expires-at"));
      var loaded = Number(el.getAttribute("data-loaded") || 0);
      if (!loaded) {
        loaded = Date.now();
        el.setAttribute("data-loaded", String(loaded));
      }
      var left = Math.round((expires - server - (Date.now() - loaded)) / 1000);
      var out = el.querySelector("[data-countdown]") || el;
      if (left <= 0) {
        out.textContent = "expired";
        el.classList.add("is-expired");
      } else {
        var m = Math.floor(left / 60), s = left % 60;
        out.textContent = (m > 0 ? m + " min " : "") + s + " s left";
      }
    });
  }
  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);

  // Forms marked data-once submit once: a second click while the first
  // request is under way is ignored. (The server records one decision
  // anyway; this only spares the reviewer a confusing refusal.)
  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.hasAttribute || !f.hasAttribute("data-once")) return;
    if (f.hasAttribute("data-submitted")) {
      ev.preventDefault();
      return;
    }
    f.setAttribute("data-submitted", "");
    f.querySelectorAll('button[type="submit"]').forEach(function (b) {
      b.setAttribute("aria-disabled", "true");
    });
  });
  // Coming back through the history cache, the forms are usable again.
  window.addEventListener("pageshow", function (ev) {
    if (!ev.persisted) return;
    document.querySelectorAll("form[data-submitted]").forEach(function (f) {
      f.removeAttribute("data-submitted");
      f.querySelectorAll('button[aria-disabled="true"]').forEach(function (b) {
        b.removeAttribute("aria-disabled");
      });
    });
  });

  // Copy buttons for digests and tokens.
  document.addEventListener("click", function (ev) {
    var b = ev.target.closest("[data-copy]");
    if (!b || !navigator.clipboard) return;
    navigator.clipboard.writeText(b.getAttribute("data-copy")).then(function () {
      var old = b.textContent;
      b.textContent = "Copied";
      setTimeout(function () { b.textContent = old; }, 1500);
    });
  });
})();
