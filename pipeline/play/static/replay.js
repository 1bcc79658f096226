// Replays in the page: open a recorded fight (the "replay…" button, a file dropped on the page,
// or `python -m pipeline.play --replay FILE`), then a timeline with play, pause, speed and
// stepping, the fight's events marked on it. Each moment is asked of the server
// ({"type": "seek", ...}) and comes back as a `state` message of the live form, so the page
// draws it (top-down view, HUD, spacetime graph) with the same code as a live fight.
//
//   const panel = new ReplayPanel({ send, showMessage, bar });
//   if (panel.receive(msg)) return;   // replay_info, and live states while a replay is shown
//
// window.replayView exposes what the panel shows (the replay_info, the last moment) to tests.

const SPEEDS = [0.25, 0.5, 1, 2, 4, 8];
const MARK_COLORS = { launch: "#f0c040", hit: "#ff5050", miss: "#8a8f98", kill: "#ff2020", out: "#c080ff", end: "#ffffff" };
const STYLE = `
#replay-bar { display: flex; flex-wrap: wrap; gap: .5em; align-items: center; padding: .35em .6em;
  background: #12263a; border-top: 1px solid #30363d; }
#replay-bar[hidden] { display: none; }
#replay-track { position: relative; flex: 1; min-width: 200px; display: flex; flex-direction: column; }
#replay-slider { width: 100%; margin: 0; }
#replay-marks { position: relative; height: 10px; }
#replay-marks span { position: absolute; top: 0; width: 3px; height: 10px; margin-left: -1px; border-radius: 1px; }
#replay-time { font: 13px ui-monospace, monospace; min-width: 9em; }
#replay-file { color: #7b8594; font-size: 12px; }
body.dropping { outline: 3px dashed #3e8ef7; outline-offset: -3px; }
`;

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

export class ReplayPanel {
  constructor({ send, showMessage, bar }) {
    this.send = send;
    this.showMessage = showMessage;
    this.info = null;
    this.active = false;
    this.playing = false;
    this.speed = 1;
    this.t = 0;
    this.last = null; // the last moment shown (its state message)
    this.inflight = false;
    this.wanted = null; // a time asked for while a seek was in flight
    this.seat = "red";
    const style = el("style");
    style.textContent = STYLE;
    document.head.appendChild(style);
    this.buildOpener(bar);
    this.buildBar(bar);
    window.replayView = this;
  }

  // The "replay…" button and the drop target (the whole page).
  buildOpener(bar) {
    const input = el("input", { type: "file", accept: ".replay", id: "replay-file-input", hidden: "" });
    input.addEventListener("change", () => { if (input.files[0]) this.upload(input.files[0]); input.value = ""; });
    const button = el("button", { type: "button", id: "replay-open", title: "open a recorded fight (or drop one on the page)" }, "replay…");
    button.onclick = () => input.click();
    bar.append(button, input);
    const body = document.body;
    body.addEventListener("dragover", (e) => { e.preventDefault(); body.classList.add("dropping"); });
    body.addEventListener("dragleave", () => body.classList.remove("dropping"));
    body.addEventListener("drop", (e) => {
      e.preventDefault();
      body.classList.remove("dropping");
      const file = e.dataTransfer && e.dataTransfer.files[0];
      if (file) this.upload(file);
    });
  }

  buildBar(after) {
    const b = el("div", { id: "replay-bar", hidden: "" });
    this.back = el("button", { type: "button", id: "replay-back", title: "one frame back" }, "|◀");
    this.playButton = el("button", { type: "button", id: "replay-play", title: "play or pause" }, "▶");
    this.forward = el("button", { type: "button", id: "replay-forward", title: "one frame on" }, "▶|");
    this.speedSelect = el("select", { id: "replay-speed", title: "playback speed" });
    for (const s of SPEEDS) this.speedSelect.append(new Option(`${s}×`, String(s), false, s === 1));
    this.seatSelect = el("select", { id: "replay-seat", title: "whose spacetime graph" });
    for (const s of ["red", "blue"]) this.seatSelect.append(new Option(`graph: ${s}`, s));
    const track = el("div", { id: "replay-track" });
    this.slider = el("input", { type: "range", id: "replay-slider", min: "0", max: "1", step: "0.01", value: "0" });
    this.marks = el("div", { id: "replay-marks" });
    track.append(this.slider, this.marks);
    this.timeLabel = el("span", { id: "replay-time" }, "");
    this.fileLabel = el("span", { id: "replay-file" }, "");
    const close = el("button", { type: "button", id: "replay-close", title: "back to the live fight" }, "live");
    b.append(this.back, this.playButton, this.forward, this.speedSelect, track, this.timeLabel, this.seatSelect,
      this.fileLabel, close);
    after.after(b);
    this.bar = b;
    this.back.onclick = () => this.step(-1);
    this.forward.onclick = () => this.step(1);
    this.playButton.onclick = () => this.setPlaying(!this.playing);
    this.speedSelect.onchange = () => { this.speed = Number(this.speedSelect.value); };
    this.seatSelect.onchange = () => { this.seat = this.seatSelect.value; this.seek(this.t); };
    this.slider.addEventListener("input", () => { this.setPlaying(false); this.seek(Number(this.slider.value)); });
    close.onclick = () => this.close();
  }

