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
        // Tell live parts of the page once, so that they ask the server,
        // whose clock decides, what became of the proposal.
        if (!el.hasAttribute("data-expired-told")) {
          el.setAttribute("data-expired-told", "");
          document.body.dispatchEvent(new CustomEvent("countersign:expired"));
        }
      } else {
        var m = Math.floor(left / 60), s = left % 60;
        out.textContent = (m > 0 ? m + " min " : "") + s + " s left";
      }
    });
  }
  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);

  // Destructive actions ask first: a form with data-confirm submits only
  // when the person confirms its question. (Registered before data-once,
  // so that a cancelled submit does not mark the form as submitted.)
  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.hasAttribute || !f.hasAttribute("data-confirm") || f.hasAttribute("data-submitted")) return;
    if (!window.confirm(f.getAttribute("data-confirm"))) {
      ev.preventDefault();
      ev.stopImmediatePropagation();
    }
  });

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

  // Live refreshes must not take away what a person is doing: text typed
  // into the swapped part and the focus (the same field, or the same row of
  // a list, found by its data-row-id) are carried over to the new content.
  // Two refreshes may follow each other before the first settles: what the
  // first saw is kept until one of them puts it back.
  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (ev) {
    var t = ev.detail.target;
    if (!t || !t.querySelectorAll) return;
    if (!kept) kept = { values: {}, focus: "" };
    t.querySelectorAll("textarea[id], input[id]:not([type=hidden])").forEach(function (el) {
      if (el.value) kept.values[el.id] = el.value;
    });
    var a = document.activeElement;
    if (a && a !== document.body && t.contains(a)) {
      var row = a.closest("[data-row-id]");
      if (a.id) kept.focus = "#" + CSS.escape(a.id);
      else if (row) kept.focus = '[data-row-id="' + CSS.escape(row.getAttribute("data-row-id")) + '"] ' + a.tagName.toLowerCase();
    }
  });
  // Put it back as soon as the new content is in, before it settles.
  document.addEventListener("htmx:afterSwap", function () {
    if (!kept) return;
    var k = kept;
    kept = null;
    Object.keys(k.values).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && !el.value) el.value = k.values[id];
    });
    if (k.focus) {
      var f = document.querySelector(k.focus);
      if (f && document.activeElement !== f) f.focus({ preventScroll: true });
    }
  });

  // The reviewer's zone: until one is stored, the browser's own is the
  // default. A sign-in form carries it (its input[data-browser-zone], also
  // read by the passkey sign-in), so that the first page is drawn in it
  // already. A page drawn without one (a session begun before the
  // script could add it) sends it once, and the pages after it are drawn
  // in it; this one is not drawn again, since a reload could cut short a
  // navigation the reviewer has already begun. (The server keeps a zone the
  // reviewer chose.)
  function browserZone() {
    return (window.Intl && Intl.DateTimeFormat().resolvedOptions().timeZone) || "";
  }
  function fillZones(root) {
    if (!root.querySelectorAll) return;
    root.querySelectorAll("input[data-browser-zone]").forEach(function (el) { el.value = browserZone(); });
  }
  document.addEventListener("DOMContentLoaded", function () { fillZones(document); });
  document.addEventListener("submit", function (ev) { fillZones(ev.target); });
  document.addEventListener("DOMContentLoaded", function () {
    var url = document.body.getAttribute("data-zone-auto");
    var zone = browserZone();
    if (!url || !zone) return;
    var body = new URLSearchParams({ zone: zone, from_browser: "1" });
    fetch(url, { method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRF-Token": csrfToken() } });
  });

  // Every time shows UTC on hover: the datetime attribute is the instant.
  function utcTitles(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (t) {
      if (t.title) return;
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) t.title = d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "").replace(/Z$/, "") + " UTC";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { utcTitles(); });
  document.addEventListener("htmx:afterSettle", function () { utcTitles(); });

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
