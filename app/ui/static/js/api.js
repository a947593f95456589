// The server's API as the pages use it: relative URLs (so --api-prefix works), the API key, JSON and
// server-sent events. Every request goes through apiFetch.

const KEY_STORAGE = "vertex-llama.api-key";

let keyListener = null;

/** Called with the failed response whenever the server answers 401. */
export function onKeyNeeded(listener) {
  keyListener = listener;
}

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) {
    localStorage.setItem(KEY_STORAGE, key);
  } else {
    localStorage.removeItem(KEY_STORAGE);
  }
}

/** A route path ("/v1/chat/completions") as a URL below the page's own location. */
export function apiUrl(path) {
  return new URL(path.replace(/^\//, ""), document.baseURI).toString();
}

/** A failed answer: the server's error body, when it sent one. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body && body.error;
    const message = error && typeof error === "object" ? error.message : (error || `HTTP ${status}`);
    super(message);
    this.status = status;
    this.body = body;
  }
}

export async function apiFetch(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const key = apiKey();
  if (key) {
    headers.set("Authorization", `Bearer ${key}`);
  }
  if (options.body !== undefined && !headers.has("Content-Type")) {
    headers.set("Content-Type", "application/json");
  }
  const response = await fetch(apiUrl(path), { ...options, headers });
  if (response.status === 401 && keyListener) {
    keyListener(response);
  }
  return response;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  return new ApiError(response.status, body);
}

/** The answer when it is a success; an ApiError with the server's error body otherwise. */
async function apiOk(path, init) {
  const response = await apiFetch(path, init);
  if (!response.ok) {
    throw await errorOf(response);
  }
  return response;
}

/** GET or POST a JSON route; the parsed body, or an ApiError. */
export async function apiJson(path, body, options = {}) {
  const init = body === undefined ? { ...options } : { method: "POST", body: JSON.stringify(body), ...options };
  return (await apiOk(path, init)).json();
}

/** GET a text route (/metrics). */
export async function apiText(path) {
  return (await apiOk(path)).text();
}

/**
 * POST a streaming route and call onData with each event's parsed data until [DONE]. An HTTP error
 * before the stream starts is an ApiError; an error event inside the stream is one too.
 */
export async function apiStream(path, body, onData, signal) {
  const response = await apiOk(path, { method: "POST", body: JSON.stringify(body), signal });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      return;
    }
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart()).join("\n");
      if (!data) {
        continue;
      }
      if (data === "[DONE]") {
        return;
      }
      const parsed = JSON.parse(data);
      if (parsed && parsed.error) {
        throw new ApiError(response.status, parsed);
      }
      onData(parsed);
    }
  }
}
