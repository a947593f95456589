// The Vertex AI predict console: instances that name routes by @requestFormat (from the live alias
// table, GET /vertex/aliases), sent to AIP_PREDICT_ROUTE, with each prediction shown on its own and
// the same request written as curl, `python -m gcp predict` and Vertex AI SDK code.

import { apiJson, apiKey, apiUrl, ApiError } from "./api.js";
import { byId, el, pretty } from "./dom.js";
import { loadObject, saveObject } from "./store.js";

const HELLO = [{ role: "user", content: "Say hello in five words." }];

/** A starting body for an instance, by the route it names. */
function exampleBody(path, model, routed = false) {
  const examples = {
    "/v1/chat/completions": { messages: HELLO, max_tokens: 32 },
    "/chat/completions": { messages: HELLO, max_tokens: 32 },
    "/completion": { prompt: "Once upon a time", n_predict: 32 },
    "/completions": { prompt: "Once upon a time", n_predict: 32 },
    "/v1/completions": { prompt: "Once upon a time", max_tokens: 32 },
    "/v1/responses": { input: "Say hello in five words.", max_output_tokens: 32 },
    "/responses": { input: "Say hello in five words.", max_output_tokens: 32 },
    "/v1/messages": { model, messages: HELLO, max_tokens: 32 },
    "/v1/messages/count_tokens": { model, messages: HELLO },
    "/chat/completions/input_tokens": { messages: HELLO },
    "/v1/chat/completions/input_tokens": { messages: HELLO },
    "/apply-template": { messages: HELLO },
    "/tokenize": { content: "Hello, world" },
    "/detokenize": { tokens: [1, 2, 3] },
    "/infill": { input_prefix: "def add(a, b):\n    ", input_suffix: "\n", n_predict: 16 },
    "/embedding": { content: "Hello, world" },
    "/embeddings": { content: "Hello, world" },
    "/v1/embeddings": { input: "Hello, world" },
    "/rerank": { query: "greeting", documents: ["hello there", "the sky is blue"] },
  };
  const body = examples[path] || {};
  return routed ? { model, ...body } : body; // a router's instance names its model
}

function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

