// The console's shell: sign-in (token kept in sessionStorage only), the navigation
// (only what the token's scope allows and the API offers), and a hash router.

import { api, features, session } from "./api.js";
import { errorBox, h, replace } from "./dom.js";
import { PAGES } from "./pages.js";

const RANK = { read: 0, submit: 1, admin: 2 };
const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const signout = document.getElementById("signout");
let ctx = null;        // { me, can(scope), features }
let cleanup = null;    // the current page's teardown (timers, log follows)

function signIn(error) {
  ctx = null;
  nav.replaceChildren();
  who.textContent = "";
  signout.hidden = true;
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true,
    placeholder: "gpc_…" });
  const form = h("form", { class: "card signin", id: "signin" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "With an API token of your tenancy. It is kept in this browser tab's session only."),
    error ? errorBox(error) : null,
    h("div", { class: "row" }, h("label", { for: "token" }, "Token"), input),
    h("button", { class: "primary", type: "submit" }, "Sign in"));
  form.addEventListener("submit", async event => {
    event.preventDefault();
    try {
      const me = await api("GET", "/v1/whoami", { token: input.value.trim() });
      if (me.tenancy === null) throw new Error("This is an operator's admin token: the console is for tenancies' tokens.");
      session.set(input.value.trim());
      await start(me);
    } catch (err) {
      signIn(err);
    }
  });
  replace(main, form);
  input.focus();
}

async function start(me) {
  ctx = {
    me,
    can: scope => RANK[me.scope] >= RANK[scope],
    features: await features(),
  };
  who.textContent = `${me.tenancy} · ${me.token_name || me.token_id} (${me.scope})`;
  signout.hidden = false;
  if (!location.hash || location.hash === "#/") location.hash = "#/containers";
  route();
}

function links() {
  const items = [["#/containers", "Containers"], ["#/usage", "Usage"]];
  if (ctx.features.volumes) items.push(["#/volumes", "Volumes"]);
  items.push(["#/secrets", "Secrets"], ["#/registry-credentials", "Registry credentials"]);
  if (ctx.can("admin")) items.push(["#/tokens", "Tokens"], ["#/audit", "Audit"]);
  return items;
}

function route() {
  if (!ctx) return;
  if (cleanup) { cleanup(); cleanup = null; }
  const [, section = "containers", id] = (location.hash || "#/containers").split("/");
  const allowed = links().map(([href]) => href.slice(2));
  replace(nav, links().map(([href, text]) =>
    h("a", { href, class: href.slice(2) === section ? "active" : null }, text)));
  const page = PAGES[section];
  const offered = page && (allowed.includes(section) || (section === "new" && ctx.can("submit")));
  if (!offered) {
    replace(main, h("h1", {}, "Not offered"),
      h("p", { class: "muted" }, "This page is not available with this token's scope."));
    return;
  }
  replace(main);
  cleanup = page(main, ctx, id ? decodeURIComponent(id) : undefined) || null;
}

signout.addEventListener("click", () => {
  session.clear();
  if (cleanup) { cleanup(); cleanup = null; }
  location.hash = "";
  signIn();
});
window.addEventListener("hashchange", route);
window.addEventListener("gpucaas:unauthorized", () => {
  if (!ctx) return;
  session.clear();
  if (cleanup) { cleanup(); cleanup = null; }
  signIn(new Error("The token was refused (revoked or expired): sign in again."));
});

(async () => {
  if (!session.token) return signIn();
  try {
    await start(await api("GET", "/v1/whoami"));
  } catch (err) {
    session.clear();
    signIn(err);
  }
})();
