// The console's pages. Each one is ``(main, ctx, id) => cleanup?``: it fills ``main`` and
// returns what stops its timers and streams when the page is left. Every action is a
// call of the public API (api.js); what the token's scope does not allow is not shown.

import { ApiError, api } from "./api.js";
import { barChart } from "./chart.js";
import { armedButton, badge, errorBox, h, replace, table, when } from "./dom.js";

const TERMINAL = ["Succeeded", "Failed", "Cancelled"];
const STATUSES = ["Queued", "Pending", "Running", ...TERMINAL];
const QUEUE_REASONS = {
  over_share: "over your share", waiting_for_partition: "waiting for a partition", preempted: "preempted",
};

// Where a waiting container stands (queueing by Kueue): "#2, 8 GPUs ahead, over your share".
function queueText(q) {
  return q ? `#${q.position}, ${q.gpus_ahead} GPUs ahead, ${QUEUE_REASONS[q.reason] || q.reason}` : "";
}

// Refresh ``render`` every ``seconds`` until the page is left.
function every(seconds, render) {
  let stopped = false, timer = null;
  const tick = async () => {
    if (stopped) return;
    try { await render(); } finally { if (!stopped) timer = setTimeout(tick, seconds * 1000); }
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

async function show(target, load) {
  try {
    replace(target, await load());
  } catch (err) {
    replace(target, errorBox(err));
  }
}

// Lines "NAME=value" into an object.
function pairs(text, field) {
  const out = {};
  for (const line of text.split("\n").map(l => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`${field}: "${line}" is not NAME=value`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

function containers(main, ctx) {
  const status = h("select", { id: "status-filter", "aria-label": "Status" },
    h("option", { value: "" }, "All statuses"), STATUSES.map(s => h("option", { value: s }, s)));
  const list = h("div", { id: "containers" });
  replace(main, h("h1", {}, "Containers"),
    h("div", { class: "toolbar" }, status,
      ctx.can("submit") ? h("a", { href: "#/new" }, h("button", { class: "primary", type: "button" }, "New container")) : null),
    list);
  const render = () => show(list, async () => {
    const page = await api("GET", "/v1/containers", { query: { status: status.value, limit: 100 } });
    return [table([
      ["Id", c => h("a", { href: `#/containers/${c.id}`, class: "mono" }, c.id)],
      ["Image", c => c.image],
      ["GPUs", c => c.gpus, "num"],
      ["Status", c => badge(c.status)],
      ["Queue", c => queueText(c.queue)],
      ["Why / message", c => c.message || ""],
      ["Created", c => when(c.created_at)],
    ], page.data, "No containers."), h("p", { class: "muted" }, `${page.count} in all`)];
  });
  status.addEventListener("change", render);
  return every(3, render);
}

// A command line's words: split on spaces, a "double" or 'single' quoted part kept whole.
export function words(line) {
  return [...line.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map(m => m[1] ?? m[2] ?? m[3]);
}

function newContainer(main, ctx) {
  const f = ctx.features;
  const field = (id, label, input, hint) =>
    h("div", { class: "row" }, h("label", { for: id }, label), input, hint ? h("span", { class: "muted" }, hint) : null);
  const secretNames = h("datalist", { id: "secret-names" });
  api("GET", "/v1/secrets").then(r => replace(secretNames, r.data.map(s => h("option", { value: s.name }))), () => {});
  const form = h("form", { class: "card", id: "submit-form" },
    field("image", "Image", h("input", { id: "image", name: "image", required: true,
      placeholder: "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04" })),
    field("gpus", "GPUs", h("select", { id: "gpus", name: "gpus" },
      [1, 2, 3, 4, 5, 6, 7, 8].map(n => h("option", { value: n }, n)))),
    field("command", "Command", h("input", { id: "command", name: "command", placeholder: "python train.py" }),
      "Split on spaces, as a shell would: quote an argument that holds spaces (sh -c \"echo hi\"); empty: the image's own."),
    field("env", "Environment", h("textarea", { id: "env", name: "env", placeholder: "EPOCHS=3" }),
      "NAME=value, one a line."),
    field("secret-env", "Secrets as environment", h("textarea", { id: "secret-env", name: "secret-env",
      placeholder: "HF_TOKEN=hf" }), "NAME=secret name, one a line (the value never reaches this page)."),
    secretNames,
    field("interruptible", "Interruptible", h("input", { id: "interruptible", name: "interruptible", type: "checkbox" }),
      "Runs on GPUs nobody is guaranteed now; preempted first when the queue needs them."),
    f.ports ? field("ports", "Ports", h("input", { id: "ports", name: "ports", placeholder: "8888, 6006:public" }),
      "HTTP ports to serve, comma-separated; private (your tenancy's tokens only) unless :public.") : null,
    f.volumeMounts ? field("volumes", "Volumes", h("textarea", { id: "volumes", name: "volumes", placeholder: "[]" }),
      "As the API takes them (JSON).") : null,
    h("div", { id: "submit-error" }),
    h("button", { class: "primary", type: "submit" }, "Submit"));
  form.addEventListener("submit", async event => {
    event.preventDefault();
    const v = name => form.elements[name]?.value.trim();
    try {
      const body = { image: v("image"), gpus: Number(v("gpus")) };
      const env = pairs(v("env"), "env");
      for (const [name, secret] of Object.entries(pairs(v("secret-env"), "secrets"))) env[name] = { secret };
      if (Object.keys(env).length) body.env = env;
      if (v("command")) body.command = words(v("command"));
      if (form.elements.interruptible.checked) body.interruptible = true;
      if (f.ports && v("ports")) body.ports = v("ports").split(",").map(p => p.trim()).filter(Boolean).map(p => {
        const [port, visibility] = p.split(":");
        return { port: Number(port), public: visibility === "public" };
      });
      if (f.volumeMounts && v("volumes")) body.volumes = JSON.parse(v("volumes"));
      const created = await api("POST", "/v1/containers", { body });
      location.hash = `#/containers/${created.id}`;
    } catch (err) {
      replace(form.querySelector("#submit-error"), errorBox(err));
    }
  });
  replace(main, h("h1", {}, "New container"), form);
}

// Follow the container's log into ``pre`` (fetch streaming): retried while it has no pod
// yet, again after a stream ends while the container still runs; stops on ``signal``.
async function followLog(id, pre, note, signal) {
  const decoder = new TextDecoder();
  while (!signal.aborted) {
    try {
      const response = await api("GET", `/v1/containers/${id}/logs`, { query: { follow: "true" }, raw: true, signal });
      pre.textContent = "";
      note.textContent = "Following…";
      const reader = response.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pre.textContent += decoder.decode(value, { stream: true });
        pre.scrollTop = pre.scrollHeight;
      }
      const c = await api("GET", `/v1/containers/${id}`, { signal });
      if (TERMINAL.includes(c.status)) { note.textContent = `Ended (${c.status}).`; return; }
    } catch (err) {
      if (signal.aborted) return;
      note.textContent = err instanceof ApiError && err.status === 409 ? "Waiting for the container to start…"
        : `Log unavailable: ${err.message}`;
    }
    await new Promise(resolve => setTimeout(resolve, 2000));
  }
}

function containerDetail(main, ctx, id) {
  const fields = h("div", { id: "container-fields" });
  const actions = h("div", { class: "toolbar", id: "container-actions" });
  const endpoints = h("div", { id: "endpoints" });
  const timeline = h("div", { id: "timeline" });
  const note = h("span", { class: "muted", id: "log-note" }, "");
  const pre = h("pre", { class: "log", id: "log" });
  replace(main, h("h1", {}, "Container ", h("span", { class: "mono" }, id)), fields, actions,
    ctx.features.endpoints ? [h("h2", {}, "Endpoints"), endpoints] : null,
    h("h2", {}, "Log ", note), pre, h("h2", {}, "Timeline"), timeline);
  let armed = false;
  const render = async () => {
    let c;
    try {
      c = await api("GET", `/v1/containers/${id}`);
    } catch (err) {
      replace(fields, errorBox(err));
      return;
    }
    replace(fields, h("dl", { class: "fields" },
      h("dt", {}, "Status"), h("dd", { id: "container-status" }, badge(c.status), c.reason ? ` ${c.reason}` : null),
      h("dt", {}, "Class"), h("dd", { id: "container-class" }, c.interruptible ? "interruptible" : "standard"),
      h("dt", {}, "Queue"), h("dd", { id: "container-queue" }, queueText(c.queue) || "—"),
      h("dt", {}, "Why / message"), h("dd", {}, c.message || "—"),
      h("dt", {}, "Image"), h("dd", { class: "mono" }, c.image),
      h("dt", {}, "GPUs"), h("dd", {}, c.gpus),
      h("dt", {}, "Node"), h("dd", {}, c.node_name || "—"),
      h("dt", {}, "Environment"), h("dd", { class: "mono" },
        Object.entries(c.env || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : `secret ${v.secret}`}`).join("  ") || "—"),
      h("dt", {}, "Created"), h("dd", {}, when(c.created_at)),
      h("dt", {}, "Started"), h("dd", {}, when(c.started_at) || "—"),
      h("dt", {}, "Finished"), h("dd", {}, when(c.finished_at) || "—"),
      c.exit_code !== null && c.exit_code !== undefined ? [h("dt", {}, "Exit code"), h("dd", {}, c.exit_code)] : null));
    if (ctx.can("submit") && !TERMINAL.includes(c.status)) {
      if (!armed) {
        armed = true;
        replace(actions, armedButton("Cancel container", "Confirm cancel", async () => {
          try { await api("DELETE", `/v1/containers/${id}`); } catch (err) { actions.append(errorBox(err)); }
          render();
        }, { id: "cancel" }));
      }
    } else {
      replace(actions);
    }
    if (ctx.features.endpoints) {
      const list = c.endpoints || [];
      replace(endpoints, list.length ? h("ul", {}, list.map(e => h("li", {},
        h("a", { href: e.url, target: "_blank", rel: "noopener noreferrer", class: "endpoint" }, e.url), " ",
        h("span", { class: "muted" }, e.public ? `port ${e.port}, public`
          : `port ${e.port}, private: requests need a token of this tenancy (Authorization: Bearer)`))))
        : h("p", { class: "muted" }, TERMINAL.includes(c.status) ? "None: the container has ended." : "None."));
    }
    await show(timeline, async () => table([
      ["Time", e => when(e.time)], ["What", e => e.kind], ["Message", e => e.message], ["Source", e => e.source],
    ], (await api("GET", `/v1/containers/${id}/events`)).data));
  };
  const stop = every(3, render);
  const follow = new AbortController();
  followLog(id, pre, note, follow.signal);
  return () => { stop(); follow.abort(); };
}

function usage(main) {
  const today = new Date();
  const first = `${today.toISOString().slice(0, 8)}01`;
  const from = h("input", { id: "usage-from", type: "date", value: first });
  const to = h("input", { id: "usage-to", type: "date" });
  const chart = h("div", { id: "usage-chart" });
  const runs = h("div", { id: "usage-runs" });
  const render = async () => {
    const query = { from: from.value, to: to.value };
    await show(chart, async () => {
      const r = await api("GET", "/v1/usage", { query: { ...query, group_by: "day" } });
      return [h("p", {}, `${r.total_gpu_seconds.toLocaleString()} GPU-seconds (${r.total_gpu_hours.toFixed(2)} GPU-hours) from ${when(r.from)} to ${when(r.to)}`),
        r.data.length ? barChart(r.data.map(d => ({ label: d.day, value: d.gpu_seconds })))
          : h("p", { class: "muted" }, "No GPU use in this window.")];
    });
    await show(runs, async () => table([
      ["Container", u => h("a", { href: `#/containers/${u.container_id}`, class: "mono" }, u.container_id)],
      ["GPUs", u => u.gpus, "num"], ["GPU model", u => u.gpu_model || ""],
      ["Started", u => when(u.started_at)], ["Finished", u => u.running ? "running" : when(u.finished_at)],
      ["GPU-seconds", u => u.gpu_seconds.toLocaleString(), "num"],
    ], (await api("GET", "/v1/usage", { query: { ...query, group_by: "container" } })).data, "No runs in this window."));
  };
  from.addEventListener("change", render);
  to.addEventListener("change", render);
  replace(main, h("h1", {}, "Usage"),
    h("div", { class: "toolbar" }, h("label", { for: "usage-from" }, "From"), from,
      h("label", { for: "usage-to" }, "To (exclusive)"), to),
    h("h2", {}, "GPU-seconds per day"), chart, h("h2", {}, "Per run"), runs);
  render();
}

function volumes(main, ctx) {
  managed(main, ctx, {
    title: "Volumes", path: "/v1/volumes", key: "name", write: "submit",
    help: "Storage that outlives containers: mount a volume by name when you submit one. "
      + "A volume a running container mounts cannot be deleted.",
    columns: [["Name", v => v.name], ["Size", v => v.size], ["Status", v => v.status],
      ["Created", v => when(v.created_at)]],
    form: (render, message) => {
      const name = h("input", { id: "volume-name", required: true, placeholder: "datasets" });
      const size = h("input", { id: "volume-size", required: true, placeholder: "10Gi" });
      const form = h("form", { class: "card inline", id: "volume-form" },
        h("div", { class: "row" }, h("label", { for: "volume-name" }, "Name"), name),
        h("div", { class: "row" }, h("label", { for: "volume-size" }, "Size"), size),
        h("button", { class: "primary", type: "submit" }, "Create"));
      form.addEventListener("submit", async event => {
        event.preventDefault();
        try {
          await api("POST", "/v1/volumes", { body: { name: name.value.trim(), size: size.value.trim() } });
          form.reset();
          replace(message, h("p", { class: "notice" }, "Created."));
        } catch (err) {
          replace(message, errorBox(err));
        }
        render();
      });
      return form;
    },
  });
}

// A list with, for tokens of the ``write`` scope (admin by default), a create form and delete buttons.
function managed(main, ctx, { title, path, columns, key, form, help, remove = "Delete", write = "admin" }) {
  const list = h("div", { id: "list" });
  const message = h("div", { id: "form-message" });
  const render = () => show(list, async () => table([...columns,
    ...(ctx.can(write) ? [["", r => armedButton(remove, `Confirm: ${remove.toLowerCase()}`, async () => {
      try { await api("DELETE", `${path}/${encodeURIComponent(r[key])}`); } catch (err) { replace(message, errorBox(err)); }
      render();
    })]] : []),
  ], (await api("GET", path)).data));
  replace(main, h("h1", {}, title), help ? h("p", { class: "muted" }, help) : null,
    ctx.can(write) ? form(render, message) : null, message, list);
  render();
}

function secrets(main, ctx) {
  managed(main, ctx, {
    title: "Secrets", path: "/v1/secrets", key: "name",
    help: "Write-only: values are stored in your namespace and never shown again; containers read them as environment.",
    columns: [["Name", s => s.name], ["Created", s => when(s.created_at)]],
    form: (render, message) => {
      const name = h("input", { id: "secret-name", required: true, placeholder: "hf" });
      const value = h("input", { id: "secret-value", type: "password", required: true, autocomplete: "off" });
      const form = h("form", { class: "card inline", id: "secret-form" },
        h("div", { class: "row" }, h("label", { for: "secret-name" }, "Name"), name),
        h("div", { class: "row" }, h("label", { for: "secret-value" }, "Value"), value),
        h("button", { class: "primary", type: "submit" }, "Save"));
      form.addEventListener("submit", async event => {
        event.preventDefault();
        try {
          try {
            await api("POST", "/v1/secrets", { body: { name: name.value.trim(), value: value.value } });
          } catch (err) {
            if (!(err instanceof ApiError && err.status === 409)) throw err;
            await api("PUT", `/v1/secrets/${encodeURIComponent(name.value.trim())}`, { body: { value: value.value } });
          }
          form.reset();
          replace(message, h("p", { class: "notice" }, "Saved."));
        } catch (err) {
          replace(message, errorBox(err));
        }
        render();
      });
      return form;
    },
  });
}

function registryCredentials(main, ctx) {
  managed(main, ctx, {
    title: "Registry credentials", path: "/v1/registry-credentials", key: "server",
    help: "Used to pull your private images; passwords are write-only.",
    columns: [["Server", r => r.server], ["Username", r => r.username], ["Created", r => when(r.created_at)]],
    form: (render, message) => {
      const server = h("input", { id: "registry-server", required: true, placeholder: "registry.example.com" });
      const username = h("input", { id: "registry-username", required: true, autocomplete: "off" });
      const password = h("input", { id: "registry-password", type: "password", required: true, autocomplete: "off" });
      const form = h("form", { class: "card inline", id: "registry-form" },
        h("div", { class: "row" }, h("label", { for: "registry-server" }, "Server"), server),
        h("div", { class: "row" }, h("label", { for: "registry-username" }, "Username"), username),
        h("div", { class: "row" }, h("label", { for: "registry-password" }, "Password"), password),
        h("button", { class: "primary", type: "submit" }, "Save"));
      form.addEventListener("submit", async event => {
        event.preventDefault();
        try {
          await api("POST", "/v1/registry-credentials",
            { body: { server: server.value.trim(), username: username.value, password: password.value } });
          form.reset();
          replace(message, h("p", { class: "notice" }, "Saved."));
        } catch (err) {
          replace(message, errorBox(err));
        }
        render();
      });
      return form;
    },
  });
}

function tokens(main, ctx) {
  const scopes = ["read", "submit", "admin"].filter(s => ctx.can(s));
  managed(main, ctx, {
    title: "Tokens", path: "/v1/tokens", key: "id", remove: "Revoke",
    help: "Tokens of your tenancy; a new one is no wider than yours and its secret is shown once.",
    columns: [["Name", t => t.name || ""], ["Scope", t => t.scope], ["Id", t => h("span", { class: "mono" }, t.id)],
      ["Expires", t => when(t.expires_at) || "never"], ["Last used", t => when(t.last_used_at)],
      ["Created", t => when(t.created_at)]],
    form: (render, message) => {
      const name = h("input", { id: "token-name", required: true, placeholder: "dashboard" });
      const scope = h("select", { id: "token-scope" }, scopes.map(s => h("option", { value: s }, s)));
      const expires = h("input", { id: "token-expires", type: "datetime-local" });
      const form = h("form", { class: "card inline", id: "token-form" },
        h("div", { class: "row" }, h("label", { for: "token-name" }, "Name"), name),
        h("div", { class: "row" }, h("label", { for: "token-scope" }, "Scope"), scope),
        h("div", { class: "row" }, h("label", { for: "token-expires" }, "Expires (UTC, optional)"), expires),
        h("button", { class: "primary", type: "submit" }, "Mint"));
      form.addEventListener("submit", async event => {
        event.preventDefault();
        try {
          const body = { name: name.value.trim(), scope: scope.value };
          if (expires.value) body.expires_at = new Date(`${expires.value}Z`).toISOString();
          const minted = await api("POST", "/v1/tokens", { body });
          form.reset();
          replace(message, h("div", { class: "notice" },
            h("p", {}, `Token "${minted.name}" (${minted.scope}): copy it now, it is not shown again.`),
            h("code", { class: "secret-once", id: "minted-token" }, minted.token)));
        } catch (err) {
          replace(message, errorBox(err));
        }
        render();
      });
      return form;
    },
  });
}

function audit(main) {
  const list = h("div", { id: "audit" });
  const more = h("button", { type: "button", id: "audit-more", hidden: true }, "More");
  const rows = [];
  let next = null;
  const load = () => show(list, async () => {
    const page = await api("GET", "/v1/audit", { query: { limit: 50, after: next } });
    rows.push(...page.data);
    next = page.next;
    more.hidden = !next;
    return table([
      ["When", e => when(e.at)], ["Action", e => e.action], ["Target", e => e.target || ""],
      ["Token", e => e.token_name || e.token_id || ""], ["Client", e => e.client || ""], ["Detail", e => e.detail || ""],
    ], rows, "Nothing recorded yet.");
  });
  more.addEventListener("click", load);
  replace(main, h("h1", {}, "Audit trail"), list, more);
  load();
}

export const PAGES = {
  containers: (main, ctx, id) => (id ? containerDetail(main, ctx, id) : containers(main, ctx)),
  new: newContainer,
  usage,
  volumes,
  secrets,
  "registry-credentials": registryCredentials,
  tokens,
  audit,
};
