// The server view: /props, the slots and the main /metrics figures, refreshed while the view is
// shown, with a chart of tokens/s and queue length over the last minutes.

import { apiJson, apiText } from "./api.js";
import { byId, el, fillList } from "./dom.js";

const REFRESH_MS = 2000;
const HISTORY_SECONDS = 300;
const SVG = "http://www.w3.org/2000/svg";

/** Prometheus text exposition: {name: value} for the samples without labels (and each _sum/_count). */
export function parseMetrics(text) {
  const values = {};
  for (const line of text.split("\n")) {
    const match = /^([A-Za-z_:][A-Za-z0-9_:]*)\s+(\S+)/.exec(line);
    if (match) {
      values[match[1]] = Number(match[2]);
    }
  }
  return values;
}

export class ServerView {
  constructor() {
    this.props = null;
    this.query = "";
    this.timer = null;
    this.history = []; // {t, tokensPerSecond, queue}
    this.last = null; // {t, predicted}
  }

  /** ``routed``: the server is a router, and /slots and /metrics are the model's (``?model=``). */
  configure(props, model, routed = false) {
    this.props = props;
    this.query = routed ? `?model=${encodeURIComponent(model)}` : "";
    this.last = null;
    this.history = [];
    const settings = (props.default_generation_settings || {});
    fillList(byId("props"), [
      ["Model", model],
      ["Model file", props.model_path],
      ["Slots", props.total_slots],
      ["Context per slot", settings.n_ctx],
      ["Chat template", (props.chat_template_caps || {}).jinja ? "Jinja" : "built-in"],
      ["Build", props.build_info],
      ["Sleeping", props.is_sleeping ? "yes" : "no"],
    ]);
    byId("slots-note").textContent = props.endpoint_slots ? "" : "The slots endpoint is off (started with --no-slots).";
    byId("slots").hidden = !props.endpoint_slots;
    byId("metrics-note").textContent = props.endpoint_metrics ? ""
      : "Metrics are off: start the server with --metrics (they are on in Vertex AI mode).";
    byId("metrics").hidden = !props.endpoint_metrics;
    byId("chart").closest("figure").hidden = !props.endpoint_metrics;
  }

  show() {
    if (!this.timer && this.props) {
      this.refresh();
      this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    }
  }

  hide() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async refresh() {
    await Promise.all([
      this.props.endpoint_slots ? this.refreshSlots() : null,
      this.props.endpoint_metrics ? this.refreshMetrics() : null,
    ]);
  }

  async refreshSlots() {
    try {
      const slots = await apiJson(`/slots${this.query}`);
      byId("slots").tBodies[0].replaceChildren(...slots.map((slot) => {
        const next = (slot.next_token || [])[0] || {};
        const state = slot.is_processing ? "processing" : "idle";
        return el("tr", { "data-slot": slot.id, "data-state": state },
          el("td", { text: slot.id }),
          el("td", { class: state, text: state }),
          el("td", { text: slot.n_prompt_tokens ?? "–" }),
          el("td", { text: next.n_decoded ?? "–" }),
          el("td", { text: slot.n_ctx }));
      }));
    } catch (error) {
      byId("slots-note").textContent = `Slots unavailable: ${error.message}`;
    }
  }

  async refreshMetrics() {
    let values;
    try {
      values = parseMetrics(await apiText(`/metrics${this.query}`));
    } catch (error) {
      byId("metrics-note").textContent = `Metrics unavailable: ${error.message}`;
      return;
    }
    const now = Date.now() / 1000;
    const predicted = values["llamacpp:tokens_predicted_total"] || 0;
    const queue = values["llamacpp:requests_deferred"] || 0;
    let tokensPerSecond = 0;
    if (this.last && now > this.last.t) {
      tokensPerSecond = Math.max(0, (predicted - this.last.predicted) / (now - this.last.t));
    }
    this.last = { t: now, predicted };
    this.history.push({ t: now, tokensPerSecond, queue });
    this.history = this.history.filter((point) => now - point.t <= HISTORY_SECONDS);
    fillList(byId("metrics"), [
      ["Generation now", `${tokensPerSecond.toFixed(1)} tokens/s`],
      ["Requests processing", values["llamacpp:requests_processing"] ?? "–"],
      ["Requests waiting", queue],
      ["Prompt tokens (total)", values["llamacpp:prompt_tokens_total"] ?? "–"],
      ["Generated tokens (total)", predicted],
      ["KV cache used", values["vllm:gpu_cache_usage_perc"] === undefined ? "–"
        : `${(100 * values["vllm:gpu_cache_usage_perc"]).toFixed(1)} %`],
    ]);
    this.drawChart(now, tokensPerSecond, queue);
  }

  drawChart(now, tokensPerSecond, queue) {
    const svg = byId("chart");
    const width = 1000;
    const top = 28;
    const bottom = 175;
    const maxTokens = Math.max(1, ...this.history.map((point) => point.tokensPerSecond));
    const maxQueue = Math.max(1, ...this.history.map((point) => point.queue));
    const x = (t) => width - ((now - t) / HISTORY_SECONDS) * width;
    const line = (key, max) => this.history
      .map((point) => `${x(point.t).toFixed(1)},${(bottom - (point[key] / max) * (bottom - top)).toFixed(1)}`).join(" ");
    const node = (tag, attributes, text) => {
      const item = document.createElementNS(SVG, tag);
      for (const [name, value] of Object.entries(attributes)) {
        item.setAttribute(name, value);
      }
      if (text) {
        item.textContent = text;
      }
      return item;
    };
    svg.replaceChildren(
      node("line", { class: "axis", x1: 0, y1: bottom, x2: width, y2: bottom }),
      node("polyline", { class: "tokens", points: line("tokensPerSecond", maxTokens) }),
      node("polyline", { class: "queue", points: line("queue", maxQueue) }),
      node("text", { x: 4, y: 195 }, `−${HISTORY_SECONDS / 60} min`),
      node("text", { x: width - 4, y: 195, "text-anchor": "end" }, "now"),
      node("text", { x: 4, y: 16 }, `tokens/s (solid, top ${maxTokens.toFixed(0)})`),
      node("text", { x: 500, y: 16 }, `queue (dashed, top ${maxQueue})`),
    );
    byId("chart-caption").textContent = `Tokens/s and queue length over the last ${HISTORY_SECONDS / 60} minutes: `
      + `now ${tokensPerSecond.toFixed(1)} tokens/s, ${queue} waiting.`;
  }
}
