// The cockpit page: one WebSocket to the server (which steps the simulator), a top-down view
// drawn at the display's rate by interpolating between the last two states, the keyboard and
// touch controls, and the spacetime panel (./spacetime.js, when present).
//
// window.cockpit exposes what the page saw (states, results, errors, drawn frames, input
// latencies) to tests and to bench/play.py.

const SIDES = ["red", "blue"];
const COLORS = { red: "#e5484d", blue: "#3e8ef7" };
const THROTTLES = [0, 0.5, 1];
// Keys of each seat, as in the original game; a viewer flying one seat flies it with either set.
const KEYS = {
  red: { left: ["a", "A"], right: ["d", "D"], faster: ["w", "W"], slower: ["s", "S"], fire: ["t", "T"] },
  blue: { left: ["ArrowLeft"], right: ["ArrowRight"], faster: ["ArrowUp"], slower: ["ArrowDown"], fire: ["="] },
};

const page = {
  frames: 0, states: 0, latencies: [], results: [], errors: [], held: [], hello: null, seatEvents: [],
  last: null, prev: null, connected: false,
};
window.cockpit = page;

const $ = (id) => document.getElementById(id);
const canvas = $("topdown");
const ctx = canvas.getContext("2d");
const params = new URLSearchParams(location.search);
let ws = null;
let seq = 0;
const sentAt = new Map();
const controls = {
  red: { left: false, right: false, throttle: 1, fire: false },
  blue: { left: false, right: false, throttle: 1, fire: false },
};
const trails = new Map();
let camera = null;
let spacetimeView = null;
let replayPanel = null; // ./replay.js: a recorded fight on a timeline

// ---------------------------------------------------------------- connection

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(`${proto}//${location.host}/ws`);
  page.socket = ws;
  ws.onopen = () => {
    page.connected = true;
    const wanted = params.get("seat") || "auto";
    const seat = { both: "auto", watch: "none" }[wanted] || wanted;
    send({ type: "take_seat", seat });
  };
  ws.onmessage = (event) => receive(JSON.parse(event.data));
  ws.onclose = () => {
    page.connected = false;
    showMessage("error: the connection to the server is closed; reload the page to reconnect");
  };
}

function send(message) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
}

function receive(msg) {
  if (replayPanel && replayPanel.receive(msg)) return;
  if (msg.type === "state") onState(msg);
  else if (msg.type === "result") onResult(msg);
  else if (msg.type === "error") showMessage(msg.message);
  else if (msg.type === "hello") onHello(msg);
  else if (msg.type === "seats") onSeats(msg.held);
}

function showMessage(text) {
  page.errors.push(text);
  console.log(text);
  const box = $("message");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(showMessage.timer);
  showMessage.timer = setTimeout(() => { box.hidden = true; }, 8000);
}

function onHello(msg) {
  page.hello = msg;
  $("red-spec").value = msg.lineup.red;
  $("blue-spec").value = msg.lineup.blue;
  $("scenario").replaceChildren(...msg.scenarios.map((name) => new Option(name, name, false, name === msg.lineup.scenario)));
  $("agent-list").replaceChildren(...msg.agents.map((name) => new Option(name)));
  if (Array.isArray(msg.held)) onSeats(msg.held);
}

function onSeats(held) {
  page.held = held;
  const state = page.last;
  $("seats-line").textContent = held.length ? `you fly ${held.join(" and ")}` : "watching";
  if (state) updateSeatsLine(state);
}

function updateSeatsLine(state) {
  const who = SIDES.map((s) => `${s}: ${state.seats[s].spec}`).join(" · ");
  $("seats-line").textContent = `${who} — ${page.held.length ? `you fly ${page.held.join(" and ")}` : "watching"}`;
}

function onState(state) {
  state.at = performance.now();
  page.prev = page.last;
  page.last = state;
  page.states += 1;
  // Input latency: the first state whose echoed sequence number covers an input sent.
  for (const side of page.held) {
    const echoed = state.seats[side] && state.seats[side].input_seq;
    for (const [n, t] of sentAt) {
      if (n <= echoed) {
        page.latencies.push(state.at - t);
        sentAt.delete(n);
      }
    }
  }
  if (page.prev && page.prev.round !== state.round) {
    trails.clear();
    $("result").hidden = true;
  }
  const s = state.score;
  $("score").textContent = `red ${s.red} · draws ${s.draws} · blue ${s.blue}`;
  $("clock").textContent = `t ${state.t.toFixed(1)} s${state.paused ? " (paused)" : ""}${state.time_scale !== 1 ? ` ×${state.time_scale}` : ""}`;
  $("pause").textContent = state.paused ? "resume" : "pause";
  updateSeatsLine(state);
  drawHud(state);
  for (const event of state.events) logEvent(event);
  if (spacetimeView && state.spacetime !== undefined) spacetimeView.update(state.spacetime);
}

