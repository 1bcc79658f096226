// The 3-D spacetime graph: x, y (km, east and north, centred on the own fighter) and time up,
// drawn with three.js (vendored under ./vendor/three/) from the `spacetime` object of each
// state message (pipeline/play/spacetime.py says what it holds).
//
//   const view = new SpacetimeView(document.getElementById("spacetime"));
//   view.update(state.spacetime);   // on every state; null clears the graph
//   view.toggleRotate();            // the V key: turn the graph slowly round, or stop
//
// Red, semi-transparent: the enemy missile's threat region for a launch now against the own
// fighter turning away (filled slices joined into a solid), with dashed red outlines for the
// own fighter flying straight on. Green outlines: the own missile's reach. Lines: the predicted
// paths (cyan own, orange enemy; solid holding the controls, dashed turning away).
//
// window.spacetimeView is the page's view (for tests). Without WebGL the panel says so.

import * as THREE from "./vendor/three/three.module.min.js";
import { OrbitControls } from "./vendor/three/OrbitControls.js";

export const COLORS = {
  background: 0x0b1020,
  threat: 0xff2020,
  ownReach: 0x20c060,
  ownPath: 0x30d0ff,
  enemyPath: 0xffa030,
  grid: 0x2a3550,
  axis: 0x8090b0,
};
const HEIGHT_KM = 40; // the time axis's length in the picture, in km of the ground plane
const GRID_KM = 160; // ground grid: 160 km across, lines every 10 km

// The panel's own look, added once (the page's style sheet need not know about it).
const STYLE = `
.spacetime-view { position: relative; overflow: hidden; }
.spacetime-view canvas { display: block; touch-action: none; }
.spacetime-hud { position: absolute; left: 6px; top: 4px; color: #d8e0f0; font: 12px/1.35 monospace;
  pointer-events: none; text-shadow: 0 0 3px #000; }
.spacetime-hud.danger { color: #ff8080; }
.spacetime-legend { position: absolute; left: 6px; bottom: 4px; color: #8090b0; font: 11px monospace;
  pointer-events: none; }
`;

function addStyle() {
  if (document.getElementById("spacetime-style")) return;
  const style = document.createElement("style");
  style.id = "spacetime-style";
  style.textContent = STYLE;
  document.head.appendChild(style);
}

function points(flat, unitKm) {
  const n = flat.length / 2;
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = [flat[i] * unitKm, flat[n + i] * unitKm];
  return out;
}

// Every material the graph uses, made once: a material disposed and made again would have its
// shader program compiled again, which software WebGL takes long over.
function makeMaterials() {
  const basic = (color) => new THREE.LineBasicMaterial({ color });
  const dashed = (color) => new THREE.LineDashedMaterial({ color, dashSize: 1.5, gapSize: 1.2 });
  const surface = (opacity) => new THREE.MeshBasicMaterial({
    color: COLORS.threat, transparent: true, opacity, side: THREE.DoubleSide, depthWrite: false,
  });
  return {
    fill: surface(0.22), skin: surface(0.12), threat: basic(COLORS.threat), threatDashed: dashed(COLORS.threat),
    ownReach: basic(COLORS.ownReach), "own-hold": basic(COLORS.ownPath), "own-escape": dashed(COLORS.ownPath),
    "enemy-hold": basic(COLORS.enemyPath), "enemy-escape": dashed(COLORS.enemyPath),
    ownDot: new THREE.MeshBasicMaterial({ color: COLORS.ownPath }),
    enemyDot: new THREE.MeshBasicMaterial({ color: COLORS.enemyPath }),
  };
}

function fmt(v, digits = 1) {
  return Number.isFinite(v) ? v.toFixed(digits) : "-";
}

