// Start-up: wait for the model, ask for the API key when the server wants one, learn what the
// server offers, then wire the three views (chat, Vertex predict console, server) and the tabs.

import { loadTools } from "./agent.js";
import { apiFetch, apiJson, ApiError, onKeyNeeded, setApiKey, apiKey } from "./api.js";
import { ChatView } from "./chat.js";
import { byId, el, showStatus } from "./dom.js";
import { ServerView } from "./server.js";
import { VertexConsole } from "./vertex.js";

const ALIASES_PATH = "/vertex/aliases";
const POLL_MS = 1000;

const chat = new ChatView();
const vertex = new VertexConsole();
const server = new ServerView();

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---- tabs (WAI-ARIA tabs: arrow keys move between them, Home/End jump) ----

function tabs() {
  return [...document.querySelectorAll('[role="tab"]')].filter((tab) => !tab.hidden);
}

function selectTab(tab, focus = false) {
  for (const other of document.querySelectorAll('[role="tab"]')) {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    byId(other.getAttribute("aria-controls")).hidden = !selected;
  }
  if (focus) {
    tab.focus();
  }
  if (tab.id === "tab-server") {
    server.show();
  } else {
    server.hide();
  }
}

for (const tab of document.querySelectorAll('[role="tab"]')) {
  tab.addEventListener("click", () => selectTab(tab));
  tab.addEventListener("keydown", (event) => {
    const visible = tabs();
    const index = visible.indexOf(tab);
    const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: visible.length - 1 };
    if (event.key in moves) {
      event.preventDefault();
      selectTab(visible[(moves[event.key] + visible.length) % visible.length], true);
    }
  });
}

// ---- the API key ----

let keyRequest = null;

/** Open the key dialog (once at a time); resolves when a key was given. */
function askForKey(reason) {
  if (keyRequest) {
    return keyRequest;
  }
  const dialog = byId("key-dialog");
  byId("key-reason").textContent = reason;
  byId("key-input").value = apiKey();
  keyRequest = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      keyRequest = null;
      if (dialog.returnValue === "save") {
        setApiKey(byId("key-input").value.trim());
        resolve(true);
      } else {
        resolve(false);
      }
    }, { once: true });
  });
  dialog.showModal();
  return keyRequest;
}

byId("key-button").addEventListener("click", () => askForKey("The API key this browser sends to the server."));
onKeyNeeded(() => {
  if (booted) {
    askForKey(apiKey() ? "The server refused the API key." : "This server needs an API key.");
  }
});

// ---- start-up ----

let booted = false;

async function waitUntilHealthy() {
  for (;;) {
    try {
      const response = await apiFetch("/health");
      if (response.ok) {
        showStatus("");
        return;
      }
      showStatus(response.status === 503 ? "Loading model… the page is ready and waits for it." :
        `The server answers ${response.status}; retrying.`, response.status !== 503);
    } catch {
      showStatus("Cannot reach the server; retrying.", true);
    }
    await sleep(POLL_MS);
  }
}

/** /props (of one model of a router, with ``model``), asking for the API key for as long as the server refuses it. */
async function loadProps(model = "") {
  for (;;) {
    try {
      return await apiJson(model ? `/props?model=${encodeURIComponent(model)}` : "/props");
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 401) {
        throw error;
      }
      const reason = apiKey() ? "The server refused this API key." : "This server needs an API key (it was started with --api-key).";
      showStatus("Waiting for an API key.");
      await askForKey(reason);
    }
  }
}

// ---- a router's models (llama-server's router mode: every request names its model) ----

const MODEL_KEY = "vertex-llama.router-model";
let routed = false;
let aliases = null;
let toolsEnabled = false; // agent mode: the server's (a router's own) /props says whether /tools lists any

/** Configure the views for ``model``; on a router, its /props first (which loads the model). */
async function useModel(model, props) {
  if (routed) {
    showStatus(`Loading ${model}… (a router starts a model on its first request)`);
    props = await loadProps(model);
    localStorage.setItem(MODEL_KEY, model);
    showStatus("");
  }
  chat.configure(model, props, toolsEnabled ? await loadTools() : []);
  server.configure(props, model, routed);
  if (aliases) {
    vertex.configure(aliases, model, routed);
  }
}

function showPicker(ids, chosen) {
  const picker = byId("model-picker");
  picker.replaceChildren(...ids.map((id) => el("option", { value: id, text: id })));
  picker.value = chosen;
  picker.hidden = false;
  byId("model-name").hidden = true;
  picker.addEventListener("change", () => {
    useModel(picker.value, null).catch((error) => showStatus(`Cannot use ${picker.value}: ${error.message}`, true));
  });
}

async function boot() {
  await waitUntilHealthy();
  const [models, openapi] = await Promise.all([apiJson("/v1/models"), apiJson("/openapi.json")]);
  const ids = (models.data || []).map((entry) => entry.id);
  let model = ids[0] || "";
  byId("model-name").textContent = model;
  const props = await loadProps();
  routed = props.role === "router";
  toolsEnabled = Boolean(props.tools_enabled);
  if (routed) {
    const saved = localStorage.getItem(MODEL_KEY);
    model = ids.includes(saved) ? saved : model;
    showPicker(ids, model);
  }
  if (Object.keys(openapi.paths || {}).some((path) => path.endsWith(ALIASES_PATH))) {
    aliases = await apiJson(ALIASES_PATH);
    byId("tab-vertex").hidden = false;
  }
  await useModel(model, props);
  showStatus("");
  booted = true;
  document.body.dataset.ready = "true";
}

boot().catch((error) => showStatus(`The UI could not start: ${error.message}`, true));
