/* kiln dashboard: small progressive enhancements. Every page works without this file. */
(function () {
  "use strict";

  function bindBulk() {
    var form = document.querySelector("form[data-bulk]");
    if (!form) return;
    var all = form.querySelector("[data-select-all]");
    var counter = form.querySelector("[data-selected-count]");
    var buttons = form.querySelectorAll(".bulk-actions button");
    function boxes() { return Array.prototype.slice.call(form.querySelectorAll('input[name="ids"]')); }
    function update() {
      var list = boxes();
      var n = list.filter(function (b) { return b.checked; }).length;
      if (counter) counter.textContent = n ? n + " selected:" : "Tick jobs to act on them:";
      buttons.forEach(function (b) { b.disabled = n === 0; });
      if (all) {
        all.checked = n > 0 && n === list.length;
        all.indeterminate = n > 0 && n < list.length;
      }
    }
    if (all) {
      all.addEventListener("change", function () {
        boxes().forEach(function (b) { b.checked = all.checked; });
        update();
      });
    }
    form.addEventListener("change", update);
    update();
  }

  function bindConfirm() {
    document.addEventListener("click", function (event) {
      var target = event.target.closest ? event.target.closest("[data-confirm]") : null;
      if (target && !window.confirm(target.getAttribute("data-confirm"))) event.preventDefault();
    });
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) t.title = d.toLocaleString();
    });
  }

  function bindRefresh() {
    var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
    var toggle = document.querySelector("[data-refresh-toggle]");
    if (!seconds || !toggle) return;
    var key = "kiln.autorefresh";
    toggle.checked = window.localStorage.getItem(key) !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem(key, toggle.checked ? "on" : "off");
    });
    window.setInterval(function () {
      if (!toggle.checked || document.hidden) return;
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
          var current = document.getElementById("main");
          if (fresh && current) {
            current.replaceWith(fresh);
            localTimes(fresh);
          }
        })
        .catch(function () { /* keep the page as it is; the next tick retries */ });
    }, seconds * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    bindBulk();
    bindConfirm();
    localTimes(document);
    bindRefresh();
  });
})();
