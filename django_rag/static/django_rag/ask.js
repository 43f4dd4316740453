/* Streams the answer of the ask form into the page (progressive enhancement: without this
   script the form posts and the server answers with the whole page). Reads the NDJSON events of
   django_rag:ask_json: sources, delta..., then done (with the server-rendered answer) or error. */
(function () {
  "use strict";
  var form = document.getElementById("rag-ask-form");
  if (!form || !window.fetch || !window.TextDecoder || !window.FormData) { return; }
  var answer = document.getElementById("rag-answer");
  var status = document.getElementById("rag-status");
  var errorSlot = document.getElementById("rag-error");

  function showError(message) {
    errorSlot.innerHTML = "";
    var box = document.createElement("div");
    box.className = "rag-error";
    box.setAttribute("role", "alert");
    var p = document.createElement("p");
    p.textContent = message;
    box.appendChild(p);
    errorSlot.appendChild(box);
    status.textContent = "";
  }

  function handle(event, live) {
    if (event.type === "sources") {
      status.textContent = event.sources.length ? form.dataset.writing : "";
    } else if (event.type === "delta") {
      live.textContent += event.text;
    } else if (event.type === "done") {
      answer.innerHTML = event.html;
      answer.setAttribute("aria-busy", "false");
      status.textContent = "";
    } else if (event.type === "error") {
      answer.setAttribute("aria-busy", "false");
      showError(event.message);
    }
  }

  form.addEventListener("submit", function (submitEvent) {
    submitEvent.preventDefault();
    var data = new FormData(form);
    data.append("stream", "1");
    errorSlot.innerHTML = "";
    status.textContent = form.dataset.working;
    answer.innerHTML = "";
    answer.setAttribute("aria-busy", "true");
    var live = document.createElement("p");
    live.className = "rag-answer-live";
    answer.appendChild(live);
    fetch(form.dataset.streamUrl, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { "X-CSRFToken": data.get("csrfmiddlewaretoken"), "Accept": "application/x-ndjson" }
    }).then(function (response) {
      if (!response.ok) {
        return response.json().then(function (body) { showError(body.error || form.dataset.failed); },
                                    function () { showError(form.dataset.failed); });
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          buffer += decoder.decode(chunk.value || new Uint8Array(), { stream: !chunk.done });
          var lines = buffer.split("\n");
          buffer = lines.pop();
          lines.forEach(function (line) { if (line.trim()) { handle(JSON.parse(line), live); } });
          if (!chunk.done) { return pump(); }
          if (buffer.trim()) { handle(JSON.parse(buffer), live); }
        });
      }
      return pump();
    }).catch(function () {
      showError(form.dataset.failed);
    });
  });
})();
