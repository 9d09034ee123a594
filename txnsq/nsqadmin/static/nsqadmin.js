/* nsqadmin: live refresh, confirmations and actions. Plain JavaScript, no library.
 * The pages are complete without it; it only refreshes #content in place
 * every data-refresh milliseconds and sends the action buttons' requests. */
(function () {
  "use strict";
  var content = document.getElementById("content");
  var flash = document.getElementById("flash");
  var period = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  var busy = false;
  var refreshed = 0;

  function say(text, bad) {
    if (!flash) { return; }
    flash.textContent = text;
    flash.className = bad ? "bad" : "good";
  }

  function refresh() {
    if (busy || document.hidden) { return Promise.resolve(); }
    busy = true;
    return fetch(window.location.href, {headers: {"Accept": "text/html"}, cache: "no-store"})
      .then(function (response) { return response.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("content");
        if (fresh && content) {
          content.innerHTML = fresh.innerHTML;
          refreshed += 1;
          document.body.setAttribute("data-refreshed", String(refreshed));
        }
      })
      .catch(function () { say("refresh failed: nsqadmin did not answer", true); })
      .then(function () { busy = false; });
  }

  function send(method, url, body) {
    // X-Requested-With marks the request as this script's: nsqadmin refuses
    // a browser's action without it (a cross-site form cannot send it).
    var options = {
      method: method,
      credentials: "same-origin",
      headers: {"Accept": "application/json", "X-Requested-With": "nsqadmin"}
    };
    if (body !== null) {
      options.headers["Content-Type"] = "application/json";
      options.body = body;
    }
    return fetch(url, options).then(function (response) {
      return response.text().then(function (text) {
        var message = "";
        try { message = JSON.parse(text).message || ""; } catch (e) { message = text; }
        if (!response.ok) { throw new Error(response.status + " " + message); }
        return message;
      });
    });
  }

  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target.closest("button.action") : null;
    if (!target) { return; }
    event.preventDefault();
    if (!window.confirm(target.getAttribute("data-confirm") || "Are you sure?")) { return; }
    var method = target.getAttribute("data-method");
    target.disabled = true;
    send(method, target.getAttribute("data-url"), target.getAttribute("data-body"))
      .then(function (message) {
        say(message || "done", !!message);
        if (method === "DELETE" && !target.closest("tr")) {
          var parts = window.location.pathname.split("/");
          parts.pop();
          window.location.assign(parts.join("/") || "/");
          return;
        }
        return refresh();
      })
      .catch(function (error) { say(error.message, true); target.disabled = false; });
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("create")) { return; }
    event.preventDefault();
    var topic = form.elements.topic.value;
    var channel = form.elements.channel.value;
    var what = channel ? "channel " + channel + " of topic " + topic : "topic " + topic;
    if (!window.confirm("Create " + what + "?")) { return; }
    send("POST", form.getAttribute("data-url"), JSON.stringify({topic: topic, channel: channel}))
      .then(function (message) { say(message || "created " + what, !!message); window.location.reload(); })
      .catch(function (error) { say(error.message, true); });
  });

  if (period > 0) { window.setInterval(refresh, period); }
}());
