// Squadron's query UI: fills the page shell from /ui/api, twice a second
// while there is something running. No framework, nothing fetched from
// elsewhere.
"use strict";

const page = document.body.dataset.page;
const id = document.body.dataset.id;
const POLL_MS = 500;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function cell(text, cls) {
  return el("td", cls ? { class: cls } : {}, text ?? "");
}

async function api(path) {
  const response = await fetch("/ui/api/" + path, { credentials: "same-origin" });
  if (!response.ok) throw new Error(response.status + " " + (await response.text()));
  return response.json();
}

function when(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 23);
}

async function showQueries() {
  const rows = await api("queries");
  const body = document.querySelector("#queries tbody");
  body.replaceChildren(
    ...rows.map((q) => {
      const tr = el("tr", { "data-id": q.id });
      const link = el("a", { href: "/ui/query/" + q.id }, q.sql || "(no SQL)");
      const sql = el("td", { class: "sql" });
      sql.append(link);
      const tasks = q.tasks_total == null ? "" : q.tasks_done + "/" + q.tasks_total;
      tr.append(
        cell(q.state, "state state-" + q.state),
        cell(q.user),
        cell(when(q.started_ms)),
        cell(q.elapsed_ms + " ms", "num"),
        cell(q.stages, "num"),
        cell(tasks, "num tasks"),
        cell(q.rows, "num rows"),
        sql,
        cell(q.error, "error"),
      );
      return tr;
    }),
  );
  return true;
}

// Stages in columns by depth (tables first), each a box with its tasks
// done out of all and a progress bar; an arrow from each input.
function drawStages(svg, stages, tasks) {
  const level = {};
  const depth = (s) =>
    level[s.id] ??= s.inputs.length ? 1 + Math.max(...s.inputs.map((i) => depth(stages[i]))) : 0;
  stages.forEach(depth);
  const columns = {};
  const pos = {};
  const W = 190, H = 64, GAP_X = 60, GAP_Y = 20;
  for (const s of stages) {
    const col = level[s.id];
    const row = (columns[col] = (columns[col] ?? -1) + 1);
    pos[s.id] = { x: 10 + col * (W + GAP_X), y: 10 + row * (H + GAP_Y) };
  }
  svg.replaceChildren();
  const width = Math.max(...Object.values(pos).map((p) => p.x)) + W + 10;
  const height = Math.max(...Object.values(pos).map((p) => p.y)) + H + 10;
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  for (const s of stages) {
    for (const input of s.inputs) {
      const a = pos[input], b = pos[s.id];
      svg.append(el("svg:line", { x1: a.x + W, y1: a.y + H / 2, x2: b.x, y2: b.y + H / 2, stroke: "#888" }));
    }
  }
  for (const s of stages) {
    const done = new Set(tasks.filter((t) => t.stage === s.id && t.state === "succeeded").map((t) => t.task)).size;
    const running = tasks.filter((t) => t.stage === s.id && t.state === "running").length;
    const p = pos[s.id];
    const g = el("svg:g", { class: "stage", "data-stage": s.id, "data-done": done, "data-tasks": s.tasks, transform: `translate(${p.x},${p.y})` });
    g.append(
      el("svg:rect", { width: W, height: H, rx: 6, fill: "#f4f7fb", stroke: "#567" }),
      el("svg:text", { x: 8, y: 18 }, `Stage ${s.id} → ${s.output}`),
      el("svg:text", { x: 8, y: 36, class: "progress" }, `${done}/${s.tasks} tasks done, ${running} running`),
      el("svg:rect", { x: 8, y: 46, width: W - 16, height: 8, fill: "#ddd" }),
      el("svg:rect", { x: 8, y: 46, width: ((W - 16) * done) / Math.max(1, s.tasks), height: 8, fill: "#3a7" }),
    );
    svg.append(g);
  }
}