function onResult(msg) {
  page.results.push(msg);
  const box = $("result");
  const reason = msg.reason.replace(/_/g, " ");
  box.textContent = msg.winner === "draw" ? `Draw — ${reason}` : `${msg.winner === "red" ? "Red" : "Blue"} wins — ${reason}`;
  box.className = msg.winner;
  box.dataset.winner = msg.winner;
  box.hidden = false;
}

function drawHud(state) {
  const hud = state.hud || {};
  const lines = [];
  for (const f of state.fighters) {
    const mark = page.held.includes(f.side) ? "▸" : " ";
    lines.push(`${mark}${f.side.padEnd(5)} ${f.alive ? `${f.speed.toFixed(0).padStart(4)} m/s` : "  down  "}  missiles ${f.missiles_left}${f.fire_ready ? "  ready" : ""}`);
  }
  if (typeof hud.range_m === "number") {
    // The reach figures of the seat flown (pipeline/play/spacetime.py), in a pilot's words.
    const km = (m) => `${(m / 1000).toFixed(1)} km`;
    const yes = (v) => (v ? "yes" : "no");
    const margin = hud.escape_margin_s;
    lines.push(`range ${km(hud.range_m)} · my reach ${km(hud.own_reach_straight_m)}, no escape inside ${km(hud.own_reach_escape_m)}`);
    lines.push(`enemy reach ${km(hud.enemy_reach_straight_m)}, no escape inside ${km(hud.enemy_reach_escape_m)}`);
    lines.push(`enemy in my reach: ${yes(hud.enemy_in_own_reach)} · me in enemy reach: ${yes(hud.own_in_enemy_reach)}`);
    lines.push(`escape possible: ${yes(hud.own_escape_possible)}` +
               (typeof margin === "number" ? ` · margin ${margin >= 0 ? "+" : ""}${margin.toFixed(1)} s` : "") +
               ` · enemy missiles ${hud.enemy_missiles_left}`);
  }
  $("hud").textContent = lines.join("\n");
}

function logEvent(event) {
  if (event.kind === "seat") page.seatEvents.push({ side: event.side, spec: event.spec });
  const words = {
    launch: `${event.side} launches`, hit: `${event.side} hits`, gone: `${event.id} gone`,
    end: `${event.winner} ${event.winner === "draw" ? "" : "wins "}(${event.reason})`, round: `round ${event.round}`,
    seat: `${event.side} now flies ${event.spec}`,
  };
  const item = document.createElement("li");
  item.textContent = `${event.t.toFixed(1)} s  ${words[event.kind] || event.kind}`;
  const list = $("events");
  list.append(item);
  while (list.children.length > 6) list.firstChild.remove();
}

// ---------------------------------------------------------------- controls

function sendInput(side) {
  const c = controls[side];
  seq += 1;
  sentAt.set(seq, performance.now());
  if (sentAt.size > 256) sentAt.delete(sentAt.keys().next().value);
  const rudder = (c.left ? 1 : 0) - (c.right ? 1 : 0);
  send({ type: "input", seat: side, rudder, throttle: c.throttle, fire: c.fire, seq });
}

function seatsForKeys(keySide) {
  if (page.held.includes(keySide)) return [keySide];
  return page.held.length === 1 ? page.held : [];
}

function press(action, down, sides) {
  for (const side of sides) {
    const c = controls[side];
    if (action === "faster" || action === "slower") {
      if (!down) continue;
      const i = THROTTLES.indexOf(c.throttle) + (action === "faster" ? 1 : -1);
      c.throttle = THROTTLES[Math.max(0, Math.min(THROTTLES.length - 1, i))];
    } else if (c[action] === down) {
      continue;
    } else {
      c[action] = down;
    }
    sendInput(side);
  }
}

