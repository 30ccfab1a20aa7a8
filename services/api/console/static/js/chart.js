// A bar chart drawn as SVG (no chart library): GPU-seconds per UTC day.

const NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

export function barChart(points, { label = "GPU-seconds" } = {}) {
  const width = 800, height = 250, left = 60, bottom = 40, top = 30;
  const svg = el("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label });
  const max = Math.max(1, ...points.map(p => p.value));
  const plotW = width - left - 10, plotH = height - top - bottom;
  svg.append(el("line", { class: "axis", x1: left, y1: top + plotH, x2: width - 10, y2: top + plotH }));
  for (const f of [0, 0.5, 1]) {
    const y = top + plotH - f * plotH;
    svg.append(el("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, Math.round(max * f).toLocaleString()));
  }
  const slot = plotW / Math.max(points.length, 1);
  points.forEach((p, i) => {
    const barH = (p.value / max) * plotH;
    const x = left + i * slot + slot * 0.15;
    const bar = el("rect", { class: "bar", x, y: top + plotH - barH, width: slot * 0.7, height: barH });
    bar.append(el("title", {}, `${p.label}: ${p.value.toLocaleString()} ${label}`));
    svg.append(bar);
    if (points.length <= 16 || i % Math.ceil(points.length / 16) === 0) {
      svg.append(el("text", { x: x + slot * 0.35, y: height - bottom + 16, "text-anchor": "middle" }, p.label.slice(5)));
    }
  });
  svg.append(el("text", { x: 4, y: 12 }, label));
  return svg;
}
