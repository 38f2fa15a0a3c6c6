// Live refresh, the console's only script: every data-refresh seconds, fetch this page again and
// swap in the new contents of each element marked data-live (matched by id). The pages work
// without it; it pauses while a form field has the focus, so nothing typed is lost, and while
// the focus is inside a live region, so a keyboard user's button is not swapped away.
(function () {
  "use strict";
  var seconds = Number(document.body.getAttribute("data-refresh"));
  if (!(seconds > 0)) { return; }
  function busy() {
    var el = document.activeElement;
    return el && (/^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName) || el.closest("[data-live]") !== null);
  }
  function refresh() {
    if (busy() || document.hidden) { return schedule(); }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html", "X-Console-Refresh": "1" } })
      .then(function (response) {
        if (!response.ok || response.redirected) { throw new Error("status " + response.status); }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var next = el.id && fresh.getElementById(el.id);
          if (next) { el.replaceWith(document.importNode(next, true)); }
        });
        var wait = Number(fresh.body.getAttribute("data-refresh"));
        if (wait > 0) { seconds = wait; }
      })
      .catch(function () { /* the next round tries again */ })
      .then(schedule);
  }
  function schedule() { window.setTimeout(refresh, seconds * 1000); }
  schedule();
})();
