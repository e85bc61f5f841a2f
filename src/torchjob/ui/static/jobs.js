// The job list: ages in words, and the whole table refreshed from /api/jobs every 2 s.
"use strict";

function age(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) return Math.floor(s / size) + unit;
  }
  return s + "s";
}

function cell(row, content) {
  const td = document.createElement("td");
  if (content instanceof Node) td.appendChild(content); else td.textContent = content;
  row.appendChild(td);
  return td;
}

function render(jobs) {
  const body = document.createElement("tbody");
  for (const job of jobs) {
    const row = document.createElement("tr");
    row.dataset.name = job.name;
    const link = document.createElement("a");
    link.href = "/jobs/" + encodeURIComponent(job.name);
    link.textContent = job.name;
    cell(row, link);
    const state = document.createElement("span");
    state.className = "state " + job.state.toLowerCase();
    state.textContent = job.state;
    cell(row, state);
    if (job.progress === null) {
      cell(row, "–");
    } else {
      const bar = document.createElement("progress");
      bar.max = 100;
      bar.value = job.progress;
      const td = cell(row, bar);
      td.appendChild(document.createTextNode(" " + job.progress + "%"));
    }
    cell(row, age(job.age_seconds)).className = "age";
    cell(row, String(job.attempt));
    cell(row, String(job.restarts));
    cell(row, job.message).className = "message";
    body.appendChild(row);
  }
  const table = document.getElementById("jobs");
  table.replaceChild(body, table.tBodies[0]);
  document.getElementById("count").textContent = jobs.length + " job(s)";
}

for (const td of document.querySelectorAll("td.age")) td.textContent = age(Number(td.dataset.seconds));
setInterval(async () => {
  const answer = await fetch("/api/jobs");
  if (answer.ok) render(await answer.json());
}, 2000);
