// The console shell: token form, identity line, notices, and hash routing (#page?filter=value).
// Filters live in the URL fragment, which never reaches any server; the token never does.

import { claims, forgetToken, listen, setToken, token, TokenRefused } from "./api.js";
import { el, replace, relative } from "./dom.js";
import * as grants from "./grants.js";
import * as events from "./events.js";
import * as chain from "./chain.js";
import * as capability from "./capability.js";

const PAGES = { grants, events, chain, capability };
const $ = (id) => document.getElementById(id);
let controller = null;  // aborts the previous page's loads (and retries) on navigation

function notice(message, kind = "error") {
  const box = $("notice");
  box.hidden = !message;
  box.className = kind;
  box.textContent = message || "";
}

function showIdentity() {
  const c = claims();
  $("forget").hidden = !token();
  if (!c) { replace($("identity")); return; }
  const who = `${c.tenant ?? "?"}/${c.sub ?? "?"}`;
  const expires = typeof c.exp === "number" ? `, expires ${relative(new Date(c.exp * 1000).toISOString())}` : "";
  replace($("identity"), el("span", { class: "who" }, who), ` · ${c.scope ?? ""}${expires}`);
}

function route() {
  const [name, query] = (location.hash.slice(1) || "grants").split("?");
  const page = PAGES[name] ? name : "grants";
  return { page, params: Object.fromEntries(new URLSearchParams(query || "")) };
}

/** Navigate to `page` with `params` (pages call this when filters change). */
export function go(page, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== "")).toString();
  const hash = `#${page}${query ? `?${query}` : ""}`;
  if (location.hash === hash) render(); else location.hash = hash;
}

async function render() {
  controller?.abort();
  const mine = new AbortController();
  controller = mine;
  const { page, params } = route();
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.dataset.page === page);
  }
  showIdentity();
  const root = $("page");
  if (!token()) {
    $("login").hidden = false;
    replace(root);
    return;
  }
  $("login").hidden = true;
  replace(root, el("p", { class: "loading" }, "Loading…"));
  try {
    await PAGES[page].render(root, params, { signal: mine.signal, go });
  } catch (error) {
    // A refused token, or a load abandoned for another page: already shown, or no longer wanted.
    if (error instanceof TokenRefused || error.name === "AbortError" || mine.signal.aborted) return;
    notice(error.message);
  }
}

listen("refused", (error) => {
  const why = error.status === 401
    ? "The registry refused this token (expired, revoked, or not a capreg caller token)."
    : `This token lacks a scope the console needs: ${error.message}.`;
  notice(`${why} It has been forgotten; paste another one.`);
  controller?.abort();
  showIdentity();
  $("login").hidden = false;
  replace($("page"));
});

listen("unreachable", ({ wait, status }) => {
  const box = $("connection");
  box.hidden = false;
  box.textContent = `The registry is not answering${status ? ` (HTTP ${status})` : ""}; retrying in ${Math.round(wait / 1000)} s…`;
});

listen("reachable", () => {
  const box = $("connection");
  if (!box.hidden) { box.hidden = true; box.textContent = ""; }
});

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("token-input");
  const value = input.value.trim().replace(/^Bearer\s+/i, "");
  input.value = "";
  if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(value)) {
    notice("That is not a JWT (three base64url parts separated by dots).");
    return;
  }
  setToken(value);
  notice(null);
  render();
});

$("forget").addEventListener("click", () => {
  forgetToken();
  notice("Token forgotten.", "info");
  render();
});

window.addEventListener("hashchange", () => { notice(null); render(); });
render();