export class SpacetimeView {
  constructor(el) {
    this.el = el;
    this.rotating = false;
    this.payload = null;
    this.group = null;
    addStyle();
    el.classList.add("spacetime-view");
    const w = Math.max(el.clientWidth, 200);
    const h = Math.max(el.clientHeight, 200);
    try {
      this.renderer = new THREE.WebGLRenderer({ antialias: true });
    } catch (err) {
      el.textContent = "The 3-D spacetime graph needs WebGL, which this browser does not offer.";
      throw err;
    }
    this.renderer.setPixelRatio(window.devicePixelRatio || 1);
    this.renderer.setSize(w, h);
    this.renderer.domElement.setAttribute("aria-label", "spacetime graph");
    el.appendChild(this.renderer.domElement);
    this.hud = document.createElement("div");
    this.hud.className = "spacetime-hud";
    el.appendChild(this.hud);
    this.legend = document.createElement("div");
    this.legend.className = "spacetime-legend";
    el.appendChild(this.legend);
    this.scene = new THREE.Scene();
    this.scene.background = new THREE.Color(COLORS.background);
    this.camera = new THREE.PerspectiveCamera(45, w / h, 0.5, 2000);
    this.camera.up.set(0, 0, 1);
    this.camera.position.set(-95, -125, 95);
    this.controls = new OrbitControls(this.camera, this.renderer.domElement);
    this.controls.target.set(0, 0, HEIGHT_KM / 2);
    this.controls.enableDamping = true;
    this.controls.autoRotateSpeed = 1.5;
    this.controls.addEventListener("change", () => this.render());
    this.controls.update();
    this.scene.add(this.frameObjects());
    this.materials = makeMaterials();
    this.resizeObserver = new ResizeObserver(() => this.resize());
    this.resizeObserver.observe(el);
    this.showHud(null);
    this.render();
    window.spacetimeView = this;
  }

  // Toggle the slow turn of the graph (the V key); returns whether it now turns.
  toggleRotate() {
    this.rotating = !this.rotating;
    this.controls.autoRotate = this.rotating;
    if (this.rotating) this.spin();
    return this.rotating;
  }

  spin() {
    if (!this.rotating) return;
    this.controls.update();
    requestAnimationFrame(() => this.spin());
  }

  resize() {
    const w = Math.max(this.el.clientWidth, 200);
    const h = Math.max(this.el.clientHeight, 200);
    this.renderer.setSize(w, h);
    this.camera.aspect = w / h;
    this.camera.updateProjectionMatrix();
    this.render();
  }