  async upload(file) {
    try {
      const response = await fetch(`/replay?name=${encodeURIComponent(file.name)}`, { method: "POST", body: file });
      const msg = await response.json();
      if (msg.type === "error") this.showMessage(msg.message);
      else this.open(msg);
    } catch (err) {
      this.showMessage(`error: cannot send ${file.name} to the server (${err})`);
    }
  }

  // Messages for the panel; true when the page should not handle them itself.
  receive(msg) {
    if (msg.type === "replay_info") {
      this.open(msg);
      return true;
    }
    if (msg.type === "state" && this.active) {
      if (!msg.replay) return true; // the live fight, hidden while a replay is shown
      this.shown(msg);
    }
    if (msg.type === "result" && this.active) return true;
    if (msg.type === "error" && this.active) this.settle();
    return false;
  }

  open(info) {
    this.info = info;
    this.active = true;
    this.bar.hidden = false;
    this.slider.min = String(info.start);
    this.slider.max = String(info.duration);
    this.slider.step = String(Math.min(info.dt / 10, 0.05));
    this.fileLabel.textContent = `${info.file}: ${info.agents.red} (red) vs ${info.agents.blue} (blue), ` +
      `${info.scenario}; ${info.outcome.winner || "?"} (${(info.outcome.end_reason || "").replace(/_/g, " ")})`;
    this.marks.replaceChildren();
    const span = Math.max(info.duration - info.start, 1e-9);
    for (const e of info.events) {
      const mark = el("span", { title: `${e.t.toFixed(1)} s: ${e.text}`, "data-kind": e.kind });
      mark.style.left = `${((e.t - info.start) / span) * 100}%`;
      mark.style.background = MARK_COLORS[e.kind] || "#aaa";
      this.marks.append(mark);
    }
    this.setPlaying(false);
    this.seek(info.start);
  }

  close() {
    this.setPlaying(false);
    this.active = false;
    this.bar.hidden = true;
  }

  setPlaying(on) {
    this.playing = on && this.active;
    this.playButton.textContent = this.playing ? "❚❚" : "▶";
    if (this.playing) {
      if (this.t >= this.info.duration) this.seek(this.info.start);
      let before = performance.now();
      const tick = (now) => {
        if (!this.playing) return;
        const t = Math.min(this.t + ((now - before) / 1000) * this.speed, this.info.duration);
        before = now;
        this.seek(t);
        if (t >= this.info.duration) this.setPlaying(false);
        else requestAnimationFrame(tick);
      };
      requestAnimationFrame(tick);
    }
  }

  // One recorded frame back or on from the one last asked for (the one shown once its seek is
  // answered), so two clicks before the first answer step two frames, not one.
  step(direction) {
    this.setPlaying(false);
    const times = this.info.times;
    const i = Math.max(0, Math.min(times.length - 1, this.frameAt(this.t) + direction));
    this.seek(times[i]);
  }

  // The index of the recorded frame at or before time `t` (the frame the server shows for it).
  frameAt(t) {
    const times = this.info.times;
    let lo = 0, hi = times.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (times[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  // Ask the server for the moment `t` (one request at a time: the newest wish is sent next).
  seek(t) {
    this.t = t;
    if (this.inflight) {
      this.wanted = t;
      return;
    }
    this.inflight = true;
    this.send({ type: "seek", replay: this.info.replay, t, seat: this.seat });
  }

  settle() {
    this.inflight = false;
    if (this.wanted !== null) {
      const t = this.wanted;
      this.wanted = null;
      this.seek(t);
    }
  }

  shown(state) {
    this.last = state;
    if (!this.playing || document.activeElement !== this.slider) this.slider.value = String(this.t);
    this.timeLabel.textContent = `${state.t.toFixed(1)} / ${this.info.duration.toFixed(1)} s`;
    this.settle();
  }
}
