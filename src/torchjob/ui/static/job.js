// One job: its header and attempts timeline (every second), per-rank charts (every 2 s), a replica's log
// (following, every second). Everything comes from the JSON API the page was served with.
"use strict";

const JOB = window.TORCHJOB;
const api = "/api/jobs/" + encodeURIComponent(JOB.name);
const COLORS = {succeeded: "#2e7d32", failed: "#c62828", running: "#1565c0"};
const LAYOUT = {margin: {l: 60, r: 20, t: 30, b: 40}, font: {size: 12}, showlegend: true};

function timeline(spans) {
  const bars = spans.map((s) => ({
    type: "bar", orientation: "h", name: "attempt " + s.attempt,
    y: ["attempt " + s.attempt], base: [s.start], x: [new Date(s.end) - new Date(s.start)],
    marker: {color: COLORS[s.kind]}, hovertext: [s.outcome || s.kind], hoverinfo: "text",
    text: [s.cause || s.kind], textposition: "inside", insidetextanchor: "start", textfont: {color: "#fff", size: 12},
  }));
  const repairs = spans.filter((s) => s.repaired).map((s) => ({
    type: "scatter", mode: "markers", name: "repaired in place", y: ["attempt " + s.attempt], x: [s.repaired],
    marker: {symbol: "diamond", size: 12, color: "#f9a825"}, hovertext: ["last repair"], hoverinfo: "text",
  }));
  Plotly.react("timeline", [...bars, ...repairs], {
    ...LAYOUT, barmode: "overlay", xaxis: {type: "date"}, yaxis: {autorange: "reversed"}, height: 80 + 40 * spans.length,
  }, {displayModeBar: false});
}

function header(job) {
  const state = document.getElementById("state");
  state.textContent = job.state;
  state.className = "state " + job.state.toLowerCase();
  document.getElementById("counts").textContent =
    `attempt ${job.attempt} · ${job.restarts} restart(s) · ${job.repairs} repair(s)` +
    (job.membership_changes ? ` · ${job.membership_changes} membership change(s)` : "");
  const progress = document.getElementById("progress");
  progress.textContent = "";
  if (job.progress !== null) {
    const bar = document.createElement("progress");
    bar.max = 100;
    bar.value = job.progress;
    progress.appendChild(bar);
    const left = job.remaining_seconds === null ? "" : ` · ~${job.remaining_seconds}s left`;
    progress.appendChild(document.createTextNode(` ${job.progress}%${left}`));
  }
  document.getElementById("message").textContent = job.message;
}

function curves(series, field, title) {
  const traces = Object.entries(series).map(([name, s]) => ({
    type: "scatter", mode: "lines+markers", name: name, x: s.step, y: s[field], marker: {size: 4},
  }));
  Plotly.react(field === "loss" ? "loss" : "throughput", traces, {
    ...LAYOUT, title: {text: title}, xaxis: {title: {text: "step"}}, height: 320,
  }, {displayModeBar: false});
}

async function poll(url, apply) {
  try {
    const answer = await fetch(url);
    if (answer.ok) apply(await answer.json());
  } catch (err) { /* the server is restarting or gone: try again at the next tick */ }
}

function refreshJob() {
  poll(api, (job) => { header(job); timeline(job.timeline); });
}

function refreshCharts() {
  poll(api + "/metrics", (series) => {
    curves(series, "loss", "loss per rank");
    curves(series, "samples_per_second", "samples/s per rank");
  });
}

let followed = null;
let offset = 0;
function follow(replica) {
  followed = replica;
  offset = 0;
  document.getElementById("log").textContent = "";
  for (const b of document.querySelectorAll("button.replica")) b.classList.toggle("chosen", b.dataset.replica === replica);
}

function refreshLog() {
  if (followed === null) return;
  const asked = followed;
  poll(`${api}/logs?replica=${encodeURIComponent(asked)}&offset=${offset}`, (chunk) => {
    if (asked !== followed) return;
    offset = chunk.offset;
    if (!chunk.text) return;
    const log = document.getElementById("log");
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(document.createTextNode(chunk.text));
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
}

for (const b of document.querySelectorAll("button.replica")) b.addEventListener("click", () => follow(b.dataset.replica));
const first = document.querySelector("button.replica");
if (first) follow(first.dataset.replica);
const remove = document.getElementById("delete");
if (remove) {
  remove.addEventListener("click", async () => {
    const token = window.prompt("Token printed by torchjob ui --allow-actions");
    if (!token) return;
    const answer = await fetch(api + "/delete", {method: "POST", headers: {Authorization: "Bearer " + token}});
    if (answer.ok) window.location = "/"; else window.alert((await answer.json()).error);
  });
}

refreshJob();
setInterval(refreshJob, 1000);
if (JOB.local) { refreshCharts(); setInterval(refreshCharts, 2000); }
refreshLog();
setInterval(refreshLog, 1000);
