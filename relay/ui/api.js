// relay API client shared by the dashboard and the portal: a bearer token in the
// Authorization header (never in a URL), JSON in and out, errors as exceptions.

/** The token was refused (401): signed out (dashboard) or expired (portal). */
export class AuthError extends Error {}

/** Any other non-2xx answer, with relay's `{error, message}` body. */
export class ApiError extends Error {
  constructor(message, status, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

/** api(method, path, params, body) against relay's base `root`, `token()` per call. */
export function client(root, token) {
  return async function api(method, path, params, body) {
    const url = new URL(path, root);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
    }
    const headers = { Authorization: `Bearer ${token()}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(url, {
      method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) throw new AuthError("token rejected");
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) throw new ApiError((data && data.message) || `HTTP ${res.status}`, res.status, data);
    return data;
  };
}
