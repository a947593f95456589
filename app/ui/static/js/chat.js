// Chat: streaming /v1/chat/completions, conversations kept in the browser, a stop button that
// cancels the request (the server frees the slot when the client goes away), and the agent loop where the
// server has tools (agent.js): tool calls run, their results go back, the model answers again.

import { runTool, toolChoiceFor, toolDefinitions } from "./agent.js";
import { apiStream } from "./api.js";
import { apiMessage } from "./messages.js";
import { byId, el } from "./dom.js";
import { loadConversations, loadObject, newConversation, saveConversations, saveObject } from "./store.js";

const NUMBER_FIELDS = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];
const INTEGER_FIELDS = new Set(["top_k", "max_tokens", "seed"]);
const AGENT_FIELDS = ["tool_use", "max_steps"];
const SETTING_FIELDS = [...NUMBER_FIELDS, "system", "stop", ...AGENT_FIELDS]; // every field of the settings form
const AGENT_DEFAULTS = { tool_use: "auto", max_steps: 8 };
const RANDOM_SEED = 4294967295;

export class ChatView {
  constructor() {
    this.conversations = loadConversations();
    this.current = this.conversations[0] || null;
    this.model = "";
    this.defaults = {};
    this.controller = null;
    this.pendingImage = null;
    this.tools = [];
    this.ready = false;
    this.form = byId("settings-form");
    this.prompt = byId("prompt");
    this.messages = byId("messages");
    byId("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    byId("stop").addEventListener("click", () => this.stop());
    byId("new-chat").addEventListener("click", () => this.startNew());
    byId("settings-reset").addEventListener("click", () => this.resetSettings());
    this.form.addEventListener("input", () => saveObject("chat-settings", this.settingsOverrides()));
    byId("image-input").addEventListener("change", (event) => this.attach(event.target.files[0]));
    this.renderConversations();
    this.renderMessages();
  }

  /** The server is ready: its model name, default sampling, whether the model takes images, its tools. */
  configure(model, props, tools = []) {
    this.model = model;
    this.tools = tools;
    byId("agent-settings").hidden = tools.length === 0;
    const params = (props.default_generation_settings || {}).params || {};
    this.defaults = {
      temperature: params.temperature,
      top_p: params.top_p,
      top_k: params.top_k,
      min_p: params.min_p,
      max_tokens: params.n_predict > 0 ? params.n_predict : "",
      seed: params.seed === RANDOM_SEED || params.seed < 0 ? "" : params.seed,
      ...AGENT_DEFAULTS,
    };
    // the server's --ui-config: defaults for the fields of this form
    for (const [name, value] of Object.entries(props.ui_settings || {})) {
      if (SETTING_FIELDS.includes(name)) {
        this.defaults[name] = value;
      }
    }
    this.fillSettings({ ...this.defaults, ...loadObject("chat-settings") });
    byId("image-picker").hidden = !(props.modalities && props.modalities.vision);
    this.ready = true;
    this.updateButtons();
  }

  fillSettings(values) {
    for (const name of SETTING_FIELDS) {
      const value = values[name];
      this.form.elements[name].value = value === undefined || value === null ? "" : value;
    }
  }

  resetSettings() {
    saveObject("chat-settings", {});
    this.fillSettings({ ...this.defaults, system: "", stop: "" });
  }

  /** The fields the user changed from the server's defaults. */
  settingsOverrides() {
    const overrides = {};
    for (const name of SETTING_FIELDS) {
      const value = this.form.elements[name].value;
      if (String(value) !== String(this.defaults[name] ?? "")) {
        overrides[name] = value;
      }
    }
    return overrides;
  }

  /** The request fields from the settings form: empty fields are left to the server. */
  requestSettings() {
    const fields = {};
    for (const name of NUMBER_FIELDS) {
      const raw = this.form.elements[name].value.trim();
      if (raw !== "") {
        fields[name] = INTEGER_FIELDS.has(name) ? parseInt(raw, 10) : parseFloat(raw);
      }
    }
    const stop = this.form.elements.stop.value.split("\n").filter((line) => line !== "");
    if (stop.length) {
      fields.stop = stop;
    }
    return fields;
  }

  updateButtons() {
    const busy = this.controller !== null;
    byId("send").disabled = !this.ready || busy;
    this.prompt.disabled = !this.ready;
    byId("stop").disabled = !busy;
  }

  startNew() {
    if (this.controller) {
      return;
    }
    this.current = null;
    this.renderConversations();
    this.renderMessages();
    this.prompt.focus();
  }

  open(conversation) {
    if (this.controller) {
      return;
    }
    this.current = conversation;
    this.renderConversations();
    this.renderMessages();
  }

  remove(conversation) {
    if (this.controller && conversation === this.current) {
      return;
    }
    this.conversations = this.conversations.filter((item) => item !== conversation);
    if (conversation === this.current) {
      this.current = null;
    }
    saveConversations(this.conversations);
    this.renderConversations();
    this.renderMessages();
  }

  attach(file) {
    if (!file) {
      this.pendingImage = null;
      byId("image-name").textContent = "";
      return;
    }
    const reader = new FileReader();
    reader.onload = () => {
      this.pendingImage = reader.result;
      byId("image-name").textContent = file.name;
    };
    reader.readAsDataURL(file);
  }

  renderConversations() {
    const list = byId("conversation-list");
    list.replaceChildren(...this.conversations.map((conversation) => el("li", {},
      el("button", {
        type: "button", class: "open", text: conversation.title, title: conversation.title,
        "aria-current": conversation === this.current ? "true" : "false",
        onclick: () => this.open(conversation),
      }),
      el("button", {
        type: "button", class: "delete", text: "×", "aria-label": `Delete conversation ${conversation.title}`,
        onclick: () => this.remove(conversation),
      }),
    )));
  }

  renderMessages() {
    const messages = this.current ? this.current.messages : [];
    this.messages.replaceChildren(...messages.map((message) => messageItem(message)));
  }

  apiMessages() {
    const system = this.form.elements.system.value.trim();
    const history = this.current.messages.filter((message) => !message.error || message.content)
      .map(apiMessage);
    return system ? [{ role: "system", content: system }, ...history] : history;
  }

  async send() {
    const text = this.prompt.value.trim();
    if (!this.ready || this.controller || (!text && !this.pendingImage)) {
      return;
    }
    if (!this.current) {
      this.current = newConversation();
      this.conversations.unshift(this.current);
    }
    const user = { role: "user", content: text };
    if (this.pendingImage) {
      user.image = this.pendingImage;
      this.attach(null);
      byId("image-input").value = "";
    }
    this.current.messages.push(user);
    if (this.current.title === "New chat") {
      this.current.title = text.slice(0, 40) || "Image";
    }
    this.prompt.value = "";
    this.renderConversations();
    this.renderMessages();
    this.controller = new AbortController();
    this.updateButtons();
    try {
      // one answer, then (agent mode) each of its tool calls run and answered again, up to max_steps rounds
      for (let step = 0; ; step += 1) {
        const reply = await this.answer(step);
        if (reply.stopped || reply.error || reply.tool_calls.length === 0 || !this.agentOn()) {
          break;
        }
        for (const call of reply.tool_calls) {
          if (!(await this.runCall(call))) {
            return;
          }
        }
      }
    } finally {
      this.controller = null;
      saveConversations(this.conversations);
      this.updateButtons();
    }
  }

  agentOn() {
    return this.tools.length > 0 && this.form.elements.tool_use.value !== "off";
  }

  /** One streamed assistant message (with the tools and this step's tool_choice in agent mode). */
  async answer(step) {
    const body = { model: this.model, messages: this.apiMessages(), stream: true, ...this.requestSettings() };
    if (this.agentOn()) {
      const maxSteps = Math.max(0, parseInt(this.form.elements.max_steps.value, 10) || 0);
      const first = this.form.elements.tool_use.value === "required" ? "required" : "auto";
      body.tools = toolDefinitions(this.tools);
      body.tool_choice = toolChoiceFor(step, maxSteps, first);
    }
    const reply = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
    const item = this.append(reply);
    try {
      await apiStream("/v1/chat/completions", body, (chunk) => {
        applyChunk(reply, chunk, step);
        updateItem(item, reply);
      }, this.controller.signal);
    } catch (error) {
      if (error.name === "AbortError") {
        reply.stopped = true;
      } else {
        reply.error = error.message;
      }
    } finally {
      item.removeAttribute("aria-busy");
      updateItem(item, reply);
    }
    return reply;
  }

  /** Run one tool call on the server and add its result; false when the user stopped it. */
  async runCall(call) {
    const result = { role: "tool", name: call.name, arguments: call.arguments, tool_call_id: call.id, content: "" };
    const item = this.append(result);
    try {
      result.content = await runTool(this.tools, call, this.controller.signal);
    } catch (error) {
      if (error.name === "AbortError") {
        result.stopped = true;
        result.content = JSON.stringify({ error: "stopped by the user" });
      } else {
        result.content = JSON.stringify({ error: error.message });
      }
    } finally {
      item.removeAttribute("aria-busy");
      updateItem(item, result);
    }
    return !result.stopped;
  }

  /** A message added to the conversation and its (busy) item in the list. */
  append(message) {
    this.current.messages.push(message);
    const item = messageItem(message);
    item.setAttribute("aria-busy", "true");
    this.messages.append(item);
    return item;
  }

  stop() {
    if (this.controller) {
      this.controller.abort();
    }
  }
}

function applyChunk(reply, chunk, step) {
  const choice = (chunk.choices || [])[0];
  const delta = (choice && choice.delta) || {};
  if (delta.content) {
    reply.content += delta.content;
  }
  if (delta.reasoning_content) {
    reply.reasoning += delta.reasoning_content;
  }
  for (const call of delta.tool_calls || []) {
    const index = call.index ?? reply.tool_calls.length;
    const known = reply.tool_calls[index]
      || (reply.tool_calls[index] = { id: call.id || `call_${step}_${index}`, name: "", arguments: "" });
    if (call.function && call.function.name) {
      known.name += call.function.name;
    }
    if (call.function && call.function.arguments) {
      known.arguments += call.function.arguments;
    }
  }
  if (choice && choice.finish_reason) {
    reply.finish_reason = choice.finish_reason;
  }
  if (chunk.timings) {
    reply.timings = chunk.timings;
  }
}

function statsText(timings) {
  const speed = timings.predicted_per_second ? `${timings.predicted_per_second.toFixed(1)} tokens/s · ` : "";
  return `${speed}prompt ${timings.prompt_n} · cached ${timings.cache_n} · generated ${timings.predicted_n}`;
}

function messageItem(message) {
  const role = message.role === "tool" ? `tool: ${message.name}` : message.role;
  const item = el("li", { class: `message ${message.role}` }, el("div", { class: "role", text: role }));
  updateItem(item, message);
  return item;
}

/** Redraw one message's parts in place (called for every streamed chunk). */
function updateItem(item, message) {
  const parts = [item.querySelector(".role")];
  if (message.reasoning) {
    const open = Boolean(item.querySelector("details.reasoning[open]")); // folded unless the reader opened it
    parts.push(el("details", { class: "reasoning", open }, el("summary", { text: "Reasoning" }),
      el("pre", { text: message.reasoning })));
  }
  if (message.role === "tool") {
    parts.push(el("pre", { class: "tool-arguments", text: message.arguments || "{}" }));
    parts.push(el("pre", { class: "tool-result", text: message.content || "running…" }));
  } else {
    parts.push(el("div", { class: "content", text: message.content }));
  }
  if (message.image) {
    parts.push(el("img", { src: message.image, alt: "Attached image" }));
  }
  for (const call of message.tool_calls || []) {
    parts.push(el("div", { class: "tool-call" }, el("strong", { text: `Tool call: ${call.name}` }),
      el("pre", { text: call.arguments })));
  }
  if (message.timings) {
    parts.push(el("div", { class: "stats", text: statsText(message.timings) }));
  }
  if (message.stopped) {
    parts.push(el("div", { class: "stats", text: "Stopped." }));
  }
  if (message.error) {
    parts.push(el("div", { class: "error", role: "alert", text: `Error: ${message.error}` }));
  }
  item.replaceChildren(...parts);
}
