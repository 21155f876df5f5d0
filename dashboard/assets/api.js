// The rocemesh REST API as the browser reads it: JSON GETs carrying the operator's
// bearer token (kept in localStorage) when one is set.

const TOKEN_KEY = 'rocemesh.token';

/** A failed request: `status` 0 when the server could not be reached. */
export class ApiError extends Error {
  constructor(path, status, message) {
    super(status ? `HTTP ${status}: ${message}` : message);
    this.path = path;
    this.status = status;
  }
}

let unauthorized = () => {};

/** Calls `fn` whenever the API answers 401 (a token is needed or was refused). */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

/** The stored token, or '' (storage may be unavailable). */
export function token() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

/** Stores (or with '' forgets) the token. */
export function setToken(value) {
  try {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Private mode without storage: the token lasts for this page only.
  }
}

/** GETs `path` and parses its JSON; throws ApiError with the server's reason. */
export async function getJson(path) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  let resp;
  try {
    resp = await fetch(path, { headers, cache: 'no-store' });
  } catch {
    throw new ApiError(path, 0, 'server unreachable');
  }
  if (resp.status === 401) unauthorized();
  if (!resp.ok) {
    let reason = resp.statusText;
    try {
      const body = await resp.json();
      if (body && body.error) reason = body.error;
    } catch {
      // Not an ErrorBody: keep the status text.
    }
    throw new ApiError(path, resp.status, reason);
  }
  return resp.json();
}
