// The console's only way to the registry: same-origin fetches with the pasted bearer token.
// The token lives in this tab's sessionStorage (never a cookie, never a URL) and is forgotten as soon
// as the registry refuses it. An unreachable registry is retried with backoff until it answers.

const TOKEN_KEY = "capreg.console.token";
const listeners = { refused: [], unreachable: [], reachable: [] };

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || null;
    this.reason = problem.reason || null;
    this.problem = problem;
  }
}

/** Thrown to abandon a page load whose token was refused (the page shows the login form). */
export class TokenRefused extends Error {}

export function listen(kind, handler) { listeners[kind].push(handler); }
function emit(kind, ...args) { for (const handler of listeners[kind]) handler(...args); }

export function token() { return sessionStorage.getItem(TOKEN_KEY); }
export function setToken(value) { sessionStorage.setItem(TOKEN_KEY, value); }
export function forgetToken() { sessionStorage.removeItem(TOKEN_KEY); }

/** The token's claims as it states them (display only: the registry decides what it may do). */
export function claims() {
  const value = token();
  if (!value) return null;
  try {
    const part = value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
    const parsed = JSON.parse(json);
    return parsed && typeof parsed === "object" ? parsed : null;
  } catch {
    return null;
  }
}

export function holds(scope) {
  const c = claims();
  return !!c && typeof c.scope === "string" && c.scope.split(" ").includes(scope);
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

const RETRYABLE = new Set([502, 503, 504]);

/**
 * One API call. Resolves to the parsed JSON (or the raw Response with `raw: true`).
 * 401, and 403 insufficient_scope for a scope the console needs (`needs`), forget the token and
 * throw TokenRefused; other problems throw ApiError. Network failures and 502/503/504 are retried
 * (1 s, 2 s, 4 s ... at most 15 s apart) until the registry answers or `signal` aborts.
 */
export async function api(path, { method = "GET", body, accept = "application/json", raw = false, signal, needs } = {}) {
  const headers = { Accept: accept };
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let delay = 1000;
  for (let attempt = 1; ; attempt += 1) {
    if (signal?.aborted) throw new DOMException("abandoned", "AbortError");
    let response;
    try {
      response = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "omit", cache: "no-store", redirect: "error", referrerPolicy: "no-referrer", signal,
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      response = null;
    }
    if (response === null || RETRYABLE.has(response.status)) {
      const retryAfter = Number(response?.headers.get("Retry-After"));
      const wait = Math.min(Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : delay, 15000);
      emit("unreachable", { attempt, wait, status: response?.status ?? null });
      await sleep(wait, signal);
      delay = Math.min(delay * 2, 15000);
      continue;
    }
    emit("reachable");
    if (response.ok) {
      if (raw) return response;
      return response.status === 204 ? null : response.json();
    }
    let problem = {};
    try { problem = await response.json(); } catch { /* not a problem document */ }
    if (signal?.aborted) throw new DOMException("abandoned", "AbortError");
    const error = new ApiError(response.status, problem);
    const missing = Array.isArray(problem.missingScopes) ? problem.missingScopes : [];
    if (response.status === 401 || (response.status === 403 && error.code === "insufficient_scope" && needs && missing.includes(needs))) {
      forgetToken();
      emit("refused", error);
      throw new TokenRefused(error.message);
    }
    throw error;
  }
}

/** `path` with the non-empty `params` as its query string. */
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(name, value);
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}
