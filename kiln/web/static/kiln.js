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

  // times: UTC or the browser's local time, the operator's choice kept per browser;
  // a <time class="rel"> reads relative ("3 min ago") with the absolute time on hover
  var ZONE_KEY = "kiln.tz";

  function zone() { return window.localStorage.getItem(ZONE_KEY) === "local" ? "local" : "utc"; }

  var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function absolute(d) {
    if (zone() === "utc") return d.toISOString().substring(0, 19).replace("T", " ") + " UTC";
    var offset = -d.getTimezoneOffset();
    var sign = offset < 0 ? "-" : "+";
    offset = Math.abs(offset);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) +
      " UTC" + sign + pad(Math.floor(offset / 60)) + ":" + pad(offset % 60);
  }

  function clock(d) {
    if (zone() === "utc") return d.toISOString().substring(11, 19) + " UTC";
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function relative(seconds) {  // seconds before now; negative: in the future
    var ahead = seconds < 0, s = Math.abs(seconds), text;
    if (s < 5) return "just now";
    if (s < 60) text = Math.floor(s) + " s";
    else if (s < 3600) text = Math.floor(s / 60) + " min";
    else if (s < 86400) text = Math.floor(s / 3600) + " h";
    else text = Math.floor(s / 86400) + " d";
    return ahead ? "in " + text : text + " ago";
  }

  function localTimes(root) {
    var now = Date.now();
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      var text = absolute(d), title = null;
      if (t.classList.contains("rel")) {
        text = relative((now - d.getTime()) / 1000);
        title = absolute(d);
      } else if (t.closest(".as-of")) {
        text = clock(d);
        title = absolute(d);
      } else if (t.classList.contains("tick")) {  // a chart's time axis: hours and minutes
        text = clock(d).substring(0, 5);
        if (t.classList.contains("dated")) text = DAYS[zone() === "utc" ? d.getUTCDay() : d.getDay()] + " " + text;
        title = absolute(d);
      }
      // written only when it changed, so a selection around it survives
      if (t.textContent !== text) t.textContent = text;
      if (title !== null && t.title !== title) t.title = title;
    });
  }

  function bindZone() {
    var select = document.querySelector("[data-time-zone]");
    if (!select) return;
    select.value = zone();
    select.addEventListener("change", function () {
      window.localStorage.setItem(ZONE_KEY, select.value);
      localTimes(document);
    });
  }

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
    var selection = window.getSelection ? window.getSelection() : null;
    if (selection && !selection.isCollapsed && selection.toString().length) return true;  // copying
    return document.querySelector('input[name="ids"]:checked') !== null;
  }

  // what the operator opened or closed stays so across a refresh: <details> by id
  function detailsState(root) {
    var state = {};
    root.querySelectorAll("details[id]").forEach(function (d) { state[d.id] = d.open; });
    return state;
  }

  function restoreDetails(root, state) {
    root.querySelectorAll("details[id]").forEach(function (d) {
      if (Object.prototype.hasOwnProperty.call(state, d.id)) d.open = state[d.id];
    });
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
        if (busy()) return;  // the operator began something while the answer came
        restoreDetails(fresh, detailsState(current));
        current.replaceWith(fresh);
        localTimes(fresh);
        recovered();
        tickAges();
      })
      .catch(function () { failed("the dashboard did not answer (network error)"); });
  }

  // the interval is the operator's choice (off, 2, 5, 15, 60 s), kept per browser
  var REFRESH_KEY = "kiln.refresh";

  function bindRefresh() {
    var seconds = parseFloat(document.body.getAttribute("data-refresh") || "0");
    var select = document.querySelector("[data-refresh-every]");
    if (!seconds || !select) return;
    var stored = window.localStorage.getItem(REFRESH_KEY);
    if (stored === null && window.localStorage.getItem("kiln.autorefresh") === "off") stored = "off";
    if (stored !== null && select.querySelector('option[value="' + stored + '"]')) select.value = stored;
    select.addEventListener("change", function () {
      window.localStorage.setItem(REFRESH_KEY, select.value);
      schedule();
    });
    var timer = null;
    function schedule() {
      if (timer !== null) window.clearTimeout(timer);
      timer = null;
      var every = parseFloat(select.value);
      if (!(every > 0)) return;  // off
      timer = window.setTimeout(function () {
        var done = (document.hidden || busy()) ? Promise.resolve() : refreshOnce();
        done.then(schedule, schedule);
      }, every * 1000);
    }
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    bindBulk();
    bindConfirm();
    bindZone();
    localTimes(document);
    bindRefresh();
    tickAges();
    window.setInterval(function () { tickAges(); localTimes(document); }, 1000);
  });
})();
