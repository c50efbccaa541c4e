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

  function clock(d) { return d.toISOString().substring(11, 19) + " UTC"; }

  function ageText(seconds) {  // as the server's age filter writes it
    if (seconds < 60) return seconds.toFixed(1) + "s";
    if (seconds < 3600) return Math.round(seconds / 60) + "m";
    if (seconds < 86400) return (seconds / 3600).toFixed(1) + "h";
    return (seconds / 86400).toFixed(1) + "d";
  }

  // every count shows its age; it keeps growing while the page is not refreshed
  function tickAges() {
    var now = Date.now();
    document.querySelectorAll(".as-of[data-age]").forEach(function (el) {
      if (!el.hasAttribute("data-seen")) el.setAttribute("data-seen", String(now));
      var age = parseFloat(el.getAttribute("data-age")) +
        (now - parseInt(el.getAttribute("data-seen"), 10)) / 1000;
      var out = el.querySelector(".age");
      if (out && isFinite(age)) out.textContent = ageText(age);
    });
  }

  var lastGood = new Date();

  function failed(reason) {
    var banner = document.getElementById("refresh-failed");
    if (!banner) return;
    banner.querySelector("[data-reason]").textContent =
      "Refresh failed at " + clock(new Date()) + ": " + reason + ".";
    banner.querySelector("[data-since]").textContent = clock(lastGood);
    banner.hidden = false;
    document.body.classList.add("stale");
  }

  function recovered() {
    var banner = document.getElementById("refresh-failed");
    if (banner) banner.hidden = true;
    document.body.classList.remove("stale");
    lastGood = new Date();
  }

  function why(status) {
    if (status === 401 || status === 403) return "you are no longer signed in (HTTP " + status + "): reload the page and sign in";
    if (status === 503) return "the job store did not answer (HTTP 503)";
    return "the dashboard answered HTTP " + status;
  }

  function busy() {  // never throw away what the operator is doing
    var active = document.activeElement;
    if (active && active.closest && active.closest("form") && active.matches("input, select, textarea")) return true;
    return document.querySelector('input[name="ids"]:checked') !== null;
  }

  function refreshOnce() {
    return fetch(window.location.href, { credentials: "same-origin", cache: "no-store", redirect: "manual" })
      .then(function (r) {
        if (!r.ok) { failed(why(r.status || 0)); return null; }
        return r.text();
      })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        var current = document.getElementById("main");
        if (!fresh || !current) { failed("the answer was not a dashboard page"); return; }
        current.replaceWith(fresh);
        localTimes(fresh);
        recovered();
        tickAges();
      })
      .catch(function () { failed("the dashboard did not answer (network error)"); });
  }

  function bindRefresh() {
    var seconds = parseFloat(document.body.getAttribute("data-refresh") || "0");
    var toggle = document.querySelector("[data-refresh-toggle]");
    if (!seconds || !toggle) return;
    var key = "kiln.autorefresh";
    toggle.checked = window.localStorage.getItem(key) !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem(key, toggle.checked ? "on" : "off");
    });
    window.setInterval(function () {
      if (!toggle.checked || document.hidden || busy()) return;
      refreshOnce();
    }, seconds * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    bindBulk();
    bindConfirm();
    localTimes(document);
    bindRefresh();
    tickAges();
    window.setInterval(tickAges, 1000);
  });
})();