  // Render at the next display frame (several changes in one frame are drawn once).
  render() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.renderer.render(this.scene, this.camera);
      this.shownKey = this.key; // the moment on screen (for tests)
    });
  }

  // The fixed parts: ground grid (10 km), time axis with a tick every 10 s.
  frameObjects() {
    const g = new THREE.Group();
    const grid = new THREE.GridHelper(GRID_KM, GRID_KM / 10, COLORS.grid, COLORS.grid);
    grid.rotation.x = Math.PI / 2; // into the x-y plane
    g.add(grid);
    const axis = new THREE.BufferGeometry().setFromPoints([
      new THREE.Vector3(0, 0, 0), new THREE.Vector3(0, 0, HEIGHT_KM),
    ]);
    g.add(new THREE.Line(axis, new THREE.LineBasicMaterial({ color: COLORS.axis })));
    return g;
  }

  // Draw the graph of one moment (`null`: a fighter is down, nothing to draw). The server sends
  // the same moment again between two computations of it (its `t` says which): drawn once.
  update(payload) {
    const key = payload ? `${payload.seat} ${payload.t} ${payload.origin}` : null;
    if (key === this.key && this.drawn) return;
    this.key = key;
    this.drawn = true;
    this.payload = payload;
    if (this.group) {
      this.scene.remove(this.group);
      // Geometries only: the materials stay, so their shader programs are compiled once.
      this.group.traverse((o) => { if (o.geometry) o.geometry.dispose(); });
      this.group = null;
    }
    this.showHud(payload);
    if (payload) {
      this.group = this.build(payload);
      this.scene.add(this.group);
    }
    this.render();
  }

  build(p) {
    const g = new THREE.Group();
    const unitKm = p.unit_m / 1000;
    const z = (t) => (t / p.horizon_s) * HEIGHT_KM;
    const m = this.materials;
    const ring = (pts, t, material) => {
      const geom = new THREE.BufferGeometry().setFromPoints(pts.map(([x, y]) => new THREE.Vector3(x, y, z(t))));
      const line = new THREE.Line(geom, material);
      if (material.isLineDashedMaterial) line.computeLineDistances();
      return line;
    };
    const slices = (name) => (p[name] || []).map((flat) => points(flat, unitKm));

    const escape = slices("threat_escape");
    escape.forEach((pts, k) => {
      const t = p.slice_t[k];
      const shape = new THREE.Shape(pts.map(([x, y]) => new THREE.Vector2(x, y)));
      const mesh = new THREE.Mesh(new THREE.ShapeGeometry(shape), m.fill);
      mesh.position.z = z(t);
      g.add(mesh);
      g.add(ring(pts, t, m.threat));
      if (k > 0) g.add(this.skin(escape[k - 1], pts, z(p.slice_t[k - 1]), z(t), m.skin));
    });
    slices("threat_straight").forEach((pts, k) => g.add(ring(pts, p.slice_t[k], m.threatDashed)));
    slices("own_reach").forEach((pts, k) => g.add(ring(pts, p.slice_t[k], m.ownReach)));

    for (const who of ["own", "enemy"]) {
      for (const kind of ["hold", "escape"]) {
        const pts = points(p.paths[who][kind], unitKm);
        const geom = new THREE.BufferGeometry().setFromPoints(
          pts.map(([x, y], i) => new THREE.Vector3(x, y, z(p.path_t[i]))));
        const line = new THREE.Line(geom, m[`${who}-${kind}`]);
        if (kind === "escape") line.computeLineDistances();
        g.add(line);
      }
    }
    for (const f of p.fighters) {
      const own = f.side === p.seat;
      const dot = new THREE.Mesh(new THREE.SphereGeometry(1.4, 12, 8), own ? m.ownDot : m.enemyDot);
      dot.position.set(f.x * unitKm, f.y * unitKm, 0);
      g.add(dot);
    }
    return g;
  }

  // The side surface between two slices of a region (same number of points).
  skin(a, b, za, zb, material) {
    const n = Math.min(a.length, b.length);
    const pos = [];
    for (let i = 0; i + 1 < n; i++) {
      const [a0, a1, b0, b1] = [a[i], a[i + 1], b[i], b[i + 1]];
      pos.push(a0[0], a0[1], za, a1[0], a1[1], za, b1[0], b1[1], zb);
      pos.push(a0[0], a0[1], za, b1[0], b1[1], zb, b0[0], b0[1], zb);
    }
    const geom = new THREE.BufferGeometry();
    geom.setAttribute("position", new THREE.Float32BufferAttribute(pos, 3));
    return new THREE.Mesh(geom, material);
  }

  showHud(p) {
    const horizon = p ? ` ${p.horizon_s} s` : "";
    this.legend.textContent = `grid 10 km · time up${horizon} · red: threat · green: my reach · V: rotate`;
    if (!p) {
      this.hud.textContent = "spacetime graph: no moment to show";
      this.hud.dataset.state = "empty";
      return;
    }
    const h = p.hud;
    const yes = (b) => (b ? "yes" : "no");
    this.hud.dataset.state = "shown";
    this.hud.innerHTML = "";
    const lines = [
      `${p.seat} · t ${fmt(p.t)} s · speed ${fmt(h.speed_mps, 0)} m/s · missiles ${h.missiles_left}`,
      `range ${fmt(h.range_m / 1000)} km · enemy in my reach: ${yes(h.enemy_in_own_reach)}` +
        ` (${fmt(h.own_reach_straight_m / 1000)} km)`,
      `me in enemy reach: ${yes(h.own_in_enemy_reach)} · escape possible: ${yes(h.own_escape_possible)}`,
      `escape time margin ${h.escape_margin_s >= 0 ? "+" : ""}${fmt(h.escape_margin_s)} s`,
    ];
    for (const text of lines) {
      const div = document.createElement("div");
      div.textContent = text;
      this.hud.appendChild(div);
    }
    this.hud.classList.toggle("danger", h.own_in_enemy_reach && !h.own_escape_possible);
  }
}
