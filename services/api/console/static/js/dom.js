// Small DOM helpers: elements built with createElement (no innerHTML of API data).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A table: columns are [heading, row => cell, className?].
export function table(columns, rows, empty = "None yet.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls }, title)))),
    h("tbody", {}, rows.map(row => h("tr", {}, columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row)))))));
}

export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function badge(status) {
  return h("span", { class: `badge ${status}` }, status);
}

export function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, err.message || String(err));
}

// A button that asks for a second click before it acts (no window.confirm).
export function armedButton(label, armedLabel, action, attrs = {}) {
  const button = h("button", { type: "button", class: "danger", ...attrs }, label);
  button.addEventListener("click", async () => {
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = armedLabel;
      return;
    }
    button.disabled = true;
    try { await action(); } finally { button.disabled = false; }
  });
  return button;
}