function onKey(event, down) {
  if (event.target instanceof HTMLInputElement || event.target instanceof HTMLSelectElement) return;
  if (down && (event.key === "v" || event.key === "V")) {
    if (spacetimeView && spacetimeView.toggleRotate) spacetimeView.toggleRotate();
    return;
  }
  if (down && (event.key === "p" || event.key === "P") && !event.repeat) {
    send({ type: "control", action: page.last && page.last.paused ? "resume" : "pause" });
    return;
  }
  for (const keySide of SIDES) {
    for (const [action, keys] of Object.entries(KEYS[keySide])) {
      if (keys.includes(event.key)) {
        event.preventDefault();
        if (!event.repeat) press(action, down, seatsForKeys(keySide));
        return;
      }
    }
  }
}

addEventListener("keydown", (e) => onKey(e, true));
addEventListener("keyup", (e) => onKey(e, false));
addEventListener("blur", () => {
  for (const side of page.held) {
    Object.assign(controls[side], { left: false, right: false, fire: false });
    sendInput(side);
  }
});

for (const button of document.querySelectorAll("#touch button")) {
  const action = button.dataset.touch;
  const down = (e) => { e.preventDefault(); press(action, true, page.held.slice(0, 1)); };
  const up = (e) => { e.preventDefault(); press(action, false, page.held.slice(0, 1)); };
  button.addEventListener("pointerdown", down);
  button.addEventListener("pointerup", up);
  button.addEventListener("pointerleave", up);
  button.addEventListener("pointercancel", up);
}

$("pause").onclick = () => send({ type: "control", action: page.last && page.last.paused ? "resume" : "pause" });
$("restart").onclick = () => send({ type: "control", action: "restart" });
$("time-scale").onchange = (e) => {
  send({ type: "control", action: "time_scale", value: Number(e.target.value) });
  e.target.blur(); // the keys fly again at once
};
$("menu-toggle").onclick = () => { $("menu").hidden = !$("menu").hidden; };
$("menu").onsubmit = (e) => {
  e.preventDefault();
  send({ type: "choose", red: $("red-spec").value, blue: $("blue-spec").value, scenario: $("scenario").value });
};
$("take-red").onclick = () => send({ type: "take_seat", seat: "red" });
$("take-blue").onclick = () => send({ type: "take_seat", seat: "blue" });
$("release").onclick = () => send({ type: "take_seat", seat: "none" });

// ---------------------------------------------------------------- drawing

const lerp = (a, b, u) => a + (b - a) * u;
function lerpAngle(a, b, u) {
  let d = b - a;
  while (d > Math.PI) d -= 2 * Math.PI;
  while (d < -Math.PI) d += 2 * Math.PI;
  return a + d * u;
}

function blend(prev, cur, u) {
  const mix = (p, c) => (p ? { ...c, x: lerp(p.x, c.x, u), y: lerp(p.y, c.y, u), heading: lerpAngle(p.heading, c.heading, u) } : c);
  const before = new Map((prev ? prev.missiles : []).map((m) => [m.id, m]));
  return {
    fighters: cur.fighters.map((f, i) => mix(prev && prev.round === cur.round ? prev.fighters[i] : null, f)),
    missiles: cur.missiles.map((m) => mix(before.get(m.id), m)),
  };
}

function resize() {
  const ratio = devicePixelRatio || 1;
  const w = Math.round(canvas.clientWidth * ratio);
  const h = Math.round(canvas.clientHeight * ratio);
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  return ratio;
}

function frameCamera(fighters) {
  const xs = fighters.map((f) => f.x);
  const ys = fighters.map((f) => f.y);
  const cx = (Math.min(...xs) + Math.max(...xs)) / 2;
  const cy = (Math.min(...ys) + Math.max(...ys)) / 2;
  const span = Math.max(Math.max(...xs) - Math.min(...xs), Math.max(...ys) - Math.min(...ys)) * 1.4 + 8000;
  if (!camera) camera = { cx, cy, span };
  const k = 0.05;
  camera = { cx: lerp(camera.cx, cx, k), cy: lerp(camera.cy, cy, k), span: lerp(camera.span, span, k) };
  return camera;
}