/** A JSON value written as a Python literal (True, False, None). */
function pythonLiteral(value, indent = "") {
  const inner = `${indent}    `;
  if (value === null) {
    return "None";
  }
  if (value === true || value === false) {
    return value ? "True" : "False";
  }
  if (typeof value === "string" || typeof value === "number") {
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    if (!value.length) {
      return "[]";
    }
    return `[\n${value.map((item) => inner + pythonLiteral(item, inner)).join(",\n")},\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) {
    return "{}";
  }
  return `{\n${entries.map(([key, item]) => `${inner}${JSON.stringify(key)}: ${pythonLiteral(item, inner)}`)
    .join(",\n")},\n${indent}}`;
}

export class VertexConsole {
  constructor() {
    this.table = null;
    this.model = "";
    this.instances = byId("instances");
    this.endpointForm = byId("endpoint-form");
    byId("add-instance").addEventListener("click", () => this.addInstance());
    byId("predict-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    byId("predict-form").addEventListener("input", () => this.renderSnippets());
    const endpoint = loadObject("vertex-endpoint");
    for (const name of ["project", "region", "endpoint"]) {
      this.endpointForm.elements[name].value = endpoint[name] || "";
    }
    this.endpointForm.addEventListener("input", () => {
      saveObject("vertex-endpoint", Object.fromEntries(new FormData(this.endpointForm)));
      this.renderSnippets();
    });
  }

  /** The alias table is known: build the form with one chat instance. */
  configure(table, model, routed = false) {
    this.table = table;
    this.model = model;
    this.routed = routed;
    byId("predict-route").textContent = table.predict_route;
    const collisions = table.collisions || [];
    byId("alias-collisions").hidden = collisions.length === 0;
    byId("collision-list").replaceChildren(...collisions.map((item) => el("li", { text: item.message })));
    if (!this.instances.children.length) {
      this.addInstance("chatCompletions");
    }
    this.renderSnippets();
  }

  /** Every value @requestFormat may take: the aliases, then the literal paths of collision losers. */
  choices() {
    const choices = this.table.aliases.map((item) => ({
      value: item.alias, label: `${item.alias} — ${item.method} ${item.path}`, path: item.path,
    }));
    for (const item of this.table.collisions || []) {
      choices.push({ value: item.loser_reachable_as, label: `${item.loser_reachable_as} — ${item.loser.method}`,
        path: item.loser.path });
    }
    return choices;
  }

  /** A new instance naming ``format``; by default the route the last instance names. */
  addInstance(format) {
    const choices = this.choices();
    const last = this.instances.lastElementChild;
    const wanted = format || (last && last.querySelector("select.format").value);
    const chosen = choices.find((choice) => choice.value === wanted) || choices[0];
    const number = this.instances.children.length + 1;
    const select = el("select", { class: "format" }, ...choices.map((choice) =>
      el("option", { value: choice.value, text: choice.label, selected: choice === chosen })));
    const body = el("textarea", { class: "code body", rows: 6, spellcheck: "false" });
    body.value = pretty(exampleBody(chosen.path, this.model, this.routed));
    const error = el("div", { class: "field-error", role: "alert" });
    select.addEventListener("change", () => {
      const path = choices.find((choice) => choice.value === select.value).path;
      body.value = pretty(exampleBody(path, this.model, this.routed));
      this.renderSnippets();
    });
    const item = el("li", { class: "instance" },
      el("div", { class: "instance-head" },
        el("label", {}, `Instance ${number}: @requestFormat`, select),
        el("button", { type: "button", class: "secondary remove", text: "Remove",
          "aria-label": `Remove instance ${number}`, onclick: () => this.removeInstance(item) })),
      el("label", {}, "Body (JSON)", body),
      error);
    this.instances.append(item);
    this.renderSnippets();
    return item;
  }

  removeInstance(item) {
    item.remove();
    [...this.instances.children].forEach((instance, index) => {
      instance.querySelector("label").firstChild.textContent = `Instance ${index + 1}: @requestFormat`;
      instance.querySelector(".remove").setAttribute("aria-label", `Remove instance ${index + 1}`);
    });
    this.renderSnippets();
  }

  /** The predict body from the form, or null when a field is not valid JSON (each such field says why). */
  requestBody() {
    let valid = true;
    const instances = [...this.instances.children].map((item) => {
      const area = item.querySelector("textarea.body");
      const error = item.querySelector(".field-error");
      try {
        const body = JSON.parse(area.value || "{}");
        if (!body || typeof body !== "object" || Array.isArray(body)) {
          throw new Error("the body must be a JSON object");
        }
        area.removeAttribute("aria-invalid");
        error.textContent = "";
        return { "@requestFormat": item.querySelector("select.format").value, ...body };
      } catch (problem) {
        valid = false;
        area.setAttribute("aria-invalid", "true");
        error.textContent = `Not valid JSON: ${problem.message}`;
        return null;
      }
    });
    const parametersArea = byId("parameters");
    let parameters = null;
    try {
      parameters = parametersArea.value.trim() ? JSON.parse(parametersArea.value) : null;
      parametersArea.removeAttribute("aria-invalid");
    } catch {
      valid = false;
      parametersArea.setAttribute("aria-invalid", "true");
    }
    if (!valid) {
      return null;
    }
    return parameters ? { instances, parameters } : { instances };
  }

  renderSnippets() {
    if (!this.table) {
      return;
    }
    const body = this.requestBody();
    const fix = "(fix the JSON above)";
    const endpoint = Object.fromEntries(new FormData(this.endpointForm));
    const project = endpoint.project || "PROJECT";
    const region = endpoint.region || "us-central1";
    const id = endpoint.endpoint || "ENDPOINT_ID";
    const auth = apiKey() ? " \\\n  -H 'Authorization: Bearer $API_KEY'" : "";
    byId("snippet-curl").textContent = body ? `curl ${apiUrl(this.table.predict_route)} \\\n`
      + `  -H 'Content-Type: application/json'${auth} \\\n  -d ${shellQuote(JSON.stringify(body))}` : fix;
    byId("snippet-gcp").textContent = body ? `python -m gcp predict --project ${project} --region ${region} \\\n`
      + `  --endpoint ${id} \\\n  --instances ${shellQuote(JSON.stringify(body.instances))}`
      + (body.parameters ? ` \\\n  --parameters ${shellQuote(JSON.stringify(body.parameters))}` : "") : fix;
    byId("snippet-sdk").textContent = body ? "from google.cloud import aiplatform\n\n"
      + `aiplatform.init(project=${JSON.stringify(project)}, location=${JSON.stringify(region)})\n`
      + `endpoint = aiplatform.Endpoint(${JSON.stringify(id)})\n`
      + `response = endpoint.predict(\n    instances=${pythonLiteral(body.instances, "    ")},\n`
      + (body.parameters ? `    parameters=${pythonLiteral(body.parameters, "    ")},\n` : "")
      + ")\nfor prediction in response.predictions:\n    print(prediction)\n" : fix;
  }

  async send() {
    const body = this.requestBody();
    const summary = byId("predict-summary");
    const list = byId("predictions");
    if (!body) {
      summary.textContent = "Fix the fields marked invalid first.";
      return;
    }
    const button = byId("send-predict");
    button.disabled = true;
    summary.textContent = `Sending ${body.instances.length} instance(s)…`;
    list.replaceChildren();
    const started = performance.now();
    try {
      const answer = await apiJson(this.table.predict_route, body);
      const seconds = ((performance.now() - started) / 1000).toFixed(2);
      const predictions = answer.predictions || [];
      const failed = predictions.filter((prediction) => prediction && prediction.error).length;
      summary.textContent = `${predictions.length} prediction(s) in ${seconds} s, ${failed} with an error.`;
      list.replaceChildren(...predictions.map((prediction, index) =>
        predictionItem(prediction, index, body.instances[index])));
    } catch (error) {
      const status = error instanceof ApiError ? ` (HTTP ${error.status})` : "";
      summary.textContent = `The request failed${status}: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  }
}

function predictionItem(prediction, index, instance) {
  const failed = Boolean(prediction && prediction.error);
  const format = instance ? instance["@requestFormat"] : "";
  return el("li", { class: `prediction ${failed ? "failed" : "ok"}` },
    el("div", {},
      el("span", { class: "verdict", text: failed ? "Error" : "OK" }),
      ` · instance ${index + 1} · ${format}`),
    el("pre", { tabindex: "0", text: pretty(prediction) }));
}
