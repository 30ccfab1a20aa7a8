// The public API, as the console calls it: the token from sessionStorage (never a URL,
// never localStorage), JSON in and out, the API's {code, detail} errors as ApiError.

const KEY = "gpucaas.console.token";

export const session = {
  get token() { return sessionStorage.getItem(KEY); },
  set(token) { sessionStorage.setItem(KEY, token); },
  clear() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

// A read that fails before any response (fetch's TypeError: the network dropped or changed under
// the browser, a Wi-Fi switch, a VPN coming up) is sent again, twice at most, a moment later.
// Only reads: a POST or DELETE that may have reached the API is left to the person to repeat.
const READ_RETRIES = [300, 1000];

async function fetchRead(url, init) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(url, init);
    } catch (err) {
      if (!(err instanceof TypeError) || init.signal?.aborted || attempt >= READ_RETRIES.length) throw err;
      await new Promise(resolve => setTimeout(resolve, READ_RETRIES[attempt]));
    }
  }
}

function target(path, query) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  return url;
}

// fetch with the bearer token; ``raw`` returns the Response (for streaming logs).
export async function api(method, path, { body, query, signal, raw, token } = {}) {
  const headers = { Authorization: `Bearer ${token || session.token || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const init = {
    method, headers, signal, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body),
  };
  const response = await (method === "GET" ? fetchRead : fetch)(target(path, query), init);
  if (!response.ok) {
    let code, detail;
    try { ({ code, detail } = await response.json()); } catch { /* not JSON */ }
    if (response.status === 401) window.dispatchEvent(new CustomEvent("gpucaas:unauthorized"));
    throw new ApiError(response.status, code, detail || response.statusText);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

// What this API offers, read from its own OpenAPI document (no token needed): the console
// shows ports, volumes and endpoints only where the API has them.
export async function features() {
  const spec = await (await fetchRead("/openapi.json", { cache: "no-store" })).json();
  const schemas = spec.components?.schemas || {};
  const submit = schemas.ContainerCreate?.properties || {};
  const shown = schemas.ContainerPublic?.properties || {};
  return {
    volumes: "/v1/volumes" in (spec.paths || {}),
    ports: "ports" in submit,
    volumeMounts: "volumes" in submit,
    endpoints: "endpoints" in shown,
  };
}