function draw(now) {
  page.frames += 1;
  requestAnimationFrame(draw);
  const ratio = resize();
  const W = canvas.width;
  const H = canvas.height;
  ctx.fillStyle = "#0d1117";
  ctx.fillRect(0, 0, W, H);
  const cur = page.last;
  if (!cur) return;
  const prev = page.prev;
  const period = prev ? Math.max(cur.at - prev.at, 1) : 1;
  const u = prev ? Math.min(Math.max((now - cur.at) / period, 0), 1) : 1;
  const scene = blend(prev, cur, u);
  const cam = frameCamera(scene.fighters);
  const scale = Math.min(W, H) / cam.span;
  const toScreen = (x, y) => [W / 2 + (x - cam.cx) * scale, H / 2 - (y - cam.cy) * scale];
  drawGrid(cam, scale, toScreen, W, H, ratio);
  for (const m of scene.missiles) {
    const trail = trails.get(m.id) || [];
    trail.push([m.x, m.y]);
    if (trail.length > 240) trail.shift();
    trails.set(m.id, trail);
    ctx.strokeStyle = COLORS[m.side];
    ctx.globalAlpha = 0.5;
    ctx.lineWidth = 1.5 * ratio;
    ctx.beginPath();
    trail.forEach(([x, y], i) => { const [sx, sy] = toScreen(x, y); if (i) ctx.lineTo(sx, sy); else ctx.moveTo(sx, sy); });
    ctx.stroke();
    ctx.globalAlpha = 1;
    const [sx, sy] = toScreen(m.x, m.y);
    ctx.fillStyle = COLORS[m.side];
    ctx.beginPath();
    ctx.arc(sx, sy, 3 * ratio, 0, 2 * Math.PI);
    ctx.fill();
  }
  for (const f of scene.fighters) drawFighter(f, toScreen, ratio);
}

function drawGrid(cam, scale, toScreen, W, H, ratio) {
  // About eight lines across the view, at 1, 2 or 5 times a power of ten.
  const raw = cam.span / 8;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((k) => k * power).find((s) => s >= raw);
  ctx.strokeStyle = "#1f2630";
  ctx.lineWidth = 1;
  const x0 = Math.floor((cam.cx - W / 2 / scale) / step) * step;
  const y0 = Math.floor((cam.cy - H / 2 / scale) / step) * step;
  ctx.beginPath();
  for (let x = x0; x < cam.cx + W / 2 / scale; x += step) { const [sx] = toScreen(x, 0); ctx.moveTo(sx, 0); ctx.lineTo(sx, H); }
  for (let y = y0; y < cam.cy + H / 2 / scale; y += step) { const [, sy] = toScreen(0, y); ctx.moveTo(0, sy); ctx.lineTo(W, sy); }
  ctx.stroke();
  const half = page.hello ? page.hello.arena_half_width_m : null;
  if (half) {
    const [ax, ay] = toScreen(-half, half);
    ctx.strokeStyle = "#5c4a1f";
    ctx.lineWidth = 2 * ratio;
    ctx.strokeRect(ax, ay, 2 * half * scale, 2 * half * scale);
  }
  ctx.fillStyle = "#7b8594";
  ctx.font = `${11 * ratio}px system-ui`;
  ctx.fillText(`grid ${step >= 1000 ? `${step / 1000} km` : `${step} m`}`, 8 * ratio, H - 8 * ratio);
}

function drawFighter(f, toScreen, ratio) {
  const [sx, sy] = toScreen(f.x, f.y);
  const size = 11 * ratio;
  ctx.save();
  ctx.translate(sx, sy);
  ctx.rotate(-f.heading);
  ctx.fillStyle = f.alive ? COLORS[f.side] : "#555";
  ctx.beginPath();
  ctx.moveTo(size, 0);
  ctx.lineTo(-size * 0.7, size * 0.6);
  ctx.lineTo(-size * 0.4, 0);
  ctx.lineTo(-size * 0.7, -size * 0.6);
  ctx.closePath();
  ctx.fill();
  ctx.restore();
  ctx.fillStyle = COLORS[f.side];
  ctx.font = `${11 * ratio}px system-ui`;
  ctx.fillText(`${f.side}${f.alive ? "" : " (down)"}`, sx + size, sy - size);
}

// ---------------------------------------------------------------- start

import("./spacetime.js")
  .then((m) => { spacetimeView = new m.SpacetimeView($("spacetime")); })
  .catch(() => { spacetimeView = null; });
import("./replay.js")
  .then((m) => { replayPanel = new m.ReplayPanel({ send, showMessage, bar: $("bar") }); })
  .catch(() => { replayPanel = null; })
  .finally(connect); // after the panel, so a --replay file's replay_info finds it
requestAnimationFrame(draw);