// One lane per worker, one bar per task attempt from its start to its
// end (or now).
function drawTimeline(svg, tasks) {
  svg.replaceChildren();
  if (!tasks.length) return;
  const workers = [...new Set(tasks.map((t) => t.worker))].sort();
  const now = Date.now();
  const start = Math.min(...tasks.map((t) => t.started_ms));
  const end = Math.max(...tasks.map((t) => t.ended_ms ?? now));
  const LEFT = 210, WIDTH = 700, LANE = 18;
  const lanes = {};
  const rows = workers.map(() => 0);
  svg.setAttribute("width", LEFT + WIDTH + 20);
  const scale = (ms) => LEFT + (WIDTH * (ms - start)) / Math.max(1, end - start);
  const bars = [];
  for (const t of tasks) {
    const w = workers.indexOf(t.worker);
    const slot = (lanes[t.worker] = (lanes[t.worker] ?? -1) + 1);
    rows[w] = Math.max(rows[w], slot + 1);
    bars.push({ t, w, slot });
  }
  const top = [];
  let y = 4;
  workers.forEach((w, i) => { top[i] = y; y += rows[i] * LANE + 10; });
  svg.setAttribute("height", y);
  workers.forEach((w, i) => svg.append(el("svg:text", { x: 4, y: top[i] + 13 }, w)));
  for (const { t, w, slot } of bars) {
    const x = scale(t.started_ms);
    const bar = el("svg:rect", {
      class: "task state-" + t.state, x, y: top[w] + slot * LANE, height: LANE - 4,
      width: Math.max(2, scale(t.ended_ms ?? now) - x),
      fill: t.state === "succeeded" ? "#3a7" : t.state === "running" ? "#59c" : "#c55",
    });
    bar.append(el("svg:title", {}, `stage ${t.stage} task ${t.task} attempt ${t.attempt}: ${t.state}`));
    svg.append(bar);
  }
}

async function showQuery() {
  const { query, stages, tasks } = await api("query/" + encodeURIComponent(id));
  document.getElementById("query-id").textContent = query.id;
  const state = document.getElementById("state");
  state.textContent = query.state;
  state.className = "state-" + query.state;
  document.getElementById("summary").textContent =
    `${query.elapsed_ms} ms, ${query.rows} rows, ${query.bytes} bytes sent, ${query.stages} stages`;
  document.getElementById("sql").textContent = query.sql;
  const error = document.getElementById("error");
  error.hidden = !query.error;
  error.textContent = query.error ?? "";
  drawStages(document.getElementById("stages"), stages, tasks);
  drawTimeline(document.getElementById("timeline"), tasks);
  document.querySelector("#tasks tbody").replaceChildren(
    ...tasks.map((t) => {
      const tr = el("tr", { "data-stage": t.stage, "data-task": t.task, "data-attempt": t.attempt });
      tr.append(
        cell(t.stage, "num"), cell(t.task, "num"), cell(t.attempt, "num"), cell(t.worker),
        cell(t.state, "state state-" + t.state),
        cell((t.ended_ms ?? Date.now()) - t.started_ms, "num"),
        cell(t.output_rows, "num output_rows"), cell(t.output_bytes, "num output_bytes"),
        cell(t.input_rows, "num input_rows"), cell(t.input_bytes, "num input_bytes"),
        cell(t.compute_us, "num compute_us"), cell(t.spilled_bytes, "num spilled_bytes"),
        cell(t.peak_memory_bytes, "num peak_memory_bytes"), cell(t.error, "error"),
      );
      return tr;
    }),
  );
  document.getElementById("plans").replaceChildren(
    ...stages.slice().reverse().map((s) => el("pre", { "data-stage": s.id }, `Stage ${s.id}\n${s.plan}`)),
  );
  return query.state === "running";
}

async function showWorkers() {
  const rows = await api("workers");
  document.querySelector("#workers tbody").replaceChildren(
    ...rows.map((w) => {
      const tr = el("tr", { "data-url": w.url });
      tr.append(cell(w.url), cell(w.state, "state"), cell(w.running_tasks, "num"), cell(w.last_seen));
      return tr;
    }),
  );
  return true;
}

const show = { queries: showQueries, query: showQuery, workers: showWorkers }[page];

async function poll() {
  let again = true;
  try {
    again = await show();
  } catch (e) {
    document.querySelector("main").prepend(el("p", { class: "state-error" }, String(e)));
    again = false;
  }
  document.body.dataset.updated = Date.now();
  if (again) setTimeout(poll, POLL_MS);
}

if (show) poll();
