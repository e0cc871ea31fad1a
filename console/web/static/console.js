// admitter console: refreshes the parts of a page marked data-live, by fetching the same page
// again and swapping them in. The tables work without it. It pauses while the tab is hidden,
// while focus is inside a live part, and when the reader turns it off.
(function () {
  "use strict";
  var regions = document.querySelectorAll("[data-live]");
  if (!regions.length) return;
  var every = location.pathname === "/console/" ? 2000 : 5000;
  var on = true, busy = false;
  var h1 = document.querySelector("h1");
  var toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "live-toggle";
  toggle.setAttribute("aria-pressed", "true");
  toggle.textContent = "Live updates: on";
  toggle.addEventListener("click", function () {
    on = !on;
    toggle.setAttribute("aria-pressed", on ? "true" : "false");
    toggle.textContent = "Live updates: " + (on ? "on" : "off");
  });
  if (h1) h1.appendChild(toggle);
  function refresh() {
    if (!on || busy || document.hidden) return;
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Console-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          if (el.contains(document.activeElement)) return; // do not pull the rug from a reader
          var fresh = doc.getElementById(el.id);
          if (fresh) el.replaceWith(document.importNode(fresh, true));
        });
      })
      .catch(function () {})
      .finally(function () { busy = false; });
  }
  setInterval(refresh, every);
})();
